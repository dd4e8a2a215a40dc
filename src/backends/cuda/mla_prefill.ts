/**
 * MLA attention of long prefill chunks in the expanded form on CUDA (issue 21 item 4; HF
 * DeepseekV3Attention / GlmMoeDsaAttention compute it so; CPU oracle ../cpu/kernels/mla.ts
 * mlaAttentionKernel). Per request of the chunk, with L = its context length after the step:
 * 1. hsMlaGatherLatent: its L paged latent rows -> bf16 [L, C + R] (contiguous), and each row's
 *    k_pe into the key of every head of the group buffer KV (below); the rows of pages whose
 *    device block is -1 from the host tier when the request has one (ExpandedRequest.host);
 * 2. per group of g heads, kv_b_proj by two strided-batched cuBLAS GEMMs (one per head, batched):
 *    KV bf16 [L, g, N + R + Vd] = per head [k_nope = W_UK[h] c_i | k_pe_i | v = W_UV[h] c_i];
 * 3. per tile of q queries (positions P .. P + q - 1, keys [0, P + q)): S f32 [g, q, P + q] (rows
 *    padded to a multiple of 8) =
 *    scale [q_nope | q_pe] . [k_nope | k_pe] (one GEMM, k = N + R), hsMlaPrefillSoftmax (causal,
 *    or the DSA top-k with the absorbed kernel's rule; P in bf16), O = P V straight into the
 *    output rows [t, h * Vd ..] (one GEMM, k = P + q).
 * fp32 accumulation everywhere; k_nope / v and P rounded to bf16 (as any bf16 flash kernel). The
 * scratch (one region of the step's shared scratch, reused by every layer) is bounded by
 * {@link MlaPrefillOptions.scratchBytes}: g and q are chosen to need the fewest tiles within it.
 * Host metadata (meta.host) sizes every GEMM, so this path runs eagerly only, never inside a
 * captured graph (mla_ops.ts keeps the absorbed kernel there and for short query runs).
 */
import type { MlaDims } from "../backend.js";
import { type DevicePtr, DTYPE_CODE, NULL_PTR, offsetPtr } from "./addon.js";
import type { CudaOpsContext } from "./ops.js";

/** When and how the CUDA backend runs MLA attention in the expanded form. */
export interface MlaPrefillOptions {
  /** Requests with at least this many new tokens in a step take the expanded form (Infinity: never). */
  minQueryLen: number;
  /** Bound on the expanded path's scratch in bytes (the step workspace must have room for it). */
  scratchBytes: number;
}

export const DEFAULT_MLA_PREFILL: Readonly<MlaPrefillOptions> = {
  minQueryLen: 64,
  scratchBytes: 512 * 2 ** 20,
};

/** Consecutive requests [r0, r1) of a step, their tokens [t0, t1); expanded runs hold one request. */
export interface RequestRun {
  expanded: boolean;
  r0: number;
  r1: number;
  t0: number;
  t1: number;
}

/**
 * Splits a step into runs covering tokens [0, T): each request of >= minQueryLen new tokens alone
 * (expanded), and each request r with mustExpand[r] = 1 alone (expanded) whatever its length (a
 * request that reads host rows, SpilledRows: only the expanded gather reads them); the others
 * grouped while consecutive (absorbed); tokens past the last request's (padding) form a final
 * absorbed run of no request (the kernel writes zeros for them).
 * qsl: host queryStartLoc [numReqs + 1], qsl[0] = 0; mustExpand: [numReqs] or null (none).
 */
export function planRuns(
  qsl: Int32Array,
  numReqs: number,
  T: number,
  minQueryLen: number,
  mustExpand: Uint8Array | null = null,
): RequestRun[] {
  const runs: RequestRun[] = [];
  const expand = (r: number) => qsl[r + 1]! - qsl[r]! >= minQueryLen || mustExpand?.[r] === 1;
  let r = 0;
  while (r < numReqs) {
    if (expand(r)) {
      runs.push({ expanded: true, r0: r, r1: r + 1, t0: qsl[r]!, t1: qsl[r + 1]! });
      r++;
      continue;
    }
    let r1 = r + 1;
    while (r1 < numReqs && !expand(r1)) r1++;
    runs.push({ expanded: false, r0: r, r1, t0: qsl[r]!, t1: qsl[r1]! });
    r = r1;
  }
  const end = numReqs > 0 ? qsl[numReqs]! : 0;
  if (end < T) runs.push({ expanded: false, r0: numReqs, r1: numReqs, t0: end, t1: T });
  return runs;
}

const ALIGN = 256;
const align = (bytes: number) => Math.ceil(bytes / ALIGN) * ALIGN;
/** Row stride (elements) of S and P for nk keys: a multiple of 8, so cuBLAS keeps 16-byte aligned rows. */
const keyStride = (nk: number) => Math.ceil(nk / 8) * 8;

/** Tiling of one request: g heads per group, q queries per tile, and the scratch layout (bytes). */
export interface PrefillTiles {
  headGroup: number;
  queryTile: number;
  latentBytes: number;
  kvBytes: number;
  scoreBytes: number;
  totalBytes: number;
}

/**
 * The (head group, query tile) that needs the fewest tiles ceil(Hq / g) * ceil(qLen / q) within
 * scratchBytes for a request of qLen new tokens over L positions (ties: the larger group); at
 * least (1, min(qLen, 16)) even past the bound. Tiles of 16 or more queries are multiples of 16.
 */
export function prefillTiles(dims: MlaDims, L: number, qLen: number, scratchBytes: number): PrefillTiles {
  const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
  const latentBytes = align(L * (C + R) * 2);
  const kvOf = (g: number) => align(L * g * (N + R + Vd) * 2);
  const ld = keyStride(L);
  const scoresOf = (g: number, q: number) => align(g * q * ld * 4) + align(g * q * ld * 2);
  let best = { g: 1, q: Math.min(qLen, 16), tiles: Number.POSITIVE_INFINITY };
  for (let g = 1; g <= Hq; g++) {
    const room = scratchBytes - latentBytes - kvOf(g);
    let q = Math.min(qLen, Math.floor(room / (g * ld * 6 + 2 * ALIGN)));
    if (q >= 16) q -= q % 16;
    if (q < 1) break; // larger groups only leave less room
    const tiles = Math.ceil(Hq / g) * Math.ceil(qLen / q);
    if (tiles <= best.tiles) best = { g, q, tiles };
  }
  const { g, q } = best;
  const kvBytes = kvOf(g);
  const scoreBytes = scoresOf(g, q);
  return {
    headGroup: g,
    queryTile: q,
    latentBytes,
    kvBytes,
    scoreBytes,
    totalBytes: latentBytes + kvBytes + scoreBytes,
  };
}

/** One request of a step in the expanded form (device pointers; the shapes of mla_ops.attention). */
export interface ExpandedRequest {
  /** bf16 q [T, Hq * (N + R)] of the step. */
  q: DevicePtr;
  /** Latent cache [numBlocks, blockSize, C + R] and its dtype code. */
  cache: DevicePtr;
  cacheDtype: number;
  /** bf16 kv_b_proj [Hq * (N + Vd), C]. */
  kvBProj: DevicePtr;
  /** out [T, Hq * Vd] of outDtype (DTYPE_CODE). */
  out: DevicePtr;
  outDtype: number;
  /** i32 [numReqs, maxBlocksPerReq] of the step. */
  blockTables: DevicePtr;
  maxBlocksPerReq: number;
  blockSize: number;
  /** The request's row of the tables, its first token in the step, new tokens, length after the step. */
  req: number;
  t0: number;
  qLen: number;
  seqLen: number;
  /** i32 [T, topkStride] DSA selections of the step, or NULL_PTR (dense causal). */
  topk: DevicePtr;
  topkStride: number;
  /** Where the gather reads the rows of the request's -1 device blocks (SpilledRows); absent: nowhere. */
  host?: HostRowSource;
}

/** The host tier of one layer as the gather reads it (device-visible pointers, mapped pinned memory). */
export interface HostRowSource {
  /** [numHostBlocks, blockSize, C + R] of the latent cache's dtype (ExpandedRequest.cacheDtype). */
  rows: DevicePtr;
  /** i32 [numReqs, maxBlocksPerReq] of the step: the host block of every page. */
  blockTables: DevicePtr;
  /** Columns of blockTables (> 0). */
  maxBlocksPerReq: number;
}

/**
 * Expanded MLA attention of one request (see the file comment) on ctx's stream; writes rows
 * [t0, t0 + qLen) of out. scratch: at least prefillTiles(...).totalBytes, 256-byte aligned.
 */
export function expandedAttention(
  ctx: CudaOpsContext,
  x: ExpandedRequest,
  dims: MlaDims,
  tiles: PrefillTiles,
  scratch: DevicePtr,
): void {
  const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
  const { addon: a, blas, stream } = ctx;
  const L = x.seqLen;
  const D = C + R;
  const H = N + R + Vd; // one head's [k_nope | k_pe | v] in KV
  const g = tiles.headGroup;
  const kvLd = g * H;
  const qRow = Hq * (N + R);
  const bf16 = DTYPE_CODE.bf16;
  const f32 = DTYPE_CODE.f32;
  const outBytes = x.outDtype === f32 ? 4 : 2;
  const latent = scratch;
  const kv = offsetPtr(scratch, tiles.latentBytes);
  const scores = offsetPtr(kv, tiles.kvBytes);
  a.mlaGatherLatent(
    stream,
    x.cache,
    x.cacheDtype,
    x.blockTables,
    x.maxBlocksPerReq,
    x.host?.rows ?? NULL_PTR,
    x.host?.blockTables ?? NULL_PTR,
    x.host?.maxBlocksPerReq ?? 0,
    x.req,
    x.blockSize,
    D,
    C,
    L,
    latent,
    R > 0 ? kv : NULL_PTR,
    kvLd,
    N,
    H,
    g,
  );
  const keyLimit = x.maxBlocksPerReq * x.blockSize;
  for (let h0 = 0; h0 < Hq; h0 += g) {
    const gh = Math.min(g, Hq - h0);
    // KV[i, h, 0:N] = W_UK[h0 + h] c_i; KV[i, h, N + R:] = W_UV[h0 + h] c_i (column-major: m rows of W).
    for (const [rows, wRow, col] of [
      [N, 0, 0],
      [Vd, N, N + R],
    ] as const)
      blas.gemmStridedBatched(
        stream,
        true,
        false,
        rows,
        L,
        C,
        1,
        offsetPtr(x.kvBProj, (h0 * (N + Vd) + wRow) * C * 2),
        C,
        (N + Vd) * C,
        latent,
        D,
        0,
        0,
        offsetPtr(kv, col * 2),
        kvLd,
        H,
        gh,
        bf16,
        bf16,
      );
    for (let i0 = 0; i0 < x.qLen; i0 += tiles.queryTile) {
      const nq = Math.min(tiles.queryTile, x.qLen - i0);
      const first = L - x.qLen + i0; // position of the tile's first query
      const nk = first + nq;
      const ld = keyStride(nk);
      const probs = offsetPtr(scores, align(gh * nq * ld * 4));
      const t = x.t0 + i0;
      // S[h, i, j] = scale * K[j, h] . q[t + i, h] (both N + R wide).
      blas.gemmStridedBatched(
        stream,
        true,
        false,
        nk,
        nq,
        N + R,
        dims.softmaxScale,
        kv,
        kvLd,
        H,
        offsetPtr(x.q, (t * qRow + h0 * (N + R)) * 2),
        qRow,
        N + R,
        0,
        scores,
        ld,
        nq * ld,
        gh,
        bf16,
        f32,
      );
      a.mlaPrefillSoftmax(
        stream,
        scores,
        probs,
        gh,
        nq,
        nk,
        ld,
        first,
        keyLimit,
        x.topk === NULL_PTR ? NULL_PTR : offsetPtr(x.topk, t * x.topkStride * 4),
        x.topkStride,
      );
      // out[t + i, (h0 + h) Vd + v] = sum_j P[h, i, j] V[j, h, v].
      blas.gemmStridedBatched(
        stream,
        false,
        false,
        Vd,
        nq,
        nk,
        1,
        offsetPtr(kv, (N + R) * 2),
        kvLd,
        H,
        probs,
        ld,
        nq * ld,
        0,
        offsetPtr(x.out, (t * Hq * Vd + h0 * Vd) * outBytes),
        Hq * Vd,
        Vd,
        gh,
        bf16,
        x.outDtype,
      );
    }
  }
}
