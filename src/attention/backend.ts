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
}

/** Dense paged attention: every layer attends over all of each request's pages. */
export class DensePagedAttention implements AttentionBackend {
  constructor(
    private readonly backend: Backend,
    private readonly layout: QkvLayout,
    private readonly blockSize: number,
  ) {}

  forward(_layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): Tensor {
    this.backend.reshapeAndCache(qkv, this.layout, kvCache, meta.slotMapping, this.blockSize);
    return this.backend.pagedAttention(qkv, this.layout, kvCache, meta, this.blockSize);
  }
}
