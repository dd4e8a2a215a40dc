/**
 * What HiSparse sends with each step (SchedulerOutput.extensions["hisparse"]) and what the worker
 * sends back (ModelRunnerOutput.extensions["hisparse"]). Plain, structured-cloneable data: the
 * worker may run on another thread.
 */
import type { BlockId, HostBlockId, RequestId } from "../ids.js";

/** Key of HiSparse's entries in SchedulerOutput / ModelRunnerOutput / AttentionMetadata extensions. */
export const HISPARSE = "hisparse";

/** One request's page table, sent whole whenever it changed. */
export interface PageTableRow {
  reqId: RequestId;
  /** [numPages] host block of each page (its identity; dense layers' KV lives at this index). */
  hostBlockIds: HostBlockId[];
  /** [numPages] device block of each page, or NULL_BLOCK_ID (-1) when the page is INACTIVE. */
  blockIds: BlockId[];
  /** Pinned page indices (whitelisted tokens), ascending. */
  pinnedPages: number[];
  /** The request's hot-buffer blocks, empty until it first needs them. */
  hotBlockIds: BlockId[];
}

/** The per-step plan of the "hisparse" scheduler extension. */
export interface HiSparseStepPlan {
  /** Step number (1, 2, ...); the worker echoes it once the step's mirrors are done. */
  step: number;
  /** Page tables that changed since the last step (new pages, spills, hot blocks, pins). */
  pageTables: PageTableRow[];
  /**
   * Pages filled in this step: after the forward, copy device block `blockIds[i]` (every sparse
   * layer) to host block `hostBlockIds[i]` (eager mirror).
   */
  mirror: { blockIds: BlockId[]; hostBlockIds: HostBlockId[] };
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
  /** INACTIVE pages currently held in some hot-buffer slot (SPARSE), over all requests. */
  numSparsePages: number;
}

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
  /** Request decode steps that attended sparsely (one per request and step). */
  sparseDecodesTotal: number;
}
