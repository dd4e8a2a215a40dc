/**
 * HiSparse on a device backend (DESIGN.md §4): the interfaces that the graph-capturable path
 * uses instead of the host-array ones of selector.ts / hot_buffer.ts. Everything stays in device
 * tensors (no host round trip), so a decode step with selection, swap-in and sparse attention is
 * captured in one CUDA graph. Implemented on CUDA beside this file, in cuda/ (CudaQuestSelector,
 * CudaLruResolver, CudaHiSparseAttention; kernels in native/kernels/hisparse.h); the CPU classes
 * (QuestSelector, LruHotBufferResolver) are the oracle they are tested against.
 */
import type { AttentionMetadata, Tensor } from "../../backends/backend.js";
import { extensionKey } from "../../core/extension_data.js";
import type { StreamedPrefill } from "./selector.js";

/** The rows of a step as the kernels read them (R rows: the step's requests, or a padded bucket). */
export interface DeviceSparseRows {
  /** i32 [R] request slot of each row (its row in the per-request tables; -1 for padding). */
  reqSlot: Tensor;
  /** i32 [R] 1 for rows that decode sparsely in this step. */
  rowFlags: Tensor;
  /** i32 [R] qkv row of each row's query token; null when row r is token r (a decode batch). */
  tokenRow: Tensor | null;
  /** i32 [R] context length after the step. */
  seqLens: Tensor;
}

/** Pages chosen per (row, kv head), ascending: i32 [R, Hkv, W] and the counts i32 [R, Hkv]. */
export interface DevicePageSelection {
  selPages: Tensor;
  selCount: Tensor;
}

/** Device blocks per (row, kv head) in attention order, i32 [R, Hkv, W], and lengths i32 [R, Hkv]. */
export interface DeviceResolvedPages {
  headBlockTables: Tensor;
  headSeqLens: Tensor;
}

/** Page selection with digests on the device (Quest: CudaQuestSelector). */
export interface DeviceSelector {
  /**
   * Writes the step's K/V of sparse layer `sparseLayer` into its cache at `slotMapping` and folds
   * the keys into the page digests at `hostSlotMapping` (one fused kernel on CUDA).
   * qkv: [T, (Hq + 2Hkv) * D] after RoPE; slotMapping, hostSlotMapping: i32 [T].
   */
  writeKvAndDigests(
    sparseLayer: number,
    qkv: Tensor,
    kvCache: Tensor,
    slotMapping: Tensor,
    hostSlotMapping: Tensor,
  ): void;
  /** Pages each flagged row attends to in sparse layer `sparseLayer`. */
  select(sparseLayer: number, qkv: Tensor, rows: DeviceSparseRows): DevicePageSelection;
}

/** Resolution of selected pages to device blocks, recalling INACTIVE ones into the hot buffer. */
export interface DeviceHotBufferResolver {
  /** Resolves the selection of flagged rows of sparse layer `sparseLayer`; misses land in `kvCache`. */
  resolve(
    sparseLayer: number,
    selection: DevicePageSelection,
    rows: DeviceSparseRows,
    kvCache: Tensor,
  ): DeviceResolvedPages;
}

/**
 * What the HiSparse worker extension prepares per step on a device backend
 * (AttentionMetadata.extensions under {@link DEVICE_HISPARSE_STEP_META}); in a captured graph,
 * the same tensors every replay.
 */
export interface DeviceHiSparseStepMeta {
  /** Rows for the kernels (seqLens = the step's). */
  rows: DeviceSparseRows;
  /** i32 [T] hostBlock * blockSize + offset of each token (dense layers' KV writes, digests). */
  hostSlotMapping: Tensor;
  /** The step's metadata for dense layers: host block tables and the host slot mapping. */
  denseMeta: AttentionMetadata;
  /** True when some row decodes sparsely (host-known: selects the graph variant). */
  hasSparse: boolean;
  /**
   * For a batch mixing sparse decodes with other rows (tokenRow set): i32 [R] seqLens with the
   * sparse rows at 0, so that the general attention kernel skips them; null otherwise.
   */
  maskedSeqLens: Tensor | null;
  /** The prefills beside host-resident pages (DSA models; eager steps only), or null. */
  streamed: StreamedPrefill | null;
}

/**
 * Key of the device step metadata in AttentionMetadata.extensions (a name of its own, so that it
 * is never read as the CPU path's HiSparseStepMeta).
 */
export const DEVICE_HISPARSE_STEP_META = extensionKey<DeviceHiSparseStepMeta>("hisparse-device");
