import type {
  AttentionMetadata,
  Backend,
  BackendMlaOps,
  SpilledRows,
  Tensor,
} from "../../backends/backend.js";
import {
  DenseMlaAttention,
  type IndexerInputs,
  type MlaAttentionBackend,
  type MlaLayerInputs,
} from "../mla.js";
import type { DsaSelector, LruHotRowResolver, RowResolution } from "./dsa.js";
import { NO_ENTRY } from "./dsa.js";
import { HISPARSE_STEP_META, type HiSparseStepMeta } from "./hisparse_attention.js";
import type { SparseBatch, StreamedPrefill } from "./selector.js";

/** Which layers keep their latent rows resident, and which indexer each layer's selection is. */
export interface DsaLayerPlan {
  /** [numLayers] index among the sparse layers, or -1 for a dense layer (rows indexed by host block). */
  sparseIndex: readonly number[];
  /** [numLayers] the full DSA layer whose top-k the layer attends to (config/mla_config.ts indexerSourceLayer). */
  sourceLayer: readonly number[];
}

/**
 * Hybrid HiSparse's MLA attention for DSA models (issue 15). Per layer:
 * - indexer (full layers): the indexer keys are never offloaded, so they are indexed by host
 *   block: write and score them with the step's dense-layer metadata (host block tables);
 * - dense layer: its latent rows are indexed by host block too: as DenseMlaAttention over them;
 * - sparse layer: write the step's latent rows into the main pool (the tail page is always
 *   ACTIVE); with sparse decodes in the step, select (DsaSelector: the rows of the layer's
 *   top-k), resolve them (LruHotRowResolver: own slot, hot row or a copy from the host tier;
 *   once per indexer and step, layers sharing it reuse the resolution and only copy), then run
 *   the same Backend.mla.attention as the dense path on a remapped view: a sparse row's entry j
 *   at device slot b * bs + o becomes position j * bs + o with block b at table column j, so the
 *   kernel reads exactly the resolved rows, in the indexer's order (the same sums as dense, bit
 *   for bit). Other rows keep their tables and top-k.
 */
export class DsaHiSparseAttention implements MlaAttentionBackend {
  private readonly ops: BackendMlaOps;
  private readonly dense: DenseMlaAttention;
  /** The step whose resolutions {@link resolutions} holds (the step metadata's identity). */
  private step: HiSparseStepMeta | null = null;
  /** Per indexer (source layer): this step's resolution. */
  private readonly resolutions = new Map<number, RowResolution>();

  /** @throws Error when the backend has no MLA ops or no host view of its tensors. */
  constructor(
    private readonly backend: Backend,
    private readonly blockSize: number,
    private readonly layers: DsaLayerPlan,
    readonly selector: DsaSelector,
    readonly resolver: LruHotRowResolver,
    private readonly hostRows: readonly Tensor[],
  ) {
    if (backend.mla === undefined || backend.hostView === undefined)
      throw new Error(`the ${backend.name} backend has no MLA ops with host views`);
    this.ops = backend.mla;
    this.dense = new DenseMlaAttention(backend, blockSize);
  }

  /** @throws Error when the step carries no HiSparse metadata. */
  forward(layerIdx: number, x: MlaLayerInputs, latentCache: Tensor, meta: AttentionMetadata): Tensor {
    const hs = stepMetaOf(meta);
    const li = this.layers.sparseIndex[layerIdx]!;
    if (li < 0) return this.dense.forward(layerIdx, x, latentCache, hs.denseMeta);
    const ops = this.ops;
    ops.writeRows(x.kvc, latentCache, 0, meta.slotMapping);
    ops.writeRows(x.kpe, latentCache, x.dims.kvLoraRank, meta.slotMapping);
    const { meta: m, spilled } = streamedInputs(meta, hs.streamed, this.hostRows[li]!, hs.denseMeta);
    if (hs.batch.numSparse === 0 || x.topkIndices === null)
      return ops.attention(x.q, latentCache, x.kvBProj, m, x.dims, this.blockSize, x.topkIndices, spilled);
    const res = this.resolutionOf(this.layers.sourceLayer[layerIdx]!, x.topkIndices, hs);
    this.resolver.apply(li, res, latentCache);
    const view = this.sparseView(m, x.topkIndices, hs.batch, res);
    return ops.attention(x.q, latentCache, x.kvBProj, view.meta, x.dims, this.blockSize, view.topk, spilled);
  }

  indexerTopk(layerIdx: number, x: IndexerInputs, indexKeyCache: Tensor, meta: AttentionMetadata): Tensor {
    return this.dense.indexerTopk(layerIdx, x, indexKeyCache, stepMetaOf(meta).denseMeta);
  }

  /** The step's resolution for indexer `source`: computed by the first layer that needs it. */
  private resolutionOf(source: number, topk: Tensor, hs: HiSparseStepMeta): RowResolution {
    if (this.step !== hs) {
      this.step = hs;
      this.resolutions.clear();
    }
    let res = this.resolutions.get(source);
    if (res === undefined) {
      res = this.resolver.resolve(source, this.selector.select(source, topk, hs.batch), hs.batch);
      this.resolutions.set(source, res);
    }
    return res;
  }

  /**
   * The metadata and top-k that make Backend.mla.attention read the resolved rows: sparse
   * request s (one decode token) gets a table row of its entries' blocks, seqLen K * bs (so
   * every remapped position is causal) and entries j * bs + offset; the other rows are copied.
   */
  private sparseView(
    meta: AttentionMetadata,
    topk: Tensor,
    batch: SparseBatch,
    res: RowResolution,
  ): { meta: AttentionMetadata; topk: Tensor } {
    const b = this.backend;
    const bs = this.blockSize;
    const { K, slots } = res;
    const R = meta.numReqs;
    const { blockTables: bt, maxBlocksPerReq: mbr, seqLens: sl } = meta.host;
    const width = Math.max(mbr, K);
    const tables = new Int32Array(R * width);
    for (let r = 0; r < R; r++) tables.set(bt.subarray(r * mbr, (r + 1) * mbr), r * width);
    const seqLens = sl.slice();
    const sel = (b.hostView!(topk) as Int32Array).slice();
    for (let s = 0; s < batch.numSparse; s++) {
      const r = batch.batchIdx[s]!;
      const t = batch.tokenIdx[s]!;
      tables.fill(0, r * width, (r + 1) * width);
      seqLens[r] = K * bs;
      for (let j = 0; j < K; j++) {
        const slot = slots[s * K + j]!;
        if (slot === NO_ENTRY) {
          sel[t * K + j] = NO_ENTRY;
          continue;
        }
        tables[r * width + j] = Math.floor(slot / bs);
        sel[t * K + j] = j * bs + (slot % bs);
      }
    }
    let maxSeqLen = 0;
    for (const n of seqLens) maxSeqLen = Math.max(maxSeqLen, n);
    const view: AttentionMetadata = {
      ...meta,
      seqLens: b.stage(seqLens, [R], "i32"),
      blockTables: b.stage(tables, [R, width], "i32"),
      maxSeqLen,
      host: { ...meta.host, seqLens, blockTables: tables, maxBlocksPerReq: width },
    };
    return { meta: view, topk: b.stage(sel, [...topk.shape], "i32") };
  }
}

/**
 * A sparse layer's attention inputs in a step with prefills beside host-resident pages: the
 * worker's tables for those requests and the SpilledRows naming the layer's host tier (the
 * step's own metadata and null otherwise).
 * @param hostRows the layer's host tier [numHostBlocks, blockSize, C + R].
 * @param denseMeta the step's dense-layer metadata (host block tables).
 */
export function streamedInputs(
  meta: AttentionMetadata,
  streamed: StreamedPrefill | null,
  hostRows: Tensor,
  denseMeta: AttentionMetadata,
): { meta: AttentionMetadata; spilled: SpilledRows | null } {
  if (streamed === null) return { meta, spilled: null };
  return {
    meta: { ...streamed.meta, extensions: meta.extensions },
    spilled: { hostRows, hostBlockTables: denseMeta.blockTables, requests: streamed.rows },
  };
}

/** The step's HiSparse metadata. @throws Error when the step carries none. */
function stepMetaOf(meta: AttentionMetadata): HiSparseStepMeta {
  const hs = meta.extensions?.get(HISPARSE_STEP_META);
  if (hs === undefined) throw new Error("DsaHiSparseAttention needs the step's hisparse metadata");
  return hs;
}
