import type { Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import { questSelect, reshapeAndCacheDigest } from "../../../backends/cuda/hisparse_ops.js";
import { DEFAULT_DIGEST_DTYPE } from "../../../config/hisparse_config.js";
import type { DevicePageSelection, DeviceSelector, DeviceSparseRows } from "../device_sparse.js";
import { type QuestPageBudget, type QuestSelectorConfig, questPageBudget } from "../quest.js";

/**
 * The per-request page tables the device selector reads: one row per request slot
 * (`DeviceSparseRows.reqSlot`), kept by the worker (worker/hisparse/cuda/slot_tables.ts).
 */
export interface DeviceSelectorTables {
  /** i32 [numSlots, W] host block of each page (the index of its digest). */
  readonly hostBlockTable: Tensor;
  /** i32 [numSlots, W] nonzero for pinned pages. */
  readonly pinnedTable: Tensor;
}

/**
 * Quest selection on CUDA (the device twin of QuestSelector, quest.ts, its oracle): per sparse
 * layer digests [numHostBlocks, S, 2, Hkv, D] (min, max of the post-RoPE keys of each of the
 * page's S = blockSize / digestTokens sub-pages) of `config.digestDtype`, updated by the KV write
 * kernel; selection per (row, kv head) by hsQuestSelect, page for page the oracle's (float32
 * scores in the oracle's order, same tie rule). `bf16` (default): exact (the keys are bf16 in
 * the cache, and min / max of bf16 values are bf16 values), 2 bytes an element; `fp8`: "fp8"
 * tensors of e4m3 codes, min rounded down and max up (the oracle's values, code for code), 1 byte.
 * At the Llama-3.1-8B shape (30 sparse layers) a page's digests take 120 KiB with the default
 * (one bf16 digest), 240 KiB with 4 sub-pages in fp8, 480 KiB with 4 in bf16.
 */
export class CudaQuestSelector implements DeviceSelector {
  /** Per sparse layer: fp8 or bf16 [numHostBlocks, S, 2, Hkv, D]. */
  readonly digests: Tensor[];
  private readonly budget: QuestPageBudget;

  /**
   * Per sparse layer, benchmark only (`benchSelectionOverlap`): bytes [numSlots, Hkv, W] of the
   * previous selection (HsQuestSelectParams.prevSelected); empty otherwise.
   */
  private readonly prevSelected: Tensor[] = [];

  /**
   * @param benchSelectionOverlap benchmark only (HiSparseConfig.benchSelectionOverlap): keep each
   *   page of a row's previous selection with this probability (bench/hisparse_throughput.ts).
   * @throws Error when a token count is not a multiple of the block size (questPageBudget).
   */
  constructor(
    private readonly backend: CudaBackend,
    readonly config: QuestSelectorConfig,
    private readonly tables: DeviceSelectorTables,
    private benchSelectionOverlap: number | null = null,
  ) {
    this.budget = questPageBudget(config);
    const { numKvHeads: Hkv, headDim: D } = config.layout;
    const shape = [Math.max(1, config.numHostBlocks), this.budget.digestsPerPage, 2, Hkv, D];
    this.digests = Array.from({ length: config.numSparseLayers }, () =>
      backend.allocateFilled(shape, config.digestDtype ?? DEFAULT_DIGEST_DTYPE),
    );
    if (benchSelectionOverlap !== null) {
      const [S, W] = tables.hostBlockTable.shape as [number, number];
      const words = Math.ceil((S * Hkv * W) / 4); // i32 words holding the flag bytes
      for (let l = 0; l < config.numSparseLayers; l++)
        this.prevSelected.push(backend.allocateFilled([words], "i32"));
    }
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
      this.config.blockSize / this.budget.digestsPerPage,
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
      ...this.budget,
      ...(this.benchSelectionOverlap === null
        ? {}
        : { overlap: { prevSelected: this.prevSelected[sparseLayer]!, p: this.benchSelectionOverlap } }),
    });
  }

  /**
   * Benchmarks only: the selection overlap of later selections (bench/hisparse_throughput.ts
   * `--overlap P1,P2`: one engine measured at several p). A captured decode graph holds the p it
   * was captured with (a kernel argument): drop the graphs afterwards (ModelRunner.dropGraphs).
   * @throws Error when the selector was built without the overlap state (benchSelectionOverlap
   *   null: no previous-selection flags) or p is not in [0, 1].
   */
  setBenchSelectionOverlap(p: number): void {
    if (this.prevSelected.length === 0 && this.config.numSparseLayers > 0)
      throw new Error("the selector was built without benchSelectionOverlap: no previous selections to keep");
    if (!(p >= 0 && p <= 1)) throw new Error(`selection overlap p must be in [0, 1], got ${p}`);
    this.benchSelectionOverlap = p;
  }

  /** Frees the digests (and the benchmark's selection flags). */
  dispose(): void {
    for (const t of [...this.digests, ...this.prevSelected]) this.backend.free(t);
  }
}
