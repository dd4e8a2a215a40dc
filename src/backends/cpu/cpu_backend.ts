import { availableParallelism, freemem, totalmem } from "node:os";
import type { LayerKvScales } from "../../core/kv/kv_cache_scales.js";
import type {
  AttentionMetadata,
  Backend,
  DeviceSamplingRows,
  DType,
  HostTensorData,
  KvCacheSpec,
  MemoryInfo,
  PerHeadBlockTables,
  QkvLayout,
  Tensor,
  WeightFill,
} from "../backend.js";
import { CpuAttentionOps } from "./attention_ops.js";
import { checkQkv, cpu, expectShape } from "./checks.js";
import { CHUNK_MACS, KernelDispatcher } from "./dispatch.js";
import { bf16ToF32, f16ToF32 } from "./dtype.js";
import {
  fusedAddRmsNormKernel,
  gatherRowsKernel,
  qkNormKernel,
  rmsNormKernel,
  rotaryEmbeddingKernel,
  siluAndMulKernel,
} from "./kernels/elementwise.js";
import { sampleRowByRule } from "./kernels/sampling.js";
import { CpuMemory } from "./memory.js";
import { CpuMlaOps } from "./mla_ops.js";
import { CpuMoeOps } from "./moe_ops.js";
import { type CpuDType, type CpuTensor, cpuDType, numelOf } from "./tensor.js";
import { CpuThreadPool } from "./thread_pool.js";
import { fillWeightInto, writeWeightInto } from "./weights.js";

/** Options of {@link CpuBackend}. */
export interface CpuBackendOptions {
  /**
   * Threads per matmul / attention call, the calling thread included. Default
   * min(2, os.availableParallelism()); 1 runs everything on the calling thread.
   */
  numThreads?: number;
  /**
   * Multiply-adds per chunk when a matmul or attention call is split over threads. Default
   * {@link CHUNK_MACS}; calls smaller than three chunks run on the calling thread.
   */
  chunkMacs?: number;
}

/**
 * The TypeScript backend: fp32 math and storage on typed arrays, the numerical oracle of the CUDA
 * kernels and the runtime when no GPU is present. Weights (bf16/f16/f32) are widened to f32
 * exactly on upload; activations and the KV cache are f32. Matmuls and attention are split over
 * a small pool of worker threads sharing SharedArrayBuffers (see README.md); results do not
 * depend on the thread count.
 */
export class CpuBackend implements Backend {
  readonly name = "cpu" as const;
  readonly activationDtype: DType = "f32";
  readonly deviceName: string;
  /** Threads per big kernel, the calling thread included. */
  readonly numThreads: number;
  private readonly pool: CpuThreadPool | null;
  private readonly mem: CpuMemory;
  private readonly kernels: KernelDispatcher;
  /** Mixture-of-experts ops (moe_ops.ts). */
  readonly moe: CpuMoeOps;
  /** Multi-head latent attention and DSA indexer ops (mla_ops.ts). */
  readonly mla: CpuMlaOps;
  /** The paged KV cache and attention over it (attention_ops.ts). */
  private readonly attention: CpuAttentionOps;
  private sampleScratch = new Float32Array(0);

  /** @throws Error when numThreads is not a positive integer. */
  constructor(options: CpuBackendOptions = {}) {
    const n = options.numThreads ?? Math.min(2, availableParallelism());
    if (!Number.isInteger(n) || n < 1) throw new Error(`numThreads must be a positive integer, got ${n}`);
    this.numThreads = n;
    this.deviceName = `CPU (${n} thread${n === 1 ? "" : "s"})`;
    this.pool = n > 1 ? new CpuThreadPool(n) : null;
    this.mem = new CpuMemory(this.pool);
    this.kernels = new KernelDispatcher(this.pool, Math.max(1, options.chunkMacs ?? CHUNK_MACS));
    this.moe = new CpuMoeOps(this.mem, this.kernels);
    this.mla = new CpuMlaOps(this.mem);
    this.attention = new CpuAttentionOps(this.mem, this.kernels);
  }

  // ---- memory --------------------------------------------------------------------------------

  /**
   * Uploads a weight as f32: bf16 widened exactly (bits << 16), f16 widened exactly, f32 copied.
   * @throws Error when the data length does not match the shape.
   */
  uploadWeight(src: HostTensorData): Tensor {
    const n = numelOf(src.shape);
    if (src.data.length !== n)
      throw new Error(`uploadWeight: ${src.data.length} values for shape [${src.shape}]`);
    const t = this.mem.allocPersistent(src.shape, "f32");
    if (src.dtype === "f32") t.f32.set(src.data as Float32Array);
    else if (src.dtype === "bf16") bf16ToF32(src.data as Uint16Array, t.f32);
    else f16ToF32(src.data as Uint16Array, t.f32);
    return t;
  }

  /** A zeroed persistent f32 weight (Backend.allocateWeight). */
  allocateWeight(shape: readonly number[]): Tensor {
    return this.mem.allocPersistent(shape, "f32");
  }

  /** Writes host data, widened to f32, from element `elemOffset` on. @throws Error when it does not fit. */
  writeWeight(t: Tensor, elemOffset: number, src: HostTensorData): void {
    writeWeightInto(cpu(t, this.mem, "writeWeight", false, "f32"), elemOffset, src);
  }

  /** Generates a fill (weight_fill.ts) into elements [elemOffset, elemOffset + count), widened to f32. */
  fillWeight(t: Tensor, elemOffset: number, count: number, fill: WeightFill, first = 0): void {
    fillWeightInto(cpu(t, this.mem, "fillWeight", false, "f32"), elemOffset, count, fill, first);
  }

  /** Copies host data into a persistent f32/i32 tensor. @throws Error on bf16/f16 or a length mismatch. */
  upload(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor {
    const d = cpuDType(dtype, "upload");
    const t = this.mem.allocPersistent(shape, d);
    copyInto(t, data, d, "upload");
    return t;
  }

  /** Copies host data into a workspace tensor. @throws Error on bf16/f16 or a length mismatch. */
  stage(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor {
    const d = cpuDType(dtype, "stage");
    const t = this.mem.allocWorkspace(shape, d);
    copyInto(t, data, d, "stage");
    return t;
  }

  /** One zeroed f32 cache per layer, "fp8" emulated (CpuAttentionOps.allocateKvCache). */
  allocateKvCache(spec: KvCacheSpec): Tensor[] {
    return this.attention.allocateKvCache(spec);
  }

  /** Copies host data into an existing tensor of the same length and dtype class. @throws Error on a mismatch. */
  writeTensor(t: Tensor, data: Float32Array | Int32Array): void {
    const c = cpu(t, this.mem, "writeTensor", false, "any");
    copyInto(c, data, c.dtype === "i32" ? "i32" : "f32", "writeTensor");
  }

  /** A copy of the tensor's values (Float32Array for f32, Int32Array for i32). */
  toHost(t: Tensor): Float32Array | Int32Array {
    const c = cpu(t, this.mem, "toHost", false, "any");
    return c.dtype === "i32" ? c.i32.slice() : c.f32.slice();
  }

  /**
   * The tensor's own elements (a live view: writes change the tensor), f32 or i32 by dtype.
   * @throws Error for a freed tensor or a workspace tensor of an older step.
   */
  hostView(t: Tensor): Float32Array | Int32Array {
    const c = cpu(t, this.mem, "hostView", false, "any");
    return c.dtype === "i32" ? c.i32 : c.f32;
  }

  /** Recycles the step workspace; older workspace tensors throw when used. */
  resetWorkspace(): void {
    this.mem.resetWorkspace();
  }

  /** The operating system's free and total memory, in bytes. */
  memoryInfo(): MemoryInfo {
    return { free: freemem(), total: totalmem() };
  }

  /** Frees a persistent tensor; a second free is a no-op. @throws Error for workspace tensors. */
  free(t: Tensor): void {
    this.mem.free(cpu(t, this.mem, "free", true, "any"));
  }

  /** Ends the worker threads and releases every buffer. Idempotent. */
  dispose(): void {
    this.pool?.dispose();
    this.mem.dispose();
  }

  // ---- ops -----------------------------------------------------------------------------------

  /** ids: i32 [T]; table: [V, H] -> [T, H]. @throws Error for an id outside [0, V). */
  embedding(ids: Tensor, table: Tensor, vocabStart?: number): Tensor {
    const i = cpu(ids, this.mem, "embedding ids", false, "i32");
    const w = cpu(table, this.mem, "embedding table");
    const [V, H] = expectShape(w, 2, "embedding table");
    const [T] = expectShape(i, 1, "embedding ids");
    const out = this.ws([T, H]);
    if (vocabStart === undefined) gatherRowsKernel(w.f32, V, H, i.i32, out.f32, "embedding");
    else
      for (let t = 0; t < T; t++) {
        const r = i.i32[t]! - vocabStart;
        if (r >= 0 && r < V) out.f32.set(w.f32.subarray(r * H, (r + 1) * H), t * H);
        else out.f32.fill(0, t * H, (t + 1) * H);
      }
    return out;
  }

  /** HF LlamaRMSNorm per row. x: [T, H]; weight: [H] -> [T, H]. */
  rmsNorm(x: Tensor, weight: Tensor, eps: number): Tensor {
    const xc = cpu(x, this.mem, "rmsNorm x");
    const [T, H] = expectShape(xc, 2, "rmsNorm x");
    const w = cpu(weight, this.mem, "rmsNorm weight");
    expectShape(w, [H], "rmsNorm weight");
    const out = this.ws([T, H]);
    rmsNormKernel(xc.f32, w.f32, out.f32, T, H, eps);
    return out;
  }

  /** In place: residual += x; x = rmsNorm(residual) * weight. x, residual: [T, H]; weight: [H]. */
  fusedAddRmsNorm(x: Tensor, residual: Tensor, weight: Tensor, eps: number): void {
    const xc = cpu(x, this.mem, "fusedAddRmsNorm x");
    const [T, H] = expectShape(xc, 2, "fusedAddRmsNorm x");
    const r = cpu(residual, this.mem, "fusedAddRmsNorm residual");
    expectShape(r, [T, H], "fusedAddRmsNorm residual");
    const w = cpu(weight, this.mem, "fusedAddRmsNorm weight");
    expectShape(w, [H], "fusedAddRmsNorm weight");
    fusedAddRmsNormKernel(xc.f32, r.f32, w.f32, T, H, eps);
  }

  /**
   * x @ weight^T + bias, threaded when big (dispatch.ts). x: [T, K]; weight: [N, K]; bias: [N] ->
   * [T, N] f32. @throws Error when outDtype is not f32.
   */
  linear(x: Tensor, weight: Tensor, bias: Tensor | null, outDtype?: DType): Tensor {
    if (outDtype !== undefined && outDtype !== "f32")
      throw new Error(`linear: the CPU backend outputs f32, got ${outDtype}`);
    const xc = cpu(x, this.mem, "linear x");
    const [T, K] = expectShape(xc, 2, "linear x");
    const w = cpu(weight, this.mem, "linear weight");
    const N = expectShape(w, [-1, K], "linear weight")[0]!;
    const b = bias === null ? null : cpu(bias, this.mem, "linear bias");
    if (b !== null) expectShape(b, [N], "linear bias");
    const out = this.ws([T, N]);
    this.kernels.linear(xc, w, b, out, T, N, K);
    return out;
  }

  /** In place RMSNorm of each q and k head over headDim (Qwen3). qkv: [T, (Hq + 2Hkv) * D]. */
  qkNorm(qkv: Tensor, layout: QkvLayout, qWeight: Tensor, kWeight: Tensor, eps: number): void {
    const q = cpu(qkv, this.mem, "qkNorm qkv");
    const T = checkQkv(q, layout, "qkNorm");
    const qw = cpu(qWeight, this.mem, "qkNorm qWeight");
    const kw = cpu(kWeight, this.mem, "qkNorm kWeight");
    expectShape(qw, [layout.headDim], "qkNorm qWeight");
    expectShape(kw, [layout.headDim], "qkNorm kWeight");
    qkNormKernel(q.f32, T, layout.numHeads, layout.numKvHeads, layout.headDim, qw.f32, kw.f32, eps);
  }

  /**
   * In place NeoX RoPE of the first R dims of the q and k heads. positions: i32 [T];
   * cosSinCache: [maxPositions, R], R even, <= D (R < D: partial rotary).
   * @throws Error for a position outside the table.
   */
  rotaryEmbedding(qkv: Tensor, layout: QkvLayout, positions: Tensor, cosSinCache: Tensor): void {
    const q = cpu(qkv, this.mem, "rotaryEmbedding qkv");
    const T = checkQkv(q, layout, "rotaryEmbedding");
    const pos = cpu(positions, this.mem, "rotaryEmbedding positions", false, "i32");
    expectShape(pos, [T], "rotaryEmbedding positions");
    const cs = cpu(cosSinCache, this.mem, "rotaryEmbedding cosSinCache");
    const [maxPos, R] = expectShape(cs, 2, "rotaryEmbedding cosSinCache");
    const { numHeads, numKvHeads, headDim } = layout;
    if (R % 2 !== 0 || R < 2 || R > headDim)
      throw new Error(`rotaryEmbedding: cosSinCache width ${R} must be even and in [2, ${headDim}]`);
    rotaryEmbeddingKernel(q.f32, T, numHeads, numKvHeads, headDim, R, pos.i32, cs.f32, maxPos);
  }

  /** silu(x[:, :I]) * x[:, I:]. x: [T, 2I] -> [T, I]. */
  siluAndMul(x: Tensor): Tensor {
    const xc = cpu(x, this.mem, "siluAndMul x");
    const [T, twoI] = expectShape(xc, 2, "siluAndMul x");
    if (twoI % 2 !== 0) throw new Error(`siluAndMul: last dimension ${twoI} is odd`);
    const I = twoI / 2;
    const out = this.ws([T, I]);
    siluAndMulKernel(xc.f32, out.f32, T, I);
    return out;
  }

  /** Writes each token's k and v heads to its slot (CpuAttentionOps.reshapeAndCache). */
  reshapeAndCache(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    slotMapping: Tensor,
    blockSize: number,
  ): void {
    this.attention.reshapeAndCache(qkv, layout, kvCache, slotMapping, blockSize);
  }

  /** The scales an fp8 cache layer stores with (Backend.kvCacheScales); null when not fp8. */
  kvCacheScales(kvCache: Tensor): Readonly<LayerKvScales> | null {
    return this.attention.kvCacheScales(kvCache);
  }

  /** Causal paged attention, threaded when big (CpuAttentionOps.pagedAttention). */
  pagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
  ): Tensor {
    return this.attention.pagedAttention(qkv, layout, kvCache, meta, blockSize);
  }

  /** pagedAttention over per-(request, kv head) block tables (CpuAttentionOps.sparsePagedAttention). */
  sparsePagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    tables: PerHeadBlockTables,
    blockSize: number,
  ): Tensor {
    return this.attention.sparsePagedAttention(qkv, layout, kvCache, meta, tables, blockSize);
  }

  /** x: [R, H]; indices: i32 [B] -> [B, H]. @throws Error for an index outside [0, R). */
  gatherRows(x: Tensor, indices: Tensor): Tensor {
    const xc = cpu(x, this.mem, "gatherRows x");
    const [R, H] = expectShape(xc, 2, "gatherRows x");
    const idx = cpu(indices, this.mem, "gatherRows indices", false, "i32");
    const [B] = expectShape(idx, 1, "gatherRows indices");
    const out = this.ws([B, H]);
    gatherRowsKernel(xc.f32, R, H, idx.i32, out.f32, "gatherRows");
    return out;
  }

  /**
   * The DeviceSamplingRows rule on the host (kernels/sampling.ts), so that the CUDA sampler has
   * an oracle. logits: f32 [B, V].
   */
  sampleOnDevice(logits: Tensor, rows: DeviceSamplingRows): Int32Array {
    const l = cpu(logits, this.mem, "sampleOnDevice logits");
    const [B, V] = expectShape(l, 2, "sampleOnDevice logits");
    if (rows.temperature.length < B || rows.uniform.length < B)
      throw new Error(`sampleOnDevice: rows describe fewer than ${B} rows`);
    if (this.sampleScratch.length < V) this.sampleScratch = new Float32Array(V);
    const out = new Int32Array(B);
    for (let b = 0; b < B; b++) {
      const settings = {
        temperature: rows.temperature[b]!,
        topK: rows.topK[b]!,
        topP: rows.topP[b]!,
        minP: rows.minP[b]!,
        uniform: rows.uniform[b]!,
      };
      out[b] = sampleRowByRule(l.f32, b * V, V, settings, this.sampleScratch);
    }
    return out;
  }

  /** A workspace tensor of the given shape. */
  private ws(shape: number[], dtype: CpuDType = "f32"): CpuTensor {
    return this.mem.allocWorkspace(shape, dtype);
  }
}

/**
 * Copies host values into a fresh tensor.
 * @throws Error when the lengths differ or the array type does not match the dtype.
 */
function copyInto(t: CpuTensor, data: Float32Array | Int32Array, dtype: CpuDType, what: string): void {
  if (data.length !== t.numel) throw new Error(`${what}: ${data.length} values for shape [${t.shape}]`);
  if (dtype === "f32" && data instanceof Float32Array) t.f32.set(data);
  else if (dtype === "i32" && data instanceof Int32Array) t.i32.set(data);
  else throw new Error(`${what}: a ${data.constructor.name} cannot fill a ${dtype} tensor`);
}
