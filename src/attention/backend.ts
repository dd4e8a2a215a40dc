import type { AttentionMetadata, Backend, QkvLayout, Tensor } from "../backends/backend.js";

/**
 * How one attention layer uses the KV cache in a step. The model calls `forward` once per layer;
 * implementations decide what the layer reads (every page: dense; selected pages: sparse).
 * Metadata travels as an argument (no globals, CONVENTIONS.md 10).
 */
export interface AttentionBackend {
  /**
   * Writes this step's K/V of layer `layerIdx` into `kvCache` and returns the attention output.
   * qkv: [T, (Hq + 2*Hkv) * D] after RoPE -> [T, Hq * D].
   */
  forward(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): Tensor;
  /**
   * Optional: only the cache side effects of `forward` (K/V written, feature state such as page
   * digests updated), no attention. Benchmarks use it to fill long contexts quickly
   * (ModelRunner.fastPrefill).
   */
  writeKv?(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): void;
}

/** Dense paged attention: every layer attends over all of each request's pages. */
export class DensePagedAttention implements AttentionBackend {
  constructor(
    private readonly backend: Backend,
    private readonly layout: QkvLayout,
    private readonly blockSize: number,
  ) {}

  forward(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): Tensor {
    this.writeKv(layerIdx, qkv, kvCache, meta);
    return this.backend.pagedAttention(qkv, this.layout, kvCache, meta, this.blockSize);
  }

  writeKv(_layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): void {
    this.backend.reshapeAndCache(qkv, this.layout, kvCache, meta.slotMapping, this.blockSize);
  }
}
