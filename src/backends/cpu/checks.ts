import type { AttentionMetadata, PerHeadBlockTables, QkvLayout, Tensor } from "../backend.js";
import type { CpuMemory } from "./memory.js";
import { type CpuDType, CpuTensor, describe } from "./tensor.js";

/**
 * Argument checks of the CPU backend's ops. A failed check is a programming error of the caller
 * (Backend contract): it throws an Error naming the op and the offending tensor.
 */

/**
 * Narrows a Tensor to a live CpuTensor of the expected dtype.
 * @param allowFreed accept a freed persistent tensor (for free()).
 * @param dtype the expected dtype; "any" accepts both.
 * @throws Error for a foreign tensor, a freed tensor, a workspace tensor of an older step, or a
 *   dtype mismatch.
 */
export function cpu(
  t: Tensor,
  mem: CpuMemory,
  what: string,
  allowFreed = false,
  dtype: CpuDType | "any" = "f32",
): CpuTensor {
  if (!(t instanceof CpuTensor)) throw new Error(`${what}: not a CPU backend tensor`);
  if (t.buffer.freed && !allowFreed) throw new Error(`${what}: tensor ${describe(t)} was freed`);
  if (!t.persistent && t.epoch !== mem.epoch)
    throw new Error(`${what}: workspace tensor used after resetWorkspace()`);
  if (dtype !== "any" && t.dtype !== dtype) throw new Error(`${what}: expected ${dtype}, got ${describe(t)}`);
  return t;
}

/**
 * Checks a tensor's rank or dims (-1 matches any size) and returns its shape.
 * @throws Error on a mismatch.
 */
export function expectShape(t: CpuTensor, rank: 1, what: string): [number];
export function expectShape(t: CpuTensor, rank: 2, what: string): [number, number];
export function expectShape(t: CpuTensor, dims: readonly number[], what: string): number[];
export function expectShape(t: CpuTensor, spec: number | readonly number[], what: string): number[] {
  const s = t.shape;
  const ok =
    typeof spec === "number"
      ? s.length === spec
      : s.length === spec.length && spec.every((d, i) => d === -1 || d === s[i]);
  if (!ok) {
    const want =
      typeof spec === "number" ? `rank ${spec}` : `[${spec.map((d) => (d === -1 ? "*" : d)).join(", ")}]`;
    throw new Error(`${what}: expected ${want}, got ${describe(t)}`);
  }
  return [...s];
}

/**
 * Checks a fused qkv tensor against its layout and returns the token count T.
 * @throws Error when the shape is not [T, (Hq + 2 * Hkv) * D] or Hq is not a multiple of Hkv.
 */
export function checkQkv(qkv: CpuTensor, layout: QkvLayout, op: string): number {
  const { numHeads, numKvHeads, headDim } = layout;
  if (numKvHeads < 1 || numHeads % numKvHeads !== 0) {
    throw new Error(`${op}: ${numHeads} q heads are not a multiple of ${numKvHeads} kv heads`);
  }
  return expectShape(qkv, [-1, (numHeads + 2 * numKvHeads) * headDim], `${op} qkv`)[0]!;
}

/** Checked attention metadata, ready for the kernel. */
export interface CheckedMetadata {
  qsl: CpuTensor;
  seqLens: CpuTensor;
  blockTables: CpuTensor;
  maxBlocksPerReq: number;
  /** seqLens [R, Hkv] and blockTables [R, Hkv, maxBlocksPerReq] (sparse) instead of [R], [R, *]. */
  perHead: boolean;
  /** Query-key pairs of the step: the sum over query tokens of their context length (mean over kv heads). */
  pairs: number;
}

/**
 * Validates AttentionMetadata for a step of T tokens against a cache of numBlocks blocks:
 * queryStartLoc starts at 0, never decreases and ends at T; every seqLen covers its query
 * tokens; every block a request reads is a valid block id.
 * block -1 is allowed only for the requests spilledReqs flags (their rows come from the host
 * tier: BackendMlaOps SpilledRows).
 * @throws Error naming the first inconsistency.
 */
export function checkAttentionMetadata(
  meta: AttentionMetadata,
  mem: CpuMemory,
  T: number,
  numBlocks: number,
  blockSize: number,
  spilledReqs: Uint8Array | null = null,
): CheckedMetadata {
  const R = meta.numReqs;
  const qsl = cpu(meta.queryStartLoc, mem, "pagedAttention queryStartLoc", false, "i32");
  expectShape(qsl, [R + 1], "pagedAttention queryStartLoc");
  const seqLens = cpu(meta.seqLens, mem, "pagedAttention seqLens", false, "i32");
  expectShape(seqLens, [R], "pagedAttention seqLens");
  const blockTables = cpu(meta.blockTables, mem, "pagedAttention blockTables", false, "i32");
  const maxBlocksPerReq = expectShape(blockTables, [R, -1], "pagedAttention blockTables")[1]!;
  const q = qsl.i32;
  if (q[0] !== 0 || q[R] !== T)
    throw new Error(`pagedAttention: queryStartLoc must run from 0 to ${T}, got ${q[0]}..${q[R]}`);
  let pairs = 0;
  for (let r = 0; r < R; r++) {
    const qLen = q[r + 1]! - q[r]!;
    const L = seqLens.i32[r]!;
    if (qLen < 0 || L < qLen)
      throw new Error(`pagedAttention: request ${r} has ${qLen} query tokens and seqLen ${L}`);
    const nb = Math.ceil(L / blockSize);
    if (nb > maxBlocksPerReq)
      throw new Error(`pagedAttention: request ${r} needs ${nb} blocks, its table holds ${maxBlocksPerReq}`);
    for (let i = 0; i < nb; i++) {
      const b = blockTables.i32[r * maxBlocksPerReq + i]!;
      if (b === -1 && spilledReqs?.[r] === 1) continue; // read from the host tier (SpilledRows)
      if (b < 0 || b >= numBlocks)
        throw new Error(`pagedAttention: request ${r} block ${i} is ${b}, outside [0, ${numBlocks})`);
    }
    pairs += qLen * (L - qLen) + (qLen * (qLen + 1)) / 2;
  }
  return { qsl, seqLens, blockTables, maxBlocksPerReq, perHead: false, pairs };
}

/**
 * Validates per-(request, kv head) block tables (Backend.sparsePagedAttention) for a step of T
 * tokens against a cache of numBlocks blocks: queryStartLoc as in {@link checkAttentionMetadata};
 * seqLens [R, Hkv] and blockTables [R, Hkv, maxBlocks]; every (r, g) row covers the request's
 * query tokens and names valid blocks.
 * @throws Error naming the first inconsistency.
 */
export function checkPerHeadTables(
  meta: AttentionMetadata,
  tables: PerHeadBlockTables,
  mem: CpuMemory,
  T: number,
  Hkv: number,
  numBlocks: number,
  blockSize: number,
): CheckedMetadata {
  const op = "sparsePagedAttention";
  const R = meta.numReqs;
  const qsl = cpu(meta.queryStartLoc, mem, `${op} queryStartLoc`, false, "i32");
  expectShape(qsl, [R + 1], `${op} queryStartLoc`);
  const seqLens = cpu(tables.seqLens, mem, `${op} seqLens`, false, "i32");
  expectShape(seqLens, [R, Hkv], `${op} seqLens`);
  const blockTables = cpu(tables.blockTables, mem, `${op} blockTables`, false, "i32");
  const maxBlocks = expectShape(blockTables, [R, Hkv, -1], `${op} blockTables`)[2]!;
  const q = qsl.i32;
  if (q[0] !== 0 || q[R] !== T)
    throw new Error(`${op}: queryStartLoc must run from 0 to ${T}, got ${q[0]}..${q[R]}`);
  let pairs = 0;
  for (let r = 0; r < R; r++) {
    const qLen = q[r + 1]! - q[r]!;
    for (let g = 0; g < Hkv; g++) {
      const L = seqLens.i32[r * Hkv + g]!;
      if (qLen < 0 || L < qLen)
        throw new Error(`${op}: request ${r} kv head ${g} has ${qLen} query tokens and seqLen ${L}`);
      const nb = Math.ceil(L / blockSize);
      if (nb > maxBlocks)
        throw new Error(`${op}: request ${r} kv head ${g} needs ${nb} blocks, its table holds ${maxBlocks}`);
      const row = (r * Hkv + g) * maxBlocks;
      for (let i = 0; i < nb; i++) {
        const b = blockTables.i32[row + i]!;
        if (b < 0 || b >= numBlocks)
          throw new Error(`${op}: request ${r} kv head ${g} block ${i} is ${b}, outside [0, ${numBlocks})`);
      }
      pairs += (qLen * (L - qLen) + (qLen * (qLen + 1)) / 2) / Hkv;
    }
  }
  return { qsl, seqLens, blockTables, maxBlocksPerReq: maxBlocks, perHead: true, pairs: Math.ceil(pairs) };
}
