/**
 * The worker side of a streaming prefill (core/hisparse/hybrid_policy.ts `spillsPrefill`): which
 * of a step's requests prefill beside host-resident pages, and the block tables that say so.
 */
import type { StreamedPrefill } from "../../attention/sparse/selector.js";
import type { AttentionMetadata, Backend } from "../../backends/backend.js";

/**
 * The step's {@link StreamedPrefill}, or null when no request needs one: a request that does not
 * decode sparsely this step and whose device row names -1 for one of its pages. Its row of the
 * step's tables is replaced by the worker's (the step's tables come from the scheduler's block
 * lists, which still name a spilled page's old block).
 * @param deviceRow the worker's device blocks of row r's request (-1 for INACTIVE pages).
 * @param sparse true for the rows that decode sparsely (their attention reads a resolved view).
 * @throws Error when a row's worker table is shorter than its context.
 */
export function streamedPrefillOf(
  backend: Backend,
  meta: AttentionMetadata,
  blockSize: number,
  deviceRow: (r: number) => ArrayLike<number>,
  sparse: (r: number) => boolean,
): StreamedPrefill | null {
  const R = meta.numReqs;
  const { blockTables, maxBlocksPerReq: width, seqLens } = meta.host;
  let rows: Uint8Array | null = null;
  let tables: Int32Array | null = null;
  for (let r = 0; r < R; r++) {
    if (sparse(r)) continue;
    const row = deviceRow(r);
    const pages = Math.ceil(seqLens[r]! / blockSize);
    if (row.length < pages)
      throw new Error(
        `row ${r} has ${row.length} pages in the worker's table for a context of ${seqLens[r]}`,
      );
    let host = false;
    for (let p = 0; p < pages && !host; p++) host = row[p]! < 0;
    if (!host) continue;
    rows ??= new Uint8Array(R);
    tables ??= blockTables.slice();
    rows[r] = 1;
    for (let p = 0; p < pages; p++) tables[r * width + p] = row[p]!;
  }
  if (rows === null || tables === null) return null;
  return {
    rows,
    meta: {
      ...meta,
      blockTables: backend.stage(tables, [R, width], "i32"),
      host: { ...meta.host, blockTables: tables },
    },
  };
}
