/** Helpers of the sparse-attention tests: SparseBatch construction from plain page tables. */
import type { SparseBatch } from "../../../../src/attention/sparse/selector.js";
import { asRequestId } from "../../../../src/core/ids.js";

/** One sparse request of a test batch. */
export interface TestSparseRequest {
  id: string;
  /** Row of the step's batch and of its query token in qkv. */
  batchIdx: number;
  tokenIdx: number;
  numTokens: number;
  /** [numPages] host block of each page. */
  hostBlockIds: number[];
  /** [numPages] device block, -1 = INACTIVE. */
  blockIds: number[];
  pinnedPages?: number[];
  hotBlockIds: number[];
}

/** Flattens test requests into a SparseBatch. */
export function sparseBatch(reqs: TestSparseRequest[]): SparseBatch {
  const S = reqs.length;
  const pageStart = new Int32Array(S + 1);
  const hotStart = new Int32Array(S + 1);
  reqs.forEach((r, s) => {
    pageStart[s + 1] = pageStart[s]! + r.hostBlockIds.length;
    hotStart[s + 1] = hotStart[s]! + r.hotBlockIds.length;
  });
  const pinned = new Uint8Array(pageStart[S]!);
  reqs.forEach((r, s) => {
    for (const p of r.pinnedPages ?? []) pinned[pageStart[s]! + p] = 1;
  });
  return {
    numSparse: S,
    reqIds: reqs.map((r) => asRequestId(r.id)),
    batchIdx: Int32Array.from(reqs.map((r) => r.batchIdx)),
    tokenIdx: Int32Array.from(reqs.map((r) => r.tokenIdx)),
    numTokens: Int32Array.from(reqs.map((r) => r.numTokens)),
    pageStart,
    hostBlockIds: Int32Array.from(reqs.flatMap((r) => r.hostBlockIds)),
    blockIds: Int32Array.from(reqs.flatMap((r) => r.blockIds)),
    pinned,
    hotStart,
    hotBlockIds: Int32Array.from(reqs.flatMap((r) => r.hotBlockIds)),
  };
}

/** Per (request, head) page lists of a selection: [[s0g0...], [s0g1...], ...]. */
export function selected(sel: { start: Int32Array; pages: Int32Array }): number[][] {
  const out: number[][] = [];
  for (let i = 0; i + 1 < sel.start.length; i++)
    out.push([...sel.pages.subarray(sel.start[i]!, sel.start[i + 1]!)]);
  return out;
}
