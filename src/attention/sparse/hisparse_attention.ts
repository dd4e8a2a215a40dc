import type {
  AttentionMetadata,
  Backend,
  PerHeadBlockTables,
  QkvLayout,
  Tensor,
} from "../../backends/backend.js";
import { extensionKey } from "../../core/extension_data.js";
import type { AttentionBackend } from "../backend.js";
import type { HotBufferResolver, ResolvedPages } from "./hot_buffer.js";
import type { Selector, SparseBatch, StreamedPrefill } from "./selector.js";

/**
 * What the HiSparse worker extension prepares once per step for every layer
 * (AttentionMetadata.extensions under {@link HISPARSE_STEP_META}).
 */
export interface HiSparseStepMeta {
  /** [T] hostBlock * blockSize + offset of each token (dense layers' KV writes, digests). */
  hostSlotMapping: Int32Array;
  /**
   * The step's metadata for dense layers: block tables of host block ids and the host slot
   * mapping (dense layers' KV tensors are indexed by host block), otherwise as the step's.
   */
  denseMeta: AttentionMetadata;
  /** The requests that decode sparsely this step. */
  batch: SparseBatch;
  /** The prefills beside host-resident pages (DSA models), or null. */
  streamed: StreamedPrefill | null;
}

/** Key of the step metadata in AttentionMetadata.extensions. */
export const HISPARSE_STEP_META = extensionKey<HiSparseStepMeta>("hisparse");

/** Which layers attend densely, and each sparse layer's index among the sparse ones. */
export interface LayerPlan {
  /** [numLayers] index among the sparse layers, or -1 for a dense layer. */
  sparseIndex: readonly number[];
}

/**
 * HiSparse's AttentionBackend (DESIGN.md §4). Per layer:
 * - dense layer: its KV tensor is indexed by host block id (every page keeps its dense-layer KV
 *   on the device, independent of spills): write K/V at the host slots, then pagedAttention over
 *   the host block tables;
 * - sparse layer: write K/V into the main pool (the tail page is always ACTIVE), fold the keys
 *   into the page digests; with no sparse request in the step, pagedAttention as the dense
 *   engine does; else select pages per (request, kv head), resolve them (hot buffer, host
 *   copies) and run sparsePagedAttention with per-head tables: dense requests' rows repeat their
 *   block table, sparse requests' rows list the resolved blocks. The same kernel computes both,
 *   so with every page selected the result is the dense result bit for bit.
 */
export class HiSparseAttention implements AttentionBackend {
  constructor(
    private readonly backend: Backend,
    private readonly layout: QkvLayout,
    private readonly blockSize: number,
    private readonly layers: LayerPlan,
    readonly selector: Selector,
    readonly resolver: HotBufferResolver,
  ) {}

  /** @throws Error when the step carries no HiSparse metadata or the backend lacks sparsePagedAttention. */
  forward(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): Tensor {
    const b = this.backend;
    const hs = stepMetaOf(meta);
    const li = this.layers.sparseIndex[layerIdx]!;
    if (li < 0) {
      const dm = hs.denseMeta;
      b.reshapeAndCache(qkv, this.layout, kvCache, dm.slotMapping, this.blockSize);
      return b.pagedAttention(qkv, this.layout, kvCache, dm, this.blockSize);
    }
    b.reshapeAndCache(qkv, this.layout, kvCache, meta.slotMapping, this.blockSize);
    this.selector.updateDigests(li, qkv, hs.hostSlotMapping);
    if (hs.batch.numSparse === 0) return b.pagedAttention(qkv, this.layout, kvCache, meta, this.blockSize);
    if (b.sparsePagedAttention === undefined) throw new Error("this backend has no sparsePagedAttention");
    const selection = this.selector.select(li, qkv, hs.batch);
    const resolved = this.resolver.resolve(li, selection, hs.batch, kvCache);
    const tables = this.perHeadTables(meta, hs.batch, resolved);
    return b.sparsePagedAttention(qkv, this.layout, kvCache, meta, tables, this.blockSize);
  }

  /** Only the cache side effects of forward: K/V writes (host slots for dense layers) and digests. */
  writeKv(layerIdx: number, qkv: Tensor, kvCache: Tensor, meta: AttentionMetadata): void {
    const hs = stepMetaOf(meta);
    const li = this.layers.sparseIndex[layerIdx]!;
    if (li < 0) {
      this.backend.reshapeAndCache(qkv, this.layout, kvCache, hs.denseMeta.slotMapping, this.blockSize);
      return;
    }
    this.backend.reshapeAndCache(qkv, this.layout, kvCache, meta.slotMapping, this.blockSize);
    this.selector.updateDigests(li, qkv, hs.hostSlotMapping);
  }

  /**
   * Per-(request, kv head) tables [R, Hkv, maxBlocks] and seqLens [R, Hkv]: every head of a dense
   * request repeats its row of meta's block table and its seqLen; a sparse request's heads get
   * their resolved blocks.
   */
  private perHeadTables(meta: AttentionMetadata, batch: SparseBatch, res: ResolvedPages): PerHeadBlockTables {
    const Hkv = this.layout.numKvHeads;
    const R = meta.numReqs;
    const { blockTables: bt, maxBlocksPerReq: mbr, seqLens: sl } = meta.host;
    let maxBlocks = mbr;
    for (let i = 0; i < res.seqLens.length; i++)
      maxBlocks = Math.max(maxBlocks, res.start[i + 1]! - res.start[i]!);
    const tables = new Int32Array(R * Hkv * maxBlocks);
    const seqLens = new Int32Array(R * Hkv);
    for (let r = 0; r < R; r++) {
      const row = bt.subarray(r * mbr, (r + 1) * mbr);
      for (let g = 0; g < Hkv; g++) {
        tables.set(row, (r * Hkv + g) * maxBlocks);
        seqLens[r * Hkv + g] = sl[r]!;
      }
    }
    for (let s = 0; s < batch.numSparse; s++) {
      const r = batch.batchIdx[s]!;
      for (let g = 0; g < Hkv; g++) {
        const i = s * Hkv + g;
        const blocks = res.blockIds.subarray(res.start[i]!, res.start[i + 1]!);
        const at = (r * Hkv + g) * maxBlocks;
        tables.fill(0, at, at + maxBlocks);
        tables.set(blocks, at);
        seqLens[r * Hkv + g] = res.seqLens[i]!;
      }
    }
    const b = this.backend;
    return {
      blockTables: b.stage(tables, [R, Hkv, maxBlocks], "i32"),
      seqLens: b.stage(seqLens, [R, Hkv], "i32"),
      maxBlocks,
      host: { blockTables: tables, seqLens },
    };
  }
}

/** The step's HiSparse metadata. @throws Error when the step carries none. */
function stepMetaOf(meta: AttentionMetadata): HiSparseStepMeta {
  const hs = meta.extensions?.get(HISPARSE_STEP_META);
  if (hs === undefined) throw new Error("HiSparseAttention needs the step's hisparse metadata");
  return hs;
}
