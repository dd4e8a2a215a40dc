import type { AttentionMetadata, BackendMlaOps, Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import type { MergedRowView } from "../../../backends/cuda/hisparse_rows_ops.js";
import {
  DenseMlaAttention,
  type IndexerInputs,
  type MlaAttentionBackend,
  type MlaLayerInputs,
} from "../../mla.js";
import { DEVICE_HISPARSE_STEP_META, type DeviceHiSparseStepMeta } from "../device_sparse.js";
import { type DsaLayerPlan, streamedInputs } from "../dsa_attention.js";
import type { CudaLruRowResolver } from "./cuda_hot_rows.js";

/** The CUDA plan of the layers: DsaLayerPlan plus each indexer's index among those with hot rows. */
export interface CudaDsaLayerPlan extends DsaLayerPlan {
  /** [numLayers] index of the layer's indexer (sourceLayer) among the sparse layers' indexers, -1 for a dense layer. */
  sourceIndex: readonly number[];
}

/**
 * Benchmarks only: rewrites an indexer's top-k on the device before it is resolved (the DSA
 * selection-overlap knob; attention/sparse/dsa.ts SelectionOverlap is the CPU twin).
 */
export type DeviceSelectionRewrite = (source: number, topk: Tensor, meta: DeviceHiSparseStepMeta) => Tensor;

/** One indexer's work of a forward: the merged view its layers attend through. */
interface SourceView {
  plan: Parameters<CudaLruRowResolver["copy"]>[1];
  view: MergedRowView;
}

/**
 * Hybrid HiSparse's MLA attention for DSA models on CUDA (issue 15), the device twin of
 * DsaHiSparseAttention (its oracle). Per layer:
 * - indexer (full layers): keys indexed by host block (never offloaded): written and scored with
 *   the step's dense-layer metadata (host block tables, host slot mapping);
 * - dense layer: its latent rows are indexed by host block: DenseMlaAttention over denseMeta;
 * - sparse layer: the step's latent rows into the main pool (the tail page is always ACTIVE);
 *   without sparse rows in the step, the dense-resident attention; else, once per indexer and
 *   forward, hsRowResolve (own slot, hot row or LRU victim; the plan) and hsRowViewMerge (the
 *   metadata of every row: the view for resolved rows, their own tables for the others), then per
 *   layer hsRowCopy of the misses into its cache and the same Backend.mla.attention as dense
 *   over the merged view; a prefill beside its host-resident pages (the step's StreamedPrefill)
 *   reads them from the layer's host tier (SpilledRows). Layers sharing an indexer reuse its plan and view (one plan, a copy
 *   pass each); with {@link rowPrefetch}, the first of them issues the later ones' copy passes at
 *   once on a side stream (exact prefetch: they run under the layers in between) and each later
 *   layer only waits for its own pass. Device work only: a decode step replays from a CUDA graph.
 *   A forward is told apart by its dense-layer metadata object (fresh per eager step and per graph forward).
 */
export class CudaDsaHiSparseAttention implements MlaAttentionBackend {
  private readonly ops: BackendMlaOps;
  private readonly dense: DenseMlaAttention;
  /** The forward whose views {@link views} holds (its denseMeta object). */
  private forwardKey: AttentionMetadata | null = null;
  private readonly views = new Map<number, SourceView>();
  /** Per indexer (sourceIndex), its sparse layers ascending. */
  private readonly sharers = new Map<number, number[]>();
  /**
   * Exact prefetch of the copy passes of the layers that share an indexer (default on). Benchmarks
   * toggle it for A/B runs; a captured decode graph keeps the setting it was captured with.
   */
  rowPrefetch = true;

  /** @throws Error when the backend has no MLA ops. */
  constructor(
    backend: CudaBackend,
    private readonly blockSize: number,
    private readonly layers: CudaDsaLayerPlan,
    readonly resolver: CudaLruRowResolver,
    /** Per sparse layer, its host tier of latent rows (SpilledRows.hostRows of a streaming prefill). */
    private readonly hostRows: readonly Tensor[],
    /** Per sparse layer, its latent cache in the main pool (the prefetch's destinations). */
    private readonly latentCaches: readonly Tensor[],
    private readonly rewrite: DeviceSelectionRewrite | null = null,
  ) {
    if (backend.mla === undefined) throw new Error("the CUDA backend has no MLA ops");
    this.ops = backend.mla;
    this.dense = new DenseMlaAttention(backend, blockSize);
    layers.sourceIndex.forEach((src, l) => {
      if (src < 0 || layers.sparseIndex[l]! < 0) return;
      const list = this.sharers.get(src) ?? [];
      list.push(l);
      this.sharers.set(src, list);
    });
  }

  /** @throws Error when the step carries no device HiSparse metadata. */
  forward(layerIdx: number, x: MlaLayerInputs, latentCache: Tensor, meta: AttentionMetadata): Tensor {
    const hs = stepMetaOf(meta);
    const li = this.layers.sparseIndex[layerIdx]!;
    if (li < 0) return this.dense.forward(layerIdx, x, latentCache, hs.denseMeta);
    const ops = this.ops;
    ops.writeRows(x.kvc, latentCache, 0, meta.slotMapping);
    ops.writeRows(x.kpe, latentCache, x.dims.kvLoraRank, meta.slotMapping);
    const { meta: m, spilled } = streamedInputs(meta, hs.streamed, this.hostRows[li]!, hs.denseMeta);
    if (!hs.hasSparse || x.topkIndices === null) {
      this.resolver.awaitPrefetch(li); // none is pending: a step's sharers all take one path
      return ops.attention(x.q, latentCache, x.kvBProj, m, x.dims, this.blockSize, x.topkIndices, spilled);
    }
    const source = this.layers.sourceIndex[layerIdx]!;
    const { src, made } = this.sourceViewOf(source, x.topkIndices, m, hs);
    if (!this.resolver.awaitPrefetch(li)) {
      this.resolver.copy(li, src.plan, latentCache, hs.rows);
      if (made && this.rowPrefetch) this.prefetchSharers(source, layerIdx, src, hs);
    }
    const { view } = src;
    const viewMeta: AttentionMetadata = { ...m, blockTables: view.blockTables, seqLens: view.seqLens };
    return ops.attention(x.q, latentCache, x.kvBProj, viewMeta, x.dims, this.blockSize, view.topk, spilled);
  }

  /** Sparse layers' rows into the main pool, dense layers' rows and the index keys at their host slots. */
  fillRows(
    layerIdx: number,
    latentRows: Tensor,
    indexKeys: Tensor | null,
    latentCache: Tensor,
    indexKeyCache: Tensor | null,
    meta: AttentionMetadata,
  ): void {
    const hs = stepMetaOf(meta);
    const dense = this.layers.sparseIndex[layerIdx]! < 0;
    this.ops.writeRows(latentRows, latentCache, 0, dense ? hs.denseMeta.slotMapping : meta.slotMapping);
    if (indexKeys !== null && indexKeyCache !== null)
      this.ops.writeRows(indexKeys, indexKeyCache, 0, hs.denseMeta.slotMapping);
  }

  indexerTopk(layerIdx: number, x: IndexerInputs, indexKeyCache: Tensor, meta: AttentionMetadata): Tensor {
    return this.dense.indexerTopk(layerIdx, x, indexKeyCache, stepMetaOf(meta).denseMeta);
  }

  /** The copy passes of the sparse layers after `layerIdx` that share indexer `source`, on the side stream. */
  private prefetchSharers(
    source: number,
    layerIdx: number,
    src: SourceView,
    hs: DeviceHiSparseStepMeta,
  ): void {
    const later = (this.sharers.get(source) ?? []).filter((l) => l > layerIdx);
    const passes = later.map((l) => {
      const sparseLayer = this.layers.sparseIndex[l]!;
      return { sparseLayer, cache: this.latentCaches[sparseLayer]! };
    });
    this.resolver.prefetch(passes, src.plan, hs.rows);
  }

  /**
   * Indexer `source`'s plan and view in this forward: made by the first layer that needs them
   * (`made`: by this call).
   */
  private sourceViewOf(
    source: number,
    topk: Tensor,
    meta: AttentionMetadata,
    hs: DeviceHiSparseStepMeta,
  ): { src: SourceView; made: boolean } {
    if (this.forwardKey !== hs.denseMeta) {
      this.forwardKey = hs.denseMeta;
      this.views.clear();
      this.resolver.joinPrefetches(); // none normally: every prefetched layer awaited its pass
    }
    const had = this.views.get(source);
    if (had !== undefined) return { src: had, made: false };
    const sel = this.rewrite === null ? topk : this.rewrite(source, topk, hs);
    const plan = this.resolver.resolve(source, sel, hs.rows);
    const src = { plan, view: this.resolver.view(plan, sel, meta, hs.rows) };
    this.views.set(source, src);
    return { src, made: true };
  }
}

/** The step's device HiSparse metadata. @throws Error when the step carries none. */
function stepMetaOf(meta: AttentionMetadata): DeviceHiSparseStepMeta {
  const hs = meta.extensions?.get(DEVICE_HISPARSE_STEP_META);
  if (hs === undefined) throw new Error("CudaDsaHiSparseAttention needs the step's device hisparse metadata");
  return hs;
}
