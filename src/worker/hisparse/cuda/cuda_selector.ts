import type {
  DeviceHotBufferResolver,
  DevicePageSelection,
  DeviceResolvedPages,
  DeviceSelector,
  DeviceSparseRows,
} from "../../../attention/sparse/device_sparse.js";
import type { QkvLayout, Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import { questSelect, reshapeAndCacheDigest, resolve } from "../../../backends/cuda/hisparse_ops.js";
import type { CudaHostKvTier } from "./cuda_host_tier.js";
import type { HiSparseSlotTables } from "./slot_tables.js";

/** Settings of a {@link CudaQuestSelector}; token counts are multiples of blockSize. */
export interface CudaQuestSelectorConfig {
  layout: QkvLayout;
  blockSize: number;
  numSparseLayers: number;
  numHostBlocks: number;
  topk: number;
  sinkTokens: number;
  windowTokens: number;
}

/**
 * Quest selection on CUDA (the device twin of QuestSelector, which is its oracle): per sparse
 * layer bf16 digests [numHostBlocks, 2, Hkv, D] (min, max of the page's post-RoPE keys),
 * updated by the KV write kernel; selection per (row, kv head) by hsQuestSelect, page for page
 * the oracle's (float64 scores, same tie rule). bf16 digests are exact on CUDA: the keys are
 * bf16 in the cache, and min / max of bf16 values are bf16 values; they take half the device
 * memory of f32 ones (at Llama-3.1-8B shape, 120 KiB instead of 240 KiB per page).
 */
export class CudaQuestSelector implements DeviceSelector {
  /** Per sparse layer: bf16 [numHostBlocks, 2, Hkv, D]. */
  readonly digests: Tensor[];
  private readonly budgetPages: number;
  private readonly sinkPages: number;
  private readonly windowPages: number;

  /** @throws Error when a token count is not a multiple of the block size. */
  constructor(
    private readonly backend: CudaBackend,
    readonly config: CudaQuestSelectorConfig,
    private readonly tables: HiSparseSlotTables,
  ) {
    const { blockSize: bs, topk, sinkTokens, windowTokens } = config;
    if (topk % bs !== 0 || sinkTokens % bs !== 0 || windowTokens % bs !== 0 || windowTokens < bs)
      throw new Error("topk, sink and window tokens must be multiples of the block size (window >= 1 block)");
    this.budgetPages = topk / bs;
    this.sinkPages = sinkTokens / bs;
    this.windowPages = windowTokens / bs;
    const { numKvHeads: Hkv, headDim: D } = config.layout;
    const shape = [Math.max(1, config.numHostBlocks), 2, Hkv, D];
    this.digests = Array.from({ length: config.numSparseLayers }, () =>
      backend.allocateFilled(shape, "bf16"),
    );
  }

  /** Device bytes of the digests of one page over every sparse layer. */
  static bytesPerPage(numSparseLayers: number, numKvHeads: number, headDim: number): number {
    return numSparseLayers * 2 * numKvHeads * headDim * 2;
  }

  writeKvAndDigests(
    sparseLayer: number,
    qkv: Tensor,
    kvCache: Tensor,
    slotMapping: Tensor,
    hostSlotMapping: Tensor,
  ): void {
    reshapeAndCacheDigest(
      this.backend,
      qkv,
      this.config.layout,
      kvCache,
      slotMapping,
      this.digests[sparseLayer]!,
      hostSlotMapping,
      this.config.blockSize,
    );
  }

  select(sparseLayer: number, qkv: Tensor, rows: DeviceSparseRows): DevicePageSelection {
    return questSelect(this.backend, {
      qkv,
      layout: this.config.layout,
      tokenRow: rows.tokenRow,
      digests: this.digests[sparseLayer]!,
      seqLens: rows.seqLens,
      rowFlags: rows.rowFlags,
      reqSlot: rows.reqSlot,
      hostBlockTable: this.tables.hostBlockTable,
      pinnedTable: this.tables.pinnedTable,
      blockSize: this.config.blockSize,
      budgetPages: this.budgetPages,
      sinkPages: this.sinkPages,
      windowPages: this.windowPages,
    });
  }

  /** Frees the digests. */
  dispose(): void {
    for (const t of this.digests) this.backend.free(t);
  }
}

/**
 * The hot-buffer resolver on CUDA (the device twin of LruHotBufferResolver, its oracle): one
 * fused kernel per sparse layer (hsResolve) marks hits, takes LRU victims for misses, copies the
 * misses' K/V from the pinned host tier (UVA) and writes the per-head tables.
 */
export class CudaLruResolver implements DeviceHotBufferResolver {
  constructor(
    private readonly backend: CudaBackend,
    private readonly tables: HiSparseSlotTables,
    private readonly hostTier: CudaHostKvTier,
    private readonly blockSize: number,
  ) {}

  resolve(
    sparseLayer: number,
    selection: DevicePageSelection,
    rows: DeviceSparseRows,
    kvCache: Tensor,
  ): DeviceResolvedPages {
    return resolve(this.backend, {
      selection,
      rowFlags: rows.rowFlags,
      seqLens: rows.seqLens,
      reqSlot: rows.reqSlot,
      state: this.tables.state,
      layer: sparseLayer,
      kvCache,
      hostTierPtr: this.hostTier.layerPtr(sparseLayer),
      numHostBlocks: this.hostTier.spec.numHostBlocks,
      blockSize: this.blockSize,
    });
  }
}
