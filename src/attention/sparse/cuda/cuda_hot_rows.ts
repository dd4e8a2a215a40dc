import type { Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import {
  type MergedRowView,
  type RowHotState,
  type RowResolutionTensors,
  rowCopy,
  rowResolve,
  rowViewMerge,
} from "../../../backends/cuda/hisparse_rows_ops.js";
import type { DeviceSparseRows } from "../device_sparse.js";
import type { DeviceHostTier } from "./cuda_hot_buffer.js";

/** The per-request row state the device row resolver reads and updates (worker/hisparse/cuda/slot_tables.ts rowState). */
export interface DeviceRowTables {
  readonly rowState: RowHotState;
}

/**
 * The DSA hot-row resolver on CUDA, the device twin of LruHotRowResolver (dsa.ts, its oracle):
 * per indexer and step one plan (hsRowResolve: own slot, hot row or LRU victim row, per
 * (request slot, indexer) LRU keyed by token position), one copy pass per layer that shares the
 * indexer (hsRowCopy, 16-byte loads from the layer's mapped pinned host tier), and the attention
 * metadata of the step (hsRowViewMerge). Device work only, graph-capturable.
 */
export class CudaLruRowResolver {
  /**
   * @param numBlocks blocks of the main pool (the sparse layers' latent caches).
   * @param numSlots request slots of the tables.
   */
  constructor(
    private readonly backend: CudaBackend,
    private readonly tables: DeviceRowTables,
    private readonly hostTier: DeviceHostTier,
    private readonly blockSize: number,
    private readonly numBlocks: number,
    private readonly numSlots: number,
  ) {}

  /**
   * The plan of indexer `source` (its index among the indexers with hot rows) for the flagged
   * rows: topk i32 [T, K] (Backend.mla.topkIndices). Changes the LRU state; copies nothing.
   */
  resolve(source: number, topk: Tensor, rows: DeviceSparseRows): RowResolutionTensors {
    return rowResolve(this.backend, {
      topk,
      tokenRow: rows.tokenRow,
      rowFlags: rows.rowFlags,
      reqSlot: rows.reqSlot,
      seqLens: rows.seqLens,
      state: this.tables.rowState,
      source,
      blockSize: this.blockSize,
      numBlocks: this.numBlocks,
      numHostBlocks: this.hostTier.numHostBlocks,
    });
  }

  /** Sparse layer `sparseLayer`'s copy pass of `plan`: its misses land in `latentCache`. */
  copy(sparseLayer: number, plan: RowResolutionTensors, latentCache: Tensor, rows: DeviceSparseRows): void {
    rowCopy(
      this.backend,
      plan,
      latentCache,
      this.hostTier.layerPtr(sparseLayer),
      this.hostTier.numHostBlocks,
      rows.rowFlags,
    );
  }

  /** The step's attention metadata with `plan`'s rows resolved (the others as they were). */
  view(
    plan: RowResolutionTensors,
    topk: Tensor,
    step: { blockTables: Tensor; seqLens: Tensor },
    rows: DeviceSparseRows,
  ): MergedRowView {
    return rowViewMerge(this.backend, plan, {
      topk,
      blockTables: step.blockTables,
      seqLens: step.seqLens,
      rowFlags: rows.rowFlags,
      reqSlot: rows.reqSlot,
      tokenRow: rows.tokenRow,
      numSlots: this.numSlots,
    });
  }
}
