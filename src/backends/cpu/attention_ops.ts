/**
 * The CPU backend's paged KV cache and the attention over it (CpuBackend's allocateKvCache,
 * reshapeAndCache, kvCacheScales, pagedAttention and sparsePagedAttention forward here; contracts
 * in ../backend.ts): one f32 cache tensor per layer, the emulated fp8 caches with their per-layer
 * scales, the slot writes (kernels/attention.ts) and paged attention, dense or over per-head
 * block tables, threaded when big (dispatch.ts). Results are workspace tensors, valid until the
 * backend's resetWorkspace().
 */
import { PAD_SLOT_ID } from "../../core/ids.js";
import { LayerKvScales } from "../../core/kv/kv_cache_scales.js";
import type { AttentionMetadata, KvCacheSpec, PerHeadBlockTables, QkvLayout, Tensor } from "../backend.js";
import { checkAttentionMetadata, checkPerHeadTables, checkQkv, cpu, expectShape } from "./checks.js";
import type { KernelDispatcher } from "./dispatch.js";
import { kvAmaxKernel, reshapeAndCacheKernel } from "./kernels/attention.js";
import type { CpuMemory } from "./memory.js";
import type { CpuDType, CpuTensor } from "./tensor.js";

/** The paged KV cache and attention of {@link CpuBackend} (cpu_backend.ts), which forwards to it. */
export class CpuAttentionOps {
  /**
   * KV caches allocated as "fp8" and their scales: reshapeAndCache rounds what it writes to e4m3
   * with them (1.0, or measured from the first batch under --calculate-kv-scales).
   */
  private readonly fp8Caches = new WeakMap<Tensor, LayerKvScales>();

  constructor(
    private readonly mem: CpuMemory,
    private readonly kernels: KernelDispatcher,
  ) {}

  /**
   * One zeroed f32 tensor per layer, [numBlocks, 2, blockSize, numKvHeads, headDim]. An "fp8"
   * cache (`--kv-cache-dtype fp8`) is emulated: f32 storage holding exactly the values an e4m3
   * cache with the per-tensor scales reads back (../fp8.ts; reshapeAndCache rounds), so
   * it takes 4 bytes per element here, not 1.
   * @throws Error when spec.dtype is neither f32 nor fp8.
   */
  allocateKvCache(spec: KvCacheSpec): Tensor[] {
    if (spec.dtype !== "f32" && spec.dtype !== "fp8")
      throw new Error(`the CPU backend keeps its KV cache in f32 (or emulated fp8), got ${spec.dtype}`);
    const shape = [spec.numBlocks, 2, spec.blockSize, spec.numKvHeads, spec.headDim];
    const out: Tensor[] = [];
    for (let l = 0; l < spec.numLayers; l++) {
      const t = this.mem.allocPersistent(shape, "f32");
      if (spec.dtype === "fp8") this.fp8Caches.set(t, new LayerKvScales(spec.calculateScales === true));
      out.push(t);
    }
    return out;
  }

  /**
   * Writes each token's k and v heads to its slot (PAD_SLOT_ID skipped). kvCache:
   * [numBlocks, 2, blockSize, Hkv, D]; slotMapping: i32 [T]. @throws Error for a slot outside the cache.
   */
  reshapeAndCache(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    slotMapping: Tensor,
    blockSize: number,
  ): void {
    const q = cpu(qkv, this.mem, "reshapeAndCache qkv");
    const T = checkQkv(q, layout, "reshapeAndCache");
    const kv = cpu(kvCache, this.mem, "reshapeAndCache kvCache");
    const { numHeads, numKvHeads, headDim } = layout;
    const numBlocks = expectShape(kv, [-1, 2, blockSize, numKvHeads, headDim], "reshapeAndCache kvCache")[0]!;
    const slots = cpu(slotMapping, this.mem, "reshapeAndCache slotMapping", false, "i32");
    expectShape(slots, [T], "reshapeAndCache slotMapping");
    const scales = this.fp8Caches.get(kvCache) ?? null;
    // --calculate-kv-scales: the first batch with a token to cache fixes the layer's scales.
    if (scales?.pending === true && slots.i32.some((s) => s !== PAD_SLOT_ID))
      scales.calibrate(...kvAmaxKernel(q.f32, slots.i32, T, numHeads, numKvHeads, headDim, PAD_SLOT_ID));
    reshapeAndCacheKernel(
      q.f32,
      kv.f32,
      slots.i32,
      T,
      numHeads,
      numKvHeads,
      headDim,
      blockSize,
      numBlocks,
      PAD_SLOT_ID,
      scales,
    );
  }

  /** The scales an fp8 cache layer stores with (Backend.kvCacheScales); null when not fp8. */
  kvCacheScales(kvCache: Tensor): Readonly<LayerKvScales> | null {
    return this.fp8Caches.get(kvCache) ?? null;
  }

  /**
   * Causal paged attention (GQA, chunked prefill), threaded when big. qkv: [T, (Hq + 2Hkv) * D] ->
   * [T, Hq * D]. @throws Error on inconsistent metadata (checks.ts).
   */
  pagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
  ): Tensor {
    const q = cpu(qkv, this.mem, "pagedAttention qkv");
    const T = checkQkv(q, layout, "pagedAttention");
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
    const kv = cpu(kvCache, this.mem, "pagedAttention kvCache");
    const numBlocks = expectShape(kv, [-1, 2, blockSize, Hkv, D], "pagedAttention kvCache")[0]!;
    const m = checkAttentionMetadata(meta, this.mem, T, numBlocks, blockSize);
    const out = this.ws([T, Hq * D]);
    this.kernels.pagedAttention(q, kv, out, m, meta.numReqs, layout, T, blockSize);
    return out;
  }

  /**
   * pagedAttention over per-(request, kv head) block tables (HiSparse), threaded when big; the
   * same kernel as pagedAttention, so identical tables give identical bits. qkv:
   * [T, (Hq + 2Hkv) * D] -> [T, Hq * D]. @throws Error on inconsistent metadata or tables.
   */
  sparsePagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    tables: PerHeadBlockTables,
    blockSize: number,
  ): Tensor {
    const q = cpu(qkv, this.mem, "sparsePagedAttention qkv");
    const T = checkQkv(q, layout, "sparsePagedAttention");
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
    const kv = cpu(kvCache, this.mem, "sparsePagedAttention kvCache");
    const numBlocks = expectShape(kv, [-1, 2, blockSize, Hkv, D], "sparsePagedAttention kvCache")[0]!;
    const m = checkPerHeadTables(meta, tables, this.mem, T, Hkv, numBlocks, blockSize);
    const out = this.ws([T, Hq * D]);
    this.kernels.pagedAttention(q, kv, out, m, meta.numReqs, layout, T, blockSize);
    return out;
  }

  /** A workspace tensor of the given shape. */
  private ws(shape: number[], dtype: CpuDType = "f32"): CpuTensor {
    return this.mem.allocWorkspace(shape, dtype);
  }
}
