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
import type { SideStream } from "../../../backends/cuda/side_stream.js";
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
 * metadata of the step (hsRowViewMerge). The copy passes of the later layers that share a plan
 * can be issued at once on a side stream (prefetch / awaitPrefetch: the exact prefetch of
 * IndexShare models, where the plan is known layers ahead). Device work only, graph-capturable.
 */
export class CudaLruRowResolver {
  /** The prefetch stream, one join mark per sparse layer (made here, never inside a graph capture). */
  private side: SideStream | null;
  /** Whether the last prefetch was recorded inside a graph capture. */
  private marksCaptured = false;

  /**
   * @param numBlocks blocks of the main pool (the sparse layers' latent caches).
   * @param numSlots request slots of the tables.
   * @param numSparseLayers sparse layers (the prefetch's join marks).
   */
  constructor(
    private readonly backend: CudaBackend,
    private readonly tables: DeviceRowTables,
    private readonly hostTier: DeviceHostTier,
    private readonly blockSize: number,
    private readonly numBlocks: number,
    private readonly numSlots: number,
    private readonly numSparseLayers: number,
  ) {
    this.side = backend.createSideStream(Math.max(1, numSparseLayers));
  }

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

  /**
   * Sparse layer `sparseLayer`'s copy pass of `plan`: its misses land in `latentCache`, on
   * `stream` (default: the backend's).
   */
  copy(
    sparseLayer: number,
    plan: RowResolutionTensors,
    latentCache: Tensor,
    rows: DeviceSparseRows,
    stream: number = this.backend.stream,
  ): void {
    rowCopy(
      this.backend,
      plan,
      latentCache,
      this.hostTier.layerPtr(sparseLayer),
      this.hostTier.numHostBlocks,
      rows.rowFlags,
      stream,
    );
  }

  /**
   * Exact prefetch: the copy passes of `layers` (later sparse layers that share `plan`), queued on
   * the side stream after all work queued on the compute stream so far, each joined by
   * awaitPrefetch(its sparseLayer) before that layer reads its cache. Safe to overlap the layers
   * in between: a pass writes only the hot rows the plan chose as destinations, which no other
   * kernel of the forward reads or writes before that layer's attention (the step's own rows go
   * to their own slots in ACTIVE pages, misses land in the request's hot blocks), and it reads the
   * plan, the row flags and host rows, all unchanged until the forward ends (the plan lives in the
   * step's workspace for the whole forward: models/decoder.ts runs a step with shared layers
   * without per-layer workspace scopes; a host row changes only by a mirror, issued after the
   * forward). Every prefetched layer must be awaited in the same forward (a graph capture ends
   * with no side work left unjoined); a forward that throws half way leaves marks pending, which
   * the next forward joins or, after a failed capture, forgets first (joinPrefetches).
   */
  prefetch(
    layers: readonly { sparseLayer: number; cache: Tensor }[],
    plan: RowResolutionTensors,
    rows: DeviceSparseRows,
  ): void {
    if (layers.length === 0 || this.side === null) return;
    const side = this.side;
    this.marksCaptured = this.backend.graphs.isCapturing;
    side.afterCompute();
    for (const { sparseLayer, cache } of layers) {
      this.copy(sparseLayer, plan, cache, rows, side.handle);
      side.recordDone(sparseLayer);
    }
  }

  /** The compute stream waits for sparse layer `sparseLayer`'s prefetched pass; false when none is pending. */
  awaitPrefetch(sparseLayer: number): boolean {
    if (this.side === null || !this.side.isPending(sparseLayer)) return false;
    this.side.computeWaits(sparseLayer);
    return true;
  }

  /**
   * Marks still pending at a new forward (the last one threw half way): joined when they were
   * recorded eagerly; forgotten when recorded inside a graph capture, which then failed (a
   * finished capture joined all of them), so no wait names an event of a dead capture.
   */
  joinPrefetches(): void {
    if (this.marksCaptured) {
      this.side?.discardPending();
      return;
    }
    for (let l = 0; l < this.numSparseLayers; l++) this.awaitPrefetch(l);
  }

  /** Waits for and frees the prefetch stream. */
  dispose(): void {
    this.side?.dispose();
    this.side = null;
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
