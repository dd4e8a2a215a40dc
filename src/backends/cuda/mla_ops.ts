/**
 * The CUDA backend's multi-head latent attention and DSA indexer ops (Backend.mla; contract in
 * ../backend.ts, CPU oracle ../cpu/mla_ops.ts): shape and dtype checks in TS, then the launchers
 * of native/kernels/mla.h. Every output and intermediate comes from the step workspace, every
 * count stays in device memory (queryStartLoc, seqLens, block tables, selections), and every grid
 * depends on T, the model dims and static bounds only (the block-table width, `width`, `k`), so
 * an MLA layer replays inside the decode CUDA graphs with no host round trip.
 *
 * Attention runs in the absorbed form for decode and short query runs (mla.h): q projected into
 * the latent space through W_UK, MQA over the C + R wide latent rows (all causal rows, or the DSA
 * selection), the result through W_UV. Outside graph capture, requests of at least
 * `prefill.minQueryLen` new tokens (bf16 q) take the expanded form instead, on tensor cores
 * (mla_prefill.ts: k_nope / v per head from kv_b_proj, S = Q K^T and O = P V by cuBLAS, a masked
 * softmax kernel); a step mixing both runs each request through its own form. A request flagged
 * in `spilled` (SpilledRows, mla_spilled.ts) always takes the expanded form: its gather reads the
 * rows of its host-resident pages from the pinned host tier.
 */
import type {
  AttentionMetadata,
  BackendMlaOps,
  DType,
  IndexerScales,
  MlaDims,
  RotarySpan,
  SpilledRows,
  Tensor,
} from "../backend.js";
import { DTYPE_BYTES } from "../backend.js";
import { type DevicePtr, DTYPE_CODE, MLA_LIMITS, NULL_PTR } from "./addon.js";
import { absorbedAttention } from "./mla_absorbed.js";
import {
  DEFAULT_MLA_PREFILL,
  expandedAttention,
  type MlaPrefillOptions,
  planRuns,
  prefillTiles,
  type RequestRun,
} from "./mla_prefill.js";
import { spilledSource } from "./mla_spilled.js";
import type { CudaOpsContext } from "./ops.js";
import { type CudaTensor, describe, expectDtype, expectShape } from "./tensor.js";

/** Storage dtypes of the MLA kernels. */
const ROW_DTYPES: readonly DType[] = ["f32", "bf16"];

/** What the MLA ops need from the backend beyond the ops context. */
export interface CudaMlaContext extends CudaOpsContext {
  /** Workspace scratch shared by the launches of one step (StepWorkspace.sharedScratch). */
  sharedScratch(bytes: number): DevicePtr;
  /** A persistent tensor with every byte set to byteValue. */
  allocateFilled(shape: readonly number[], dtype: DType, byteValue?: number): Tensor;
  /** Graph capture state: the expanded prefill (host-sized GEMMs) never runs inside a capture. */
  readonly graphs: { readonly isCapturing: boolean };
}

function dim(t: Tensor, i: number): number {
  return t.shape[i] ?? 0;
}

/** The device metadata tensors of a step, checked. */
function stepTables(ctx: CudaOpsContext, meta: AttentionMetadata, what: string) {
  const n = meta.numReqs;
  expectShape(meta.queryStartLoc, `${what} queryStartLoc`, [n + 1]);
  expectShape(meta.seqLens, `${what} seqLens`, [n]);
  expectShape(meta.blockTables, `${what} blockTables`, [n, null]);
  for (const [t, name] of [
    [meta.queryStartLoc, "queryStartLoc"],
    [meta.seqLens, "seqLens"],
    [meta.blockTables, "blockTables"],
  ] as const)
    expectDtype(t, `${what} ${name}`, ["i32"]);
  return {
    queryStartLoc: ctx.dev(meta.queryStartLoc, `${what} queryStartLoc`).ptr,
    seqLens: ctx.dev(meta.seqLens, `${what} seqLens`).ptr,
    blockTables: ctx.dev(meta.blockTables, `${what} blockTables`).ptr,
    maxBlocksPerReq: dim(meta.blockTables, 1),
    numReqs: n,
  };
}

export class CudaMlaOps implements BackendMlaOps {
  /** When attention takes the expanded form (mla_prefill.ts); minQueryLen Infinity: never. */
  readonly prefill: MlaPrefillOptions = { ...DEFAULT_MLA_PREFILL };

  constructor(private readonly ctx: CudaMlaContext) {}

  /** A zeroed [numBlocks, blockSize, rowWidth] of bf16 (the KV dtype) or f32. @throws Error otherwise. */
  allocatePagedRows(numBlocks: number, blockSize: number, rowWidth: number, dtype: DType): Tensor {
    if (!ROW_DTYPES.includes(dtype))
      throw new Error(
        `mla.allocatePagedRows: the CUDA backend keeps row caches in bf16 or f32, got ${dtype}`,
      );
    for (const [n, v] of [
      ["numBlocks", numBlocks],
      ["blockSize", blockSize],
      ["rowWidth", rowWidth],
    ] as const)
      if (!(Number.isInteger(v) && v >= 1))
        throw new Error(`mla.allocatePagedRows: ${n} must be a positive integer, got ${v}`);
    return this.ctx.allocateFilled([numBlocks, blockSize, rowWidth], dtype, 0);
  }

  /** x: [T, W] -> [T, width]. @throws Error when the columns are outside the row. */
  sliceColumns(x: Tensor, start: number, width: number): Tensor {
    const { ctx } = this;
    const xt = ctx.dev(x, "mla.sliceColumns x");
    expectShape(x, "mla.sliceColumns x", [null, null]);
    const [T, W] = [dim(x, 0), dim(x, 1)];
    if (
      !(Number.isInteger(start) && Number.isInteger(width) && start >= 0 && width >= 0 && start + width <= W)
    )
      throw new Error(`mla.sliceColumns: columns [${start}, ${start + width}) are outside a row of ${W}`);
    const out = ctx.out([T, width], x.dtype);
    ctx.addon.mlaSliceColumns(ctx.stream, xt.ptr, out.ptr, T, W, start, width, DTYPE_BYTES[x.dtype]);
    return out;
  }

  /** x: [T, n]; weight, bias: [n] -> [T, n] (x's dtype). */
  layerNorm(x: Tensor, weight: Tensor, bias: Tensor, eps: number): Tensor {
    const { ctx } = this;
    const xt = ctx.dev(x, "mla.layerNorm x");
    const w = ctx.dev(weight, "mla.layerNorm weight");
    const b = ctx.dev(bias, "mla.layerNorm bias");
    expectShape(x, "mla.layerNorm x", [null, null]);
    expectDtype(x, "mla.layerNorm x", ROW_DTYPES);
    const [T, n] = [dim(x, 0), dim(x, 1)];
    expectShape(weight, "mla.layerNorm weight", [n]);
    expectDtype(weight, "mla.layerNorm weight", ROW_DTYPES);
    expectShape(bias, "mla.layerNorm bias", [n]);
    expectDtype(bias, "mla.layerNorm bias", [weight.dtype]);
    const out = ctx.out([T, n], x.dtype);
    ctx.addon.mlaLayerNorm(
      ctx.stream,
      xt.ptr,
      w.ptr,
      b.ptr,
      out.ptr,
      T,
      n,
      eps,
      DTYPE_CODE[x.dtype],
      DTYPE_CODE[weight.dtype],
    );
    return out;
  }

  /**
   * In place. x: [T, W]; positions: i32 [T]; cosSinCache: f32 [maxPositions, R]. A position outside
   * the table leaves its row unchanged (a device kernel cannot throw; the CPU backend does).
   * @throws Error for a span outside the row.
   */
  rotaryStrided(
    x: Tensor,
    span: RotarySpan,
    positions: Tensor,
    cosSinCache: Tensor,
    interleaved: boolean,
  ): void {
    const { ctx } = this;
    const xt = ctx.dev(x, "mla.rotaryStrided x");
    expectShape(x, "mla.rotaryStrided x", [null, null]);
    expectDtype(x, "mla.rotaryStrided x", ROW_DTYPES);
    const [T, W] = [dim(x, 0), dim(x, 1)];
    const pos = ctx.dev(positions, "mla.rotaryStrided positions");
    expectShape(positions, "mla.rotaryStrided positions", [T]);
    expectDtype(positions, "mla.rotaryStrided positions", ["i32"]);
    const cs = ctx.dev(cosSinCache, "mla.rotaryStrided cosSinCache");
    expectShape(cosSinCache, "mla.rotaryStrided cosSinCache", [null, null]);
    expectDtype(cosSinCache, "mla.rotaryStrided cosSinCache", ["f32"]);
    const [maxPos, R] = [dim(cosSinCache, 0), dim(cosSinCache, 1)];
    const { offset, stride, count } = span;
    if (R % 2 !== 0 || offset < 0 || count < 1 || offset + (count - 1) * stride + R > W)
      throw new Error(
        `mla.rotaryStrided: ${count} heads of ${R} at ${offset} + h * ${stride} do not fit a row of ${W}`,
      );
    ctx.addon.mlaRotaryStrided(
      ctx.stream,
      xt.ptr,
      DTYPE_CODE[x.dtype],
      pos.ptr,
      cs.ptr,
      T,
      W,
      offset,
      stride,
      count,
      R,
      maxPos,
      interleaved,
    );
  }

  /**
   * src: [T, W]; cache: [numBlocks, blockSize, rowWidth]; slotMapping: i32 [T]. A slot outside
   * the cache is skipped (the CPU backend throws). @throws Error for columns outside the row.
   */
  writeRows(src: Tensor, cache: Tensor, dstColumn: number, slotMapping: Tensor): void {
    const { ctx } = this;
    const s = ctx.dev(src, "mla.writeRows src");
    expectShape(src, "mla.writeRows src", [null, null]);
    expectDtype(src, "mla.writeRows src", ROW_DTYPES);
    const [T, W] = [dim(src, 0), dim(src, 1)];
    const c = ctx.dev(cache, "mla.writeRows cache");
    expectShape(cache, "mla.writeRows cache", [null, null, null]);
    expectDtype(cache, "mla.writeRows cache", ROW_DTYPES);
    const rowWidth = dim(cache, 2);
    if (!(Number.isInteger(dstColumn) && dstColumn >= 0 && dstColumn + W <= rowWidth))
      throw new Error(
        `mla.writeRows: columns [${dstColumn}, ${dstColumn + W}) are outside a row of ${rowWidth}`,
      );
    const slots = ctx.dev(slotMapping, "mla.writeRows slotMapping");
    expectShape(slotMapping, "mla.writeRows slotMapping", [T]);
    expectDtype(slotMapping, "mla.writeRows slotMapping", ["i32"]);
    ctx.addon.mlaWriteRows(
      ctx.stream,
      s.ptr,
      DTYPE_CODE[src.dtype],
      c.ptr,
      DTYPE_CODE[cache.dtype],
      slots.ptr,
      T,
      W,
      rowWidth,
      dstColumn,
      dim(cache, 0) * dim(cache, 1),
    );
  }

  /**
   * Absorbed MLA attention (mla.h): q: [T, Hq * (N + R)] (bf16 | f32); latentCache: [numBlocks,
   * blockSize, C + R]; kvBProj: bf16 [Hq * (N + Vd), C]; topkIndices: i32 [T, K] or null -> [T,
   * Hq * Vd] of q's dtype. Selected positions outside [0, p] are skipped (the CPU backend throws).
   * spilled (mla_spilled.ts): each flagged request runs alone in the expanded form, whose gather
   * reads its -1 blocks' rows from hostRows (mapped pinned [numHostBlocks, blockSize, C + R] of
   * latentCache's dtype); the other requests run as without it.
   * @throws Error on shapes, dtypes or dims beyond the kernels' limits; with a flagged request,
   *   when q is not bf16, during graph capture, or on hostRows' / hostBlockTables' shapes.
   */
  attention(
    q: Tensor,
    latentCache: Tensor,
    kvBProj: Tensor,
    meta: AttentionMetadata,
    dims: MlaDims,
    blockSize: number,
    topkIndices: Tensor | null,
    spilled?: SpilledRows | null,
  ): Tensor {
    const { ctx } = this;
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
    if (C > MLA_LIMITS.maxRank || C + R > MLA_LIMITS.maxRow)
      throw new Error(
        `mla.attention: the CUDA kernels take kv_lora_rank <= ${MLA_LIMITS.maxRank} and latent rows <= ${MLA_LIMITS.maxRow}, got ${C} + ${R}`,
      );
    const qt = ctx.dev(q, "mla.attention q");
    const T = meta.numTokens;
    expectShape(q, "mla.attention q", [T, Hq * (N + R)]);
    expectDtype(q, "mla.attention q", ROW_DTYPES);
    const cache = ctx.dev(latentCache, "mla.attention latentCache");
    expectShape(latentCache, "mla.attention latentCache", [null, blockSize, C + R]);
    expectDtype(latentCache, "mla.attention latentCache", ROW_DTYPES);
    const w = ctx.dev(kvBProj, "mla.attention kvBProj");
    expectShape(kvBProj, "mla.attention kvBProj", [Hq * (N + Vd), C]);
    expectDtype(kvBProj, "mla.attention kvBProj", ["bf16"]);
    let sel: CudaTensor | null = null;
    if (topkIndices !== null) {
      sel = ctx.dev(topkIndices, "mla.attention topkIndices");
      expectShape(topkIndices, "mla.attention topkIndices", [T, null]);
      expectDtype(topkIndices, "mla.attention topkIndices", ["i32"]);
      if (dim(topkIndices, 1) < 1) throw new Error("mla.attention: topkIndices has no columns");
    }
    const tables = stepTables(ctx, meta, "mla.attention");
    const host = spilledSource(ctx, spilled, meta, q, latentCache, blockSize, C + R);
    const out = ctx.out([T, Hq * Vd], q.dtype);
    if (T === 0) return out;
    const { minQueryLen, scratchBytes } = this.prefill;
    const all: RequestRun = { expanded: false, r0: 0, r1: tables.numReqs, t0: 0, t1: T };
    const runs =
      q.dtype === "bf16" && !ctx.graphs.isCapturing && (meta.maxQueryLen >= minQueryLen || host !== null)
        ? planRuns(meta.host.queryStartLoc, tables.numReqs, T, minQueryLen, host?.flags)
        : [all];
    const step = {
      q: qt,
      cache,
      cacheDtype: DTYPE_CODE[latentCache.dtype],
      kvBProj: w,
      out,
      tables,
      blockSize,
    };
    for (const run of runs) {
      if (!run.expanded) {
        absorbedAttention(ctx, step, run, dims, sel);
        continue;
      }
      const seqLen = meta.host.seqLens[run.r0]!;
      const qLen = run.t1 - run.t0;
      const tiles = prefillTiles(dims, seqLen, qLen, scratchBytes);
      const request = {
        q: qt.ptr,
        cache: cache.ptr,
        cacheDtype: step.cacheDtype,
        kvBProj: w.ptr,
        out: out.ptr,
        outDtype: DTYPE_CODE[out.dtype],
        blockTables: tables.blockTables,
        maxBlocksPerReq: tables.maxBlocksPerReq,
        blockSize,
        req: run.r0,
        t0: run.t0,
        qLen,
        seqLen,
        topk: sel?.ptr ?? NULL_PTR,
        topkStride: sel === null ? 0 : dim(sel, 1),
        host: host?.flags[run.r0] === 1 ? host.source : undefined,
      };
      expandedAttention(ctx, request, dims, tiles, ctx.sharedScratch(tiles.totalBytes));
    }
    return out;
  }

  /**
   * q: [T, Hi * Di]; headWeights: [T, Hi] (q's dtype); indexKeyCache: [numBlocks, blockSize, Di]
   * -> f32 [T, width]. @throws Error when width < meta.maxSeqLen, on shapes, or past the kernel's limits.
   */
  indexerLogits(
    q: Tensor,
    headWeights: Tensor,
    indexKeyCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
    scales: IndexerScales,
    width: number,
  ): Tensor {
    const { ctx } = this;
    const keys = ctx.dev(indexKeyCache, "mla.indexerLogits indexKeyCache");
    expectShape(indexKeyCache, "mla.indexerLogits indexKeyCache", [null, blockSize, null]);
    expectDtype(indexKeyCache, "mla.indexerLogits indexKeyCache", ROW_DTYPES);
    const Di = dim(indexKeyCache, 2);
    const w = ctx.dev(headWeights, "mla.indexerLogits headWeights");
    expectShape(headWeights, "mla.indexerLogits headWeights", [null, null]);
    expectDtype(headWeights, "mla.indexerLogits headWeights", ROW_DTYPES);
    const [T, Hi] = [dim(headWeights, 0), dim(headWeights, 1)];
    const qt = ctx.dev(q, "mla.indexerLogits q");
    expectShape(q, "mla.indexerLogits q", [T, Hi * Di]);
    expectDtype(q, "mla.indexerLogits q", [headWeights.dtype]);
    if (Hi > MLA_LIMITS.maxIndexHeads || Di > MLA_LIMITS.maxIndexDim || Di % 32 !== 0)
      throw new Error(
        `mla.indexerLogits: the CUDA kernel takes <= ${MLA_LIMITS.maxIndexHeads} heads of a multiple of 32 up to ${MLA_LIMITS.maxIndexDim}, got ${Hi} x ${Di}`,
      );
    if (indexKeyCache.dtype !== q.dtype)
      throw new Error(
        `mla.indexerLogits: the index keys (${describe(indexKeyCache)}) must have the queries' dtype ${q.dtype}`,
      );
    if (!(Number.isInteger(width) && width >= 1 && width >= meta.maxSeqLen))
      throw new Error(
        `mla.indexerLogits: width ${width} is below the step's longest context (${meta.maxSeqLen})`,
      );
    const tables = stepTables(ctx, meta, "mla.indexerLogits");
    const logits = ctx.out([T, width], "f32");
    if (T === 0) return logits;
    ctx.addon.mlaIndexerLogits(ctx.stream, {
      q: qt.ptr,
      headWeights: w.ptr,
      qDtype: DTYPE_CODE[q.dtype],
      indexKeys: keys.ptr,
      keyDtype: DTYPE_CODE[indexKeyCache.dtype],
      logits: logits.ptr,
      ...tables,
      numTokens: T,
      numHeads: Hi,
      headDim: Di,
      blockSize,
      softmaxScale: scales.softmaxScale,
      headWeightScale: scales.headWeightScale,
      width,
    });
    return logits;
  }

  /** logits: f32 [T, width]; positions: i32 [T] -> i32 [T, k] (radix select, the CPU oracle's order). */
  topkIndices(logits: Tensor, positions: Tensor, k: number): Tensor {
    const { ctx } = this;
    const l = ctx.dev(logits, "mla.topkIndices logits");
    expectShape(logits, "mla.topkIndices logits", [null, null]);
    expectDtype(logits, "mla.topkIndices logits", ["f32"]);
    const [T, width] = [dim(logits, 0), dim(logits, 1)];
    const pos = ctx.dev(positions, "mla.topkIndices positions");
    expectShape(positions, "mla.topkIndices positions", [T]);
    expectDtype(positions, "mla.topkIndices positions", ["i32"]);
    if (!(Number.isInteger(k) && k >= 1))
      throw new Error(`mla.topkIndices: k must be a positive integer, got ${k}`);
    const out = ctx.out([T, k], "i32");
    if (T > 0) ctx.addon.mlaTopk(ctx.stream, l.ptr, pos.ptr, out.ptr, T, width, k);
    return out;
  }
}
