import { HISPARSE_STEP_META } from "../../attention/sparse/hisparse_attention.js";
import type { HotBufferResolver } from "../../attention/sparse/hot_buffer.js";
import type { SparseBatch } from "../../attention/sparse/selector.js";
import type { AttentionMetadata, Backend, Tensor } from "../../backends/backend.js";
import type { ExtensionData } from "../../core/extension_data.js";
import {
  HISPARSE,
  HISPARSE_PLAN,
  HISPARSE_RESULT,
  type HiSparseStepPlan,
  type PageTableDelta,
} from "../../core/hisparse/plan.js";
import type { RequestId } from "../../core/ids.js";
import type { SchedulerOutput } from "../../core/sched/output.js";
import type { WorkerExtension } from "../extension.js";
import type { PreparedInputs } from "../input_batch.js";
import type { CpuHostKvCache } from "./host_kv_cache.js";
import { streamedPrefillOf } from "./streamed_prefill.js";

/** The worker's copy of one request's page table, built from the plans' PageTableDeltas. */
interface WorkerPageTable {
  /** [numPages] host block of each page. */
  hostBlockIds: number[];
  /** [numPages] device block of each page, -1 (NULL_BLOCK_ID) for INACTIVE pages. */
  blockIds: number[];
  /** [numPages] 1 for pinned pages. */
  pinned: number[];
  hotBlockIds: number[];
}

/**
 * Applies one delta to a request's table (a new table for a request the worker does not hold:
 * its first plan, or its first after a preemption dropped the old table).
 * @throws Error when the delta does not start at the table's page count.
 */
function applyDelta(tables: Map<RequestId, WorkerPageTable>, d: PageTableDelta): void {
  const t = tables.get(d.reqId) ?? { hostBlockIds: [], blockIds: [], pinned: [], hotBlockIds: [] };
  if (d.firstNewPage !== t.hostBlockIds.length)
    throw new Error(
      `the page-table delta of request ${d.reqId} starts at page ${d.firstNewPage}, the worker holds ${t.hostBlockIds.length}`,
    );
  tables.set(d.reqId, t);
  d.newHostBlockIds.forEach((h, i) => {
    t.hostBlockIds.push(h);
    t.blockIds.push(d.newBlockIds[i]!);
    t.pinned.push(0);
  });
  for (const p of d.spilledPages) t.blockIds[p] = -1;
  for (const p of d.newPinnedPages) t.pinned[p] = 1;
  if (d.newHotBlockIds.length > 0) t.hotBlockIds = [...d.newHotBlockIds];
}

/**
 * The worker half of HiSparse ("hisparse" WorkerExtension). Keeps each request's page table from
 * the plans' deltas; before each forward builds the step's {@link HiSparseStepMeta} (host slot mapping,
 * the dense layers' host block tables, the sparse batch); after it, performs the eager mirrors
 * (device -> host tier, every sparse layer) and reports the step's counters. The same for DSA
 * models (host tier of latent rows: host_row_cache.ts; resolver: LruHotRowResolver).
 */
export class HiSparseWorker implements WorkerExtension {
  readonly name = HISPARSE;
  private readonly tables = new Map<RequestId, WorkerPageTable>();
  private deviceToHostBytes = 0;

  /**
   * @param kvCaches the model's per-layer caches (main pool for sparse layers).
   * @param sparseLayers layer index of each sparse layer, in order.
   */
  constructor(
    private readonly backend: Backend,
    private readonly blockSize: number,
    private readonly kvCaches: readonly Tensor[],
    private readonly sparseLayers: readonly number[],
    private readonly hostTier: Pick<CpuHostKvCache, "mirror" | "pageBytes"> &
      Partial<Pick<CpuHostKvCache, "load">>,
    private readonly resolver: Pick<HotBufferResolver, "forget" | "takeCounters" | "numSparsePages">,
  ) {}

  /** Number of requests whose page table the worker holds. */
  get numRequests(): number {
    return this.tables.size;
  }

  applySchedulerOutput(so: SchedulerOutput): void {
    for (const id of [...so.finishedReqIds, ...so.preemptedReqIds]) {
      this.tables.delete(id);
      this.resolver.forget(id);
    }
    const plan = so.extensions.get(HISPARSE_PLAN);
    if (plan === undefined) return;
    for (const d of plan.pageTableDeltas) applyDelta(this.tables, d);
    // Host-resident prefix hits: back into their fresh device blocks before the forward.
    const load = plan.load;
    if (load !== undefined && load.blockIds.length > 0)
      this.sparseLayers.forEach((layer, li) => {
        if (this.hostTier.load === undefined)
          throw new Error(
            "this host tier cannot load pages back (prefix caching through the host tier covers Quest pages only)",
          );
        this.hostTier.load(li, this.kvCaches[layer]!, load.blockIds, load.hostBlockIds);
      });
  }

  /** @throws Error when the step has no plan or a scheduled request has no page table. */
  prepareForward(
    so: SchedulerOutput,
    inputs: PreparedInputs,
    meta: AttentionMetadata,
    out: ExtensionData,
  ): void {
    const plan = planOf(so);
    const bs = this.blockSize;
    const R = inputs.reqIds.length;
    const rows = inputs.reqIds.map((id) => {
      const t = this.tables.get(id);
      if (t === undefined) throw new Error(`request ${id} has no hisparse page table`);
      return t;
    });
    const T = inputs.inputIds.length;
    const hostSlotMapping = new Int32Array(T);
    let maxPages = 1;
    for (let r = 0; r < R; r++) {
      const hb = rows[r]!.hostBlockIds;
      maxPages = Math.max(maxPages, hb.length);
      for (let t = inputs.queryStartLoc[r]!; t < inputs.queryStartLoc[r + 1]!; t++) {
        const pos = inputs.positions[t]!;
        hostSlotMapping[t] = hb[Math.floor(pos / bs)]! * bs + (pos % bs);
      }
    }
    const hostTables = new Int32Array(R * maxPages);
    for (let r = 0; r < R; r++) hostTables.set(rows[r]!.hostBlockIds, r * maxPages);
    const b = this.backend;
    const denseMeta: AttentionMetadata = {
      ...meta,
      blockTables: b.stage(hostTables, [R, maxPages], "i32"),
      slotMapping: b.stage(hostSlotMapping, [T], "i32"),
      host: {
        ...meta.host,
        blockTables: hostTables,
        maxBlocksPerReq: maxPages,
        slotMapping: hostSlotMapping,
      },
    };
    const sparse = new Set(plan.sparseReqIds);
    out.set(HISPARSE_STEP_META, {
      hostSlotMapping,
      denseMeta,
      batch: this.sparseBatch(plan.sparseReqIds, inputs),
      streamed: streamedPrefillOf(
        b,
        meta,
        bs,
        (r) => rows[r]!.blockIds,
        (r) => sparse.has(inputs.reqIds[r]!),
      ),
    });
  }

  /** The sparse requests of the step, flattened (SparseBatch). */
  private sparseBatch(reqIds: readonly RequestId[], inputs: PreparedInputs): SparseBatch {
    const S = reqIds.length;
    const rowOf = new Map(inputs.reqIds.map((id, r) => [id, r]));
    const batchIdx = new Int32Array(S);
    const tokenIdx = new Int32Array(S);
    const numTokens = new Int32Array(S);
    const pageStart = new Int32Array(S + 1);
    const hotStart = new Int32Array(S + 1);
    const tables = reqIds.map((id, s) => {
      const r = rowOf.get(id);
      if (r === undefined) throw new Error(`sparse request ${id} is not in the step`);
      batchIdx[s] = r;
      tokenIdx[s] = inputs.queryStartLoc[r]!;
      numTokens[s] = inputs.seqLens[r]!;
      const t = this.tables.get(id)!;
      pageStart[s + 1] = pageStart[s]! + Math.ceil(numTokens[s]! / this.blockSize);
      hotStart[s + 1] = hotStart[s]! + t.hotBlockIds.length;
      return t;
    });
    const hostBlockIds = new Int32Array(pageStart[S]!);
    const blockIds = new Int32Array(pageStart[S]!);
    const pinned = new Uint8Array(pageStart[S]!);
    const hotBlockIds = new Int32Array(hotStart[S]!);
    tables.forEach((t, s) => {
      const [p0, n] = [pageStart[s]!, pageStart[s + 1]! - pageStart[s]!];
      for (let i = 0; i < n; i++) {
        hostBlockIds[p0 + i] = t.hostBlockIds[i]!;
        blockIds[p0 + i] = t.blockIds[i]!;
        pinned[p0 + i] = t.pinned[i]!;
      }
      hotBlockIds.set(t.hotBlockIds, hotStart[s]!);
    });
    return {
      numSparse: S,
      reqIds: [...reqIds],
      batchIdx,
      tokenIdx,
      numTokens,
      pageStart,
      hostBlockIds,
      blockIds,
      pinned,
      hotStart,
      hotBlockIds,
    };
  }

  /** Mirrors the pages the step filled (every sparse layer) and reports the step's counters. */
  afterForward(so: SchedulerOutput, out: ExtensionData): void {
    const plan = so.extensions.get(HISPARSE_PLAN);
    if (plan === undefined) return;
    const { blockIds, hostBlockIds } = plan.mirror;
    if (blockIds.length > 0) {
      this.sparseLayers.forEach((layer, li) => {
        this.hostTier.mirror(li, this.kvCaches[layer]!, blockIds, hostBlockIds);
      });
      this.deviceToHostBytes = blockIds.length * this.hostTier.pageBytes;
    } else this.deviceToHostBytes = 0;
    const c = this.resolver.takeCounters();
    out.set(HISPARSE_RESULT, {
      step: plan.step,
      hits: c.hits,
      misses: c.misses,
      hostToDeviceBytes: c.hostToDeviceBytes,
      deviceToHostBytes: this.deviceToHostBytes,
      numSparsePages: this.resolver.numSparsePages,
    });
  }
}

/** The step's plan. @throws Error when the step carries none. */
function planOf(so: SchedulerOutput): HiSparseStepPlan {
  const plan = so.extensions.get(HISPARSE_PLAN);
  if (plan === undefined) throw new Error("the step carries no hisparse plan");
  return plan;
}
