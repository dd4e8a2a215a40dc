/**
 * What HiSparse sends with each step (SchedulerOutput.extensions under {@link HISPARSE_PLAN}) and
 * what the worker sends back (ModelRunnerOutput.extensions under {@link HISPARSE_RESULT}). Plain,
 * structured-cloneable data: the worker may run on another thread.
 */
import { extensionKey } from "../extension_data.js";
import type { BlockId, HostBlockId, RequestId } from "../ids.js";

/** Name of the HiSparse extensions (scheduler and worker halves) and of their step entries. */
export const HISPARSE = "hisparse";

/**
 * What changed in one request's page table since the previous plan (vLLM's CachedRequestData
 * habit: deltas, not whole rows). The worker applies the fields in order: append the new pages,
 * drop the spilled pages' device blocks, pin, set the hot buffer. Page p of the table has host
 * block hostBlockIds[p] (its identity), device block blockIds[p] (NULL_BLOCK_ID = -1 while the
 * page is INACTIVE), a pin flag, and the request has its hot-buffer blocks.
 */
export interface PageTableDelta {
  reqId: RequestId;
  /**
   * Index of the first appended page: the number of pages the worker holds for the request
   * before this delta (0 starts a new table: the request's first plan, or its first after a
   * preemption, whose id was in preemptedReqIds). Pages are only ever appended.
   */
  firstNewPage: number;
  /** Appended pages, in page order from firstNewPage: host block of each. */
  newHostBlockIds: HostBlockId[];
  /** Appended pages: device block of each (NULL_BLOCK_ID if spilled before it was sent). */
  newBlockIds: BlockId[];
  /** Earlier pages spilled since the previous plan, in spill order: their device block becomes -1. */
  spilledPages: number[];
  /** Pages pinned since the previous plan (whitelisted tokens), ascending. */
  newPinnedPages: number[];
  /** The request's hot-buffer blocks when it got them since the previous plan (once per table), else empty. */
  newHotBlockIds: BlockId[];
}

/** The per-step plan of the "hisparse" scheduler extension. */
export interface HiSparseStepPlan {
  /** Step number (1, 2, ...); the worker echoes it once the step's mirrors are done. */
  step: number;
  /** Page tables that changed since the last step, as deltas (new pages, spills, pins, hot blocks). */
  pageTableDeltas: PageTableDelta[];
  /**
   * Pages filled in this step: after the forward, copy device block `blockIds[i]` (every sparse
   * layer) to host block `hostBlockIds[i]` (eager mirror).
   */
  mirror: { blockIds: BlockId[]; hostBlockIds: HostBlockId[] };
  /**
   * Prefix-cache hits on host-resident pages: before the forward (after earlier mirrors), copy
   * host block `hostBlockIds[i]` (every sparse layer) into device block `blockIds[i]`. Their
   * dense-layer KV and digests are already on the device (indexed by host block).
   */
  load?: { blockIds: BlockId[]; hostBlockIds: HostBlockId[] };
  /** Scheduled requests with an INACTIVE page: they decode sparsely this step (one token each). */
  sparseReqIds: RequestId[];
}

/** The worker's answer for one step. Counters are this step's, not totals. */
export interface HiSparseStepResult {
  /** Echo of the plan's step: its mirrors are complete. */
  step: number;
  /** Selected INACTIVE (layer, kv head, page) slices found in the hot buffer. */
  hits: number;
  /** Selected INACTIVE slices copied from the host tier into the hot buffer. */
  misses: number;
  /** Bytes copied host -> device (misses). */
  hostToDeviceBytes: number;
  /** Bytes copied device -> host (mirrors). */
  deviceToHostBytes: number;
  /** Bytes copied host -> device by the plan's loads (host-resident prefix hits); 0 when absent. */
  loadedBytes?: number;
  /** INACTIVE pages currently held in some hot-buffer slot (SPARSE), over all requests. */
  numSparsePages: number;
}

/** Key of the plan in SchedulerOutput.extensions. */
export const HISPARSE_PLAN = extensionKey<HiSparseStepPlan>(HISPARSE);
/** Key of the worker's answer in ModelRunnerOutput.extensions. */
export const HISPARSE_RESULT = extensionKey<HiSparseStepResult>(HISPARSE);

/** Counters (totals since start) and gauges of HiSparse, for metrics and the periodic log line. */
export interface HiSparseStats {
  numActivePages: number;
  numSparsePages: number;
  numInactivePages: number;
  /** Requests holding at least one INACTIVE page. */
  numSparseRequests: number;
  hostPoolUsedBlocks: number;
  hostPoolTotalBlocks: number;
  hitsTotal: number;
  missesTotal: number;
  hostToDeviceBytesTotal: number;
  deviceToHostBytesTotal: number;
  spilledPagesTotal: number;
  mirroredPagesTotal: number;
  /** Host-resident prefix-cache pages loaded back to the device for a prefill. */
  loadedPagesTotal?: number;
  /** Request decode steps that attended sparsely (one per request and step). */
  sparseDecodesTotal: number;
}
