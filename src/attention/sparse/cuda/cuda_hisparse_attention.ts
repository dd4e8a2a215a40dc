import type { AttentionMetadata, QkvLayout, Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import { sparseDecodeAttention } from "../../../backends/cuda/sparse_attention_ops.js";
import type { AttentionBackend } from "../../backend.js";
import {
  DEVICE_HISPARSE_STEP_META,
  type DeviceHiSparseStepMeta,
  type DeviceHotBufferResolver,
  type DeviceSelector,
} from "../device_sparse.js";
import type { LayerPlan } from "../hisparse_attention.js";

/**
 * HiSparse's AttentionBackend on CUDA (DESIGN.md §4), the device twin of HiSparseAttention:
 * every step is device work only, so a decode step replays from a CUDA graph. Per layer:
 * - dense layer: K/V written at the host slots of its host-block-indexed tensor, then
 *   pagedAttention over the host block tables (denseMeta);
 * - sparse layer: one kernel writes K/V into the main pool and folds the keys into the digests;
 *   without sparse rows in the step, pagedAttention as the dense engine; else Quest selection and
 *   the fused resolver (hits, LRU victims, UVA swap-in) per (row, kv head), then the decode
 *   kernel reading per-head tables for sparse rows and the request's own table for the others
 *   (the same kernel and split grid as dense decode, so dense-equal tables give dense bits).
 *   In a batch that mixes sparse decodes with prefill chunks, the general kernel first computes
 *   every other row (sparse rows masked to length 0), then the decode kernel writes the sparse
 *   rows only.
 */
export class CudaHiSparseAttention implements AttentionBackend {
  constructor(
    private readonly backend: CudaBackend,
    private readonly layout: QkvLayout,
    private readonly blockSize: number,
    private readonly layers: LayerPlan,
    readonly selector: DeviceSelector,
    readonly resolver: DeviceHotBufferResolver,
  ) {}

  /** @throws Error when the step carries no HiSparse metadata. */
  forward(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): Tensor {
    const b = this.backend;
    const bs = this.blockSize;
    const hs = stepMetaOf(meta);
    const li = this.layers.sparseIndex[layerIdx]!;
    this.writeKv(layerIdx, qkv, kvCache, meta);
    if (li < 0) return b.pagedAttention(qkv, this.layout, kvCache, hs.denseMeta, bs);
    if (!hs.hasSparse) return b.pagedAttention(qkv, this.layout, kvCache, meta, bs);
    const selection = this.selector.select(li, qkv, hs.rows);
    const resolved = this.resolver.resolve(li, selection, hs.rows, kvCache);
    if (hs.rows.tokenRow === null || hs.maskedSeqLens === null)
      return sparseDecodeAttention(b, qkv, this.layout, kvCache, meta, resolved, bs, {
        rowFlags: hs.rows.rowFlags,
      });
    const out = b.pagedAttention(qkv, this.layout, kvCache, { ...meta, seqLens: hs.maskedSeqLens }, bs);
    return sparseDecodeAttention(b, qkv, this.layout, kvCache, meta, resolved, bs, {
      rowFlags: hs.rows.rowFlags,
      tokenRow: hs.rows.tokenRow,
      onlyFlaggedRows: true,
      out,
    });
  }

  /** Dense layer: K/V at the host slots; sparse layer: K/V into the main pool and the digests. */
  writeKv(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): void {
    const hs = stepMetaOf(meta);
    const li = this.layers.sparseIndex[layerIdx]!;
    if (li < 0)
      this.backend.reshapeAndCache(qkv, this.layout, kvCache, hs.denseMeta.slotMapping, this.blockSize);
    else this.selector.writeKvAndDigests(li, qkv, kvCache, meta.slotMapping, hs.hostSlotMapping);
  }
}

/** The step's device HiSparse metadata. @throws Error when the step carries none. */
function stepMetaOf(meta: AttentionMetadata): DeviceHiSparseStepMeta {
  const hs = meta.extensions?.get(DEVICE_HISPARSE_STEP_META);
  if (hs === undefined) throw new Error("CudaHiSparseAttention needs the step's hisparse metadata");
  return hs;
}
