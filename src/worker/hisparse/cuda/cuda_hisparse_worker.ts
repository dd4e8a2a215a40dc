import {
  DEVICE_HISPARSE_STEP_META,
  type DeviceHiSparseStepMeta,
} from "../../../attention/sparse/device_sparse.js";
import type { AttentionMetadata, Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import type { ExtensionData } from "../../../core/extension_data.js";
import {
  HISPARSE,
  HISPARSE_PLAN,
  HISPARSE_RESULT,
  type HiSparseStepPlan,
} from "../../../core/hisparse/plan.js";
import type { SchedulerOutput } from "../../../core/sched/output.js";
import type { ExtensionGraphBucket, ExtensionGraphHooks, WorkerExtension } from "../../extension.js";
import type { PreparedInputs } from "../../input_batch.js";
import { streamedPrefillOf } from "../streamed_prefill.js";
import type { CudaHostKvTier } from "./cuda_host_tier.js";
import type { HiSparseSlotTables } from "./slot_tables.js";
import { buildStepArrays, denseHostTables } from "./step_inputs.js";

/** Graph variants: steps without sparse rows replay the dense sequence (plus digests). */
export const GRAPH_VARIANT_DENSE = "dense";
export const GRAPH_VARIANT_SPARSE = "sparse";

/** The step's plan. @throws Error when the step carries none. */
function planOf(so: SchedulerOutput): HiSparseStepPlan {
  const plan = so.extensions.get(HISPARSE_PLAN);
  if (plan === undefined) throw new Error("the step carries no hisparse plan");
  return plan;
}

/**
 * The worker half of HiSparse on CUDA ("hisparse" WorkerExtension), the device twin of
 * HiSparseWorker. Host work per step is what the plan requires: the page-table deltas are
 * uploaded into the persistent slot tables (changed entries only), and each step writes three
 * small arrays (request slot, sparse flag, host slot per token). Everything else (dense-layer
 * tables, selection, resolution, swap-in) happens on the device, so decode steps replay from CUDA
 * graphs (`graph`: variants "dense" and "sparse" per batch bucket). After the forward: eager
 * mirrors on the side stream, and the resolver's counters (read only when a sparse row ran).
 */
export class CudaHiSparseWorker implements WorkerExtension {
  readonly name = HISPARSE;
  readonly graph: ExtensionGraphHooks;
  /** Whether the last forward had sparse rows (the resolver counters changed). */
  private lastHadSparse = false;

  constructor(
    readonly backend: CudaBackend,
    private readonly blockSize: number,
    readonly tables: HiSparseSlotTables,
    readonly hostTier: CudaHostKvTier,
    /** More device state to free with the extension (the selector's digests). */
    private readonly owned: readonly { dispose(): void }[] = [],
    /**
     * Host-to-device bytes of one miss the resolver counts: Quest one (page, layer, kv head)
     * slice (the default, hostTier.sliceBytes); DSA one latent row times the layers that copy it
     * (the resolver counts once per indexer, each of its layers copies).
     */
    private readonly bytesPerMiss: number = hostTier.sliceBytes,
  ) {
    this.graph = {
      variant: (so) => {
        const plan = so.extensions.get(HISPARSE_PLAN);
        if (plan === undefined) return null;
        return plan.sparseReqIds.length > 0 ? GRAPH_VARIANT_SPARSE : GRAPH_VARIANT_DENSE;
      },
      createBucket: (size, variant, base) => new HiSparseGraphBucket(this, size, variant, base),
    };
  }

  /** Number of requests holding a slot. */
  get numRequests(): number {
    return this.tables.numRequests;
  }

  applySchedulerOutput(so: SchedulerOutput): void {
    for (const id of [...so.finishedReqIds, ...so.preemptedReqIds]) this.tables.release(id);
    const plan = so.extensions.get(HISPARSE_PLAN);
    if (plan === undefined) return;
    for (const d of plan.pageTableDeltas) this.tables.applyDelta(d);
    // Host-resident prefix hits, before the forward (eager or graph) that reads them.
    if (plan.load !== undefined) this.hostTier.load(plan.load.blockIds, plan.load.hostBlockIds);
  }

  /** Eager steps: the step's device metadata from staged arrays. @throws Error without a plan. */
  prepareForward(
    so: SchedulerOutput,
    inputs: PreparedInputs,
    meta: AttentionMetadata,
    out: ExtensionData,
  ): void {
    const plan = planOf(so);
    this.hostTier.beforeForward();
    const R = inputs.reqIds.length;
    const T = inputs.inputIds.length;
    const a = this.stepArrays(inputs, plan, R, T);
    this.lastHadSparse = a.numSparse > 0;
    const b = this.backend;
    const width = Math.max(1, inputs.maxBlocksPerReq);
    const bs = this.blockSize;
    const dense = denseHostTables(
      a.reqSlot,
      R,
      width,
      (r) => Math.ceil(inputs.seqLens[r]! / bs),
      (s) => this.tables.hostRow(s),
    );
    const hostSlotMapping = b.stage(a.hostSlotMapping, [T], "i32");
    const mixed = a.numSparse > 0 && T !== R;
    const denseMeta: AttentionMetadata = {
      ...meta,
      blockTables: b.stage(dense, [R, width], "i32"),
      slotMapping: hostSlotMapping,
      host: { ...meta.host, blockTables: dense, maxBlocksPerReq: width, slotMapping: a.hostSlotMapping },
    };
    out.set(DEVICE_HISPARSE_STEP_META, {
      rows: {
        reqSlot: b.stage(a.reqSlot, [R], "i32"),
        rowFlags: b.stage(a.rowFlags, [R], "i32"),
        tokenRow: mixed ? b.stage(a.tokenRow, [R], "i32") : null,
        seqLens: meta.seqLens,
      },
      hostSlotMapping,
      denseMeta,
      hasSparse: a.numSparse > 0,
      maskedSeqLens: mixed ? b.stage(a.maskedSeqLens, [R], "i32") : null,
      streamed: streamedPrefillOf(
        b,
        meta,
        bs,
        (r) => this.tables.deviceRow(a.reqSlot[r]!),
        (r) => a.rowFlags[r] === 1 || a.reqSlot[r]! < 0,
      ),
    });
  }

  /** Mirrors the pages the step filled and reports the step's counters. @throws Error when the resolver reported an error. */
  afterForward(so: SchedulerOutput, out: ExtensionData): void {
    const plan = so.extensions.get(HISPARSE_PLAN);
    if (plan === undefined) return;
    const { blockIds, hostBlockIds } = plan.mirror;
    this.hostTier.mirror(blockIds, hostBlockIds);
    const resolved = this.lastHadSparse;
    this.lastHadSparse = false;
    const c = resolved ? this.tables.takeCounters() : { hits: 0, misses: 0, errors: 0 };
    if (c.errors > 0)
      throw new Error(
        `the HiSparse resolver failed for ${c.errors} selections (more INACTIVE pages or rows than hot-buffer slots, an entry outside the context, or no tail page)`,
      );
    out.set(HISPARSE_RESULT, {
      step: plan.step,
      hits: c.hits,
      misses: c.misses,
      hostToDeviceBytes: c.misses * this.bytesPerMiss,
      deviceToHostBytes: blockIds.length * this.hostTier.pageBytes,
      numSparsePages: this.tables.numSparsePages(resolved),
    });
  }

  /** Frees the slot tables, the host tier (after the mirrors finished) and what it owns. */
  dispose(): void {
    this.hostTier.dispose();
    this.tables.dispose();
    for (const o of this.owned) o.dispose();
  }

  /** The step's arrays, padded to R rows and T tokens. */
  stepArrays(inputs: PreparedInputs, plan: HiSparseStepPlan, R: number, T: number) {
    return buildStepArrays(
      inputs,
      plan.sparseReqIds,
      this.blockSize,
      (id) => this.tables.slotOf(id),
      (s) => this.tables.hostRow(s),
      R,
      T,
    );
  }

  /** Called by a graph bucket before its replay: the step's flags, and the mirrors it must wait for. */
  beforeReplay(hadSparse: boolean): void {
    this.hostTier.beforeForward();
    this.lastHadSparse = hadSparse;
  }
}

/** Device state the resolver changes in a forward (saved around the graph warm-up run). */
const MUTABLE_STATE = ["lruPage", "lruLastUse", "lruTick", "heldCount", "heldPages", "counters"] as const;

/**
 * One graph bucket of HiSparse: persistent [size] tensors for the request slots, sparse flags and
 * host slots; the dense layers' host block tables are gathered from the slot tables inside the
 * graph (beginForward), so a replay needs only the three small writes.
 */
class HiSparseGraphBucket implements ExtensionGraphBucket {
  private readonly meta: DeviceHiSparseStepMeta;
  private readonly reqSlot: Tensor;
  private readonly rowFlags: Tensor;
  private readonly hostSlotMapping: Tensor;
  private saved: Tensor[] | null = null;

  constructor(
    private readonly worker: CudaHiSparseWorker,
    private readonly size: number,
    variant: string,
    private readonly base: AttentionMetadata,
  ) {
    const b = this.backend;
    this.reqSlot = b.allocateFilled([size], "i32", 0xff);
    this.rowFlags = b.allocateFilled([size], "i32", 0);
    this.hostSlotMapping = b.allocateFilled([size], "i32", 0xff);
    this.meta = {
      rows: { reqSlot: this.reqSlot, rowFlags: this.rowFlags, tokenRow: null, seqLens: base.seqLens },
      hostSlotMapping: this.hostSlotMapping,
      denseMeta: base, // replaced by beginForward()
      hasSparse: variant === GRAPH_VARIANT_SPARSE,
      maskedSeqLens: null,
      streamed: null,
    };
  }

  private get backend(): CudaBackend {
    return this.worker.backend;
  }

  addTo(out: ExtensionData): void {
    out.set(DEVICE_HISPARSE_STEP_META, this.meta);
  }

  write(so: SchedulerOutput, inputs: PreparedInputs): void {
    const a = this.worker.stepArrays(inputs, planOf(so), this.size, this.size);
    const b = this.backend;
    b.writeTensor(this.reqSlot, a.reqSlot);
    b.writeTensor(this.rowFlags, a.rowFlags);
    b.writeTensor(this.hostSlotMapping, a.hostSlotMapping);
    this.worker.beforeReplay(a.numSparse > 0);
  }

  beginForward(): void {
    const tables = this.backend.gatherRows(this.worker.tables.hostBlockTable, this.reqSlot);
    this.meta.denseMeta = { ...this.base, blockTables: tables, slotMapping: this.hostSlotMapping };
  }

  saveState(): void {
    const b = this.backend;
    const st = this.worker.tables.state;
    this.saved = MUTABLE_STATE.map((k) => {
      const t = b.allocateFilled(st[k].shape, "i32");
      b.copyTensor(t, st[k]);
      return t;
    });
  }

  restoreState(): void {
    if (this.saved === null) return;
    const b = this.backend;
    const st = this.worker.tables.state;
    const saved = this.saved;
    MUTABLE_STATE.forEach((k, i) => {
      b.copyTensor(st[k], saved[i]!);
    });
    b.synchronize(); // the copies read the saved tensors, freed now
    for (const t of saved) b.free(t);
    this.saved = null;
  }

  dispose(): void {
    for (const t of [this.reqSlot, this.rowFlags, this.hostSlotMapping]) this.backend.free(t);
  }
}
