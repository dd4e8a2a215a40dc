import { LayerKvScales } from "../../core/kv/kv_cache_scales.js";
import {
  type AttentionMetadata,
  type Backend,
  type BackendMlaOps,
  type BackendMoeOps,
  type DeviceSamplingRows,
  DTYPE_BYTES,
  type DType,
  type HostTensorData,
  type KvCacheSpec,
  type PerHeadBlockTables,
  type QkvLayout,
  type Tensor,
  type WeightFileRange,
  type WeightFill,
} from "../backend.js";
import { offsetPtr } from "./addon.js";
import * as attn from "./attention_ops.js";
import {
  type CudaBackendOptions,
  denseGemvMaxTokensOf,
  type PinnedHostMemory,
} from "./cuda_backend_setup.js";
import { CudaDevice } from "./cuda_device.js";
import { readConverted } from "./host_io.js";
import { calibrateKvScales } from "./kv_scales_ops.js";
import * as linearOps from "./linear_ops.js";
import { CudaMlaOps } from "./mla_ops.js";
import { CudaMoeOps } from "./moe_ops.js";
import * as ops from "./ops.js";
import * as sparse from "./sparse_attention_ops.js";
import { type CudaTensor, describe, numelOf } from "./tensor.js";
import * as weights from "./weights.js";

export type { CudaBackendOptions, CudaMemoryStats, PinnedHostMemory } from "./cuda_backend_setup.js";

/**
 * The CUDA implementation of Backend (backend.ts holds the contract): bf16 weights, activations
 * and KV cache, fp32 accumulation, f32 logits. One non-blocking stream; every op is an async
 * launch on it and only toHost / sampleOnDevice wait. Persistent tensors come from a caching
 * allocator, op outputs from a bump workspace reset per step, host data travels through pinned
 * buffers. Decode steps can be captured as CUDA graphs (`graphs`). The resources, their lifecycle
 * and the checked access the op modules launch through are the base class's (cuda_device.ts).
 */
export class CudaBackend extends CudaDevice implements Backend {
  readonly name = "cuda" as const;
  readonly activationDtype: DType = "bf16";
  /**
   * Rows up to which `linear` runs the skinny GEMM instead of cuBLAS (CudaBackendOptions
   * .denseGemvMaxTokens; 0 = always cuBLAS). Writable so that a benchmark can measure both paths
   * in one process; graphs captured before a change keep the path they captured.
   */
  denseGemvMaxTokens: number;
  /** Mixture-of-experts ops (moe_ops.ts). */
  readonly moe: BackendMoeOps;
  /** Multi-head latent attention and the DSA indexer (mla_ops.ts). */
  readonly mla: BackendMlaOps;
  /** fp8 KV caches and their per-layer scales (1.0, or the first batch's: --calculate-kv-scales). */
  private readonly fp8Scales = new WeakMap<Tensor, LayerKvScales>();

  /** @throws Error when the addon is missing, no CUDA device is usable, or cuBLAS cannot be loaded. */
  constructor(options: CudaBackendOptions = {}) {
    super(options);
    this.moe = new CudaMoeOps(this, options.moeFusedActivation ?? true, options.moeSmallBatchMaxTokens);
    this.denseGemvMaxTokens = denseGemvMaxTokensOf(options);
    this.mla = new CudaMlaOps(this);
  }

  // ---- memory -----------------------------------------------------------------------------------

  uploadWeight(src: HostTensorData): Tensor {
    const n = numelOf(src.shape);
    if (src.data.length !== n) {
      throw new Error(`uploadWeight: ${src.data.length} values for shape [${src.shape.join(", ")}]`);
    }
    const wantArray = src.dtype === "f32" ? Float32Array : Uint16Array;
    if (!(src.data instanceof wantArray))
      throw new Error(`uploadWeight: ${src.dtype} data must be a ${wantArray.name}`);
    const t = this.allocPersistent(src.shape, "bf16");
    this.writeConverted(t.ptr, "bf16", src.data, src.dtype, n);
    return t;
  }

  /** A bf16 weight, contents undefined until written (Backend.allocateWeight). */
  allocateWeight(shape: readonly number[]): Tensor {
    return this.allocPersistent(shape, "bf16");
  }

  writeWeight(t: Tensor, elemOffset: number, src: HostTensorData): void {
    weights.writeWeight(this.weightCtx, this.dev(t, "writeWeight"), elemOffset, src);
  }

  /** Generated on the device (native/kernels/dummy_init.cu); the fill's table is kept there (weights.ts). */
  fillWeight(t: Tensor, elemOffset: number, count: number, fill: WeightFill, first = 0): void {
    this.notCapturing("fillWeight");
    const dst = this.dev(t, "fillWeight");
    weights.fillWeight(this.weightCtx, this.fillTables, dst, elemOffset, count, fill, first);
  }

  /** Streams file ranges through pinned staging (weight_stream.ts); returns when they are on the device. */
  loadWeightFiles(ranges: readonly WeightFileRange[], onBytes?: (done: number, total: number) => void): void {
    this.notCapturing("loadWeightFiles");
    weights.loadWeightFiles(this.weightCtx, (t) => this.dev(t, "loadWeightFiles"), ranges, onBytes);
  }

  upload(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor {
    const t = this.allocPersistent(shape, dtype);
    this.writeTensor(t, data);
    return t;
  }

  stage(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor {
    const t = this.out(shape, dtype);
    this.writeTensor(t, data);
    return t;
  }

  writeTensor(t: Tensor, data: Float32Array | Int32Array): void {
    const dst = this.dev(t, "writeTensor");
    if (data.length !== dst.numel) throw new Error(`writeTensor: ${data.length} values for ${describe(t)}`);
    if (t.dtype === "i32" && !(data instanceof Int32Array))
      throw new Error("writeTensor: i32 tensors take an Int32Array");
    if (t.dtype !== "i32" && !(data instanceof Float32Array)) {
      throw new Error(`writeTensor: ${t.dtype} tensors take a Float32Array`);
    }
    this.writeConverted(dst.ptr, t.dtype, data, t.dtype === "i32" ? "i32" : "f32", data.length);
  }

  allocateKvCache(spec: KvCacheSpec): Tensor[] {
    if (spec.dtype !== "bf16" && spec.dtype !== "fp8")
      throw new Error(`the CUDA backend stores the KV cache in bf16 or fp8, not ${spec.dtype}`);
    const shape = [spec.numBlocks, 2, spec.blockSize, spec.numKvHeads, spec.headDim];
    const caches: CudaTensor[] = [];
    for (let l = 0; l < spec.numLayers; l++) {
      const t = this.allocPersistent(shape, spec.dtype);
      this.addon.memsetAsync(t.ptr, 0, t.bytes, this.stream);
      if (spec.dtype === "fp8") this.fp8Scales.set(t, new LayerKvScales(spec.calculateScales === true));
      caches.push(t);
    }
    return caches;
  }

  /** The scales an fp8 cache layer stores and reads with (Backend.kvCacheScales); null when not fp8. */
  kvCacheScales(kvCache: Tensor): Readonly<LayerKvScales> | null {
    return this.fp8Scales.get(kvCache) ?? null;
  }

  toHost(t: Tensor): Float32Array | Int32Array {
    const src = this.dev(t, "toHost");
    this.notCapturing("toHost");
    return readConverted(this.staging, src.ptr, t.dtype, src.numel);
  }

  resetWorkspace(): void {
    this.notCapturing("resetWorkspace");
    this.workspace.reset();
    this.staging.recycle();
  }

  workspaceScope<T extends Tensor>(fn: () => T, consumed?: Tensor): T {
    const c = consumed === undefined ? undefined : this.dev(consumed, "workspaceScope consumed");
    return this.workspace.scope(
      () => this.dev(fn(), "workspaceScope result"),
      this.stream,
      c,
    ) as unknown as T;
  }

  free(t: Tensor): void {
    const ct = this.dev(t, "free");
    if (ct.kind !== "persistent")
      throw new Error("free() takes a persistent tensor; workspace tensors are recycled by resetWorkspace()");
    this.notCapturing("free");
    this.allocator.free(ct.ptr);
    ct.released = true;
  }

  /**
   * Allocates page-locked host memory mapped into the device address space, which kernels read
   * and write directly (UVA). @throws Error when the memory cannot be pinned.
   */
  allocatePinned(bytes: number): PinnedHostMemory {
    if (this.disposed) throw new Error("the CUDA backend is disposed");
    return new this.addon.PinnedBuffer(bytes);
  }

  /**
   * A persistent tensor with every byte set to `byteValue` (0: zeros; 0xff: i32 -1), without a
   * host copy of its contents (large tables and digests).
   */
  allocateFilled(shape: readonly number[], dtype: DType, byteValue = 0): Tensor {
    const t = this.allocPersistent(shape, dtype);
    this.addon.memsetAsync(t.ptr, byteValue, t.bytes, this.stream);
    return t;
  }

  /** Asynchronously copies every byte of `src` into `dst` (same byte size; device to device). */
  copyTensor(dst: Tensor, src: Tensor): void {
    const d = this.dev(dst, "copyTensor dst");
    const s = this.dev(src, "copyTensor src");
    if (d.bytes !== s.bytes) throw new Error(`copyTensor: ${describe(src)} does not fit ${describe(dst)}`);
    if (d.bytes > 0) this.addon.memcpyAsync(d.ptr, s.ptr, d.bytes, this.stream);
  }

  /**
   * Asynchronously writes i32 values into an i32 tensor from element `offset` on (a slice of a
   * persistent table; the caller may reuse `data` at once).
   * @throws Error when the range leaves the tensor.
   */
  writeRange(t: Tensor, offset: number, data: Int32Array): void {
    const d = this.dev(t, "writeRange");
    if (t.dtype !== "i32") throw new Error(`writeRange takes an i32 tensor, got ${t.dtype}`);
    if (!Number.isInteger(offset) || offset < 0 || offset + data.length > d.numel)
      throw new Error(`writeRange: [${offset}, ${offset + data.length}) is outside a tensor of ${d.numel}`);
    if (data.length === 0) return;
    this.uploadBytes(offsetPtr(d.ptr, offset * 4), data);
  }

  /** Asynchronously sets `count` elements of a tensor from element `offset` on to the byte `value` repeated. */
  fillRange(t: Tensor, offset: number, count: number, value: number): void {
    const d = this.dev(t, "fillRange");
    if (!Number.isInteger(offset) || offset < 0 || count < 0 || offset + count > d.numel)
      throw new Error(`fillRange: [${offset}, ${offset + count}) is outside a tensor of ${d.numel}`);
    const eb = DTYPE_BYTES[t.dtype];
    if (count > 0) this.addon.memsetAsync(offsetPtr(d.ptr, offset * eb), value, count * eb, this.stream);
  }

  // ---- ops (ops.ts, attention_ops.ts, sparse_attention_ops.ts) -------------------------------------------------------------

  embedding(ids: Tensor, table: Tensor, vocabStart = 0): Tensor {
    return ops.embedding(this, ids, table, vocabStart);
  }
  rmsNorm(x: Tensor, weight: Tensor, eps: number): Tensor {
    return ops.rmsNorm(this, x, weight, eps);
  }
  fusedAddRmsNorm(x: Tensor, residual: Tensor, weight: Tensor, eps: number): void {
    ops.fusedAddRmsNorm(this, x, residual, weight, eps);
  }
  linear(x: Tensor, weight: Tensor, bias: Tensor | null, outDtype?: DType): Tensor {
    return linearOps.linear(this, x, weight, bias, outDtype ?? this.activationDtype);
  }
  qkNorm(qkv: Tensor, layout: QkvLayout, qWeight: Tensor, kWeight: Tensor, eps: number): void {
    ops.qkNorm(this, qkv, layout, qWeight, kWeight, eps);
  }
  qkNormRotaryEmbedding(
    qkv: Tensor,
    layout: QkvLayout,
    qWeight: Tensor,
    kWeight: Tensor,
    eps: number,
    positions: Tensor,
    cosSinCache: Tensor,
  ): void {
    ops.qkNormRotaryEmbedding(this, qkv, layout, qWeight, kWeight, eps, positions, cosSinCache);
  }
  rotaryEmbedding(qkv: Tensor, layout: QkvLayout, positions: Tensor, cosSinCache: Tensor): void {
    ops.rotaryEmbedding(this, qkv, layout, positions, cosSinCache);
  }
  siluAndMul(x: Tensor): Tensor {
    return ops.siluAndMul(this, x);
  }
  linearSiluAndMul(x: Tensor, weight: Tensor, bias: Tensor | null): Tensor {
    return linearOps.linearSiluAndMul(this, x, weight, bias);
  }
  linearRotaryEmbedding(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | null,
    layout: QkvLayout,
    positions: Tensor,
    cosSinCache: Tensor,
  ): Tensor {
    return linearOps.linearRotaryEmbedding(this, x, weight, bias, layout, positions, cosSinCache);
  }
  reshapeAndCache(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    slotMapping: Tensor,
    blockSize: number,
  ): void {
    const scales = this.fp8Scales.get(kvCache);
    if (scales?.pending === true) calibrateKvScales(this, qkv, layout, slotMapping, scales);
    ops.reshapeAndCache(this, qkv, layout, kvCache, slotMapping, blockSize);
  }
  pagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
  ): Tensor {
    return attn.pagedAttention(this, qkv, layout, kvCache, meta, blockSize);
  }
  /** Backend.sparsePagedAttention: decode batches only (sparse_attention_ops.ts). @throws Error otherwise. */
  sparsePagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    tables: PerHeadBlockTables,
    blockSize: number,
  ): Tensor {
    return sparse.sparsePagedAttention(this, qkv, layout, kvCache, meta, tables, blockSize);
  }
  gatherRows(x: Tensor, indices: Tensor): Tensor {
    return ops.gatherRows(this, x, indices);
  }
  sampleOnDevice(logits: Tensor, rows: DeviceSamplingRows): Int32Array | null {
    if (!this.addon.buildInfo.hasSampling) return null;
    this.notCapturing("sampleOnDevice");
    return attn.sampleOnDevice(this, logits, rows);
  }
}
