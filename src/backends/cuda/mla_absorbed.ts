/**
 * The absorbed form of CUDA MLA attention over one run of consecutive requests of a step
 * (mla_ops.ts attention; kernels native/kernels/mla.h): absorb the queries into the latent space,
 * attend over the latent rows, project through W_UV. A run is the whole step (decode, graph
 * capture) or the requests between expanded-form ones (mla_prefill.ts planRuns).
 */
import type { MlaDims } from "../backend.js";
import { DTYPE_BYTES } from "../backend.js";
import { type DevicePtr, DTYPE_CODE, NULL_PTR, offsetPtr } from "./addon.js";
import type { RequestRun } from "./mla_prefill.js";
import type { CudaOpsContext } from "./ops.js";
import type { CudaTensor } from "./tensor.js";

/** The device metadata of a step (checked by mla_ops.ts). */
export interface StepTables {
  queryStartLoc: DevicePtr;
  seqLens: DevicePtr;
  blockTables: DevicePtr;
  maxBlocksPerReq: number;
  numReqs: number;
}

/** The step-wide operands of mla.attention (shapes checked there). */
export interface AbsorbedStep {
  /** q [T, Hq * (N + R)] (bf16 | f32). */
  q: CudaTensor;
  /** Latent cache [numBlocks, blockSize, C + R] and its DTYPE_CODE. */
  cache: CudaTensor;
  cacheDtype: number;
  /** bf16 kv_b_proj [Hq * (N + Vd), C]. */
  kvBProj: CudaTensor;
  /** [T, Hq * Vd] of q's dtype. */
  out: CudaTensor;
  tables: StepTables;
  blockSize: number;
}

function dim(t: CudaTensor, i: number): number {
  return t.shape[i] ?? 0;
}

/**
 * The absorbed form over one run of consecutive requests: the step's tables offset by run.r0,
 * the token arrays by run.t0 (hsMlaAttention numbers tokens from queryStartLoc[0]).
 */
export function absorbedAttention(
  ctx: CudaOpsContext & { sharedScratch(bytes: number): DevicePtr },
  s: AbsorbedStep,
  run: RequestRun,
  dims: MlaDims,
  sel: CudaTensor | null,
): void {
  const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
  const T = run.t1 - run.t0;
  if (T === 0) return;
  const { tables, blockSize } = s;
  const qAbs = ctx.out([T, Hq, C + R], "f32");
  const oLat = ctx.out([T, Hq, C], "f32");
  const a = ctx.addon;
  const qb = DTYPE_BYTES[s.q.dtype];
  const ob = DTYPE_BYTES[s.out.dtype];
  const q = offsetPtr(s.q.ptr, run.t0 * Hq * (N + R) * qb);
  a.mlaAbsorbQuery(ctx.stream, q, DTYPE_CODE[s.q.dtype], s.kvBProj.ptr, qAbs.ptr, T, Hq, N, R, Vd, C);
  const maxContext = Math.max(1, tables.maxBlocksPerReq * blockSize);
  const K = sel === null ? 0 : dim(sel, 1);
  const wsBytes = a.mlaAttentionWorkspaceBytes(T, Hq, C, sel === null ? maxContext : K);
  a.mlaAttention(ctx.stream, {
    qAbs: qAbs.ptr,
    latentCache: s.cache.ptr,
    cacheDtype: s.cacheDtype,
    oLat: oLat.ptr,
    queryStartLoc: offsetPtr(tables.queryStartLoc, run.r0 * 4),
    seqLens: offsetPtr(tables.seqLens, run.r0 * 4),
    blockTables: offsetPtr(tables.blockTables, run.r0 * tables.maxBlocksPerReq * 4),
    maxBlocksPerReq: tables.maxBlocksPerReq,
    numReqs: run.r1 - run.r0,
    numTokens: T,
    numHeads: Hq,
    rank: C,
    ropeDim: R,
    blockSize,
    scale: dims.softmaxScale,
    topkIndices: sel === null ? NULL_PTR : offsetPtr(sel.ptr, run.t0 * K * 4),
    topkStride: K,
    maxContext,
    workspace: wsBytes > 0 ? ctx.sharedScratch(wsBytes) : NULL_PTR,
    workspaceBytes: wsBytes,
  });
  const out = offsetPtr(s.out.ptr, run.t0 * Hq * Vd * ob);
  a.mlaOutProject(ctx.stream, oLat.ptr, s.kvBProj.ptr, out, DTYPE_CODE[s.out.dtype], T, Hq, N, Vd, C);
}
