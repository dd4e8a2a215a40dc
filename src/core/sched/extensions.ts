/**
 * Hooks through which optional features (HiSparse first) join the scheduler without edits to
 * `schedule()` (CONVENTIONS.md 9). Two strategy objects, both given in `SchedulerOptions`:
 *
 * - {@link KVPressureHandler}: consulted when an allocation fails, before the scheduler falls
 *   back to preemption (running requests) or to leaving the request waiting (waiting requests).
 *   HiSparse spills pages of other requests to host memory, frees their device blocks and
 *   returns true; the scheduler then retries the allocation.
 * - {@link SchedulerExtension}: per-step data the feature adds to `SchedulerOutput.extensions`
 *   under its ExtensionKey (core/extension_data.ts), its entry of `ModelRunnerOutput.extensions`
 *   coming back, and a notice whenever a request's blocks are about to be freed (finished or
 *   preempted).
 */
import type { RequestId } from "../ids.js";
import type { KVCacheManager } from "../kv/kv_cache_manager.js";
import type { Request } from "../request.js";
import type { ModelRunnerOutput, SchedulerOutput } from "./output.js";

/** Read access to the scheduler's state, handed to hooks. */
export interface SchedulerView {
  /** The device block bookkeeping (hooks may free or reassign blocks through it). */
  readonly kvCacheManager: KVCacheManager;
  /** Running requests, oldest first (the order `schedule()` serves them in). */
  readonly runningRequests: readonly Request[];
  /** A live (unfinished) request by id. */
  getRequest(reqId: RequestId): Request | undefined;
}

/** Which loop of `schedule()` failed to allocate. */
export type KVPressurePhase = "running" | "waiting";

/** What a {@link KVPressureHandler} is told about a failed allocation. */
export interface KVPressureContext {
  phase: KVPressurePhase;
  /** The request that needs blocks. */
  request: Request;
  /** Tokens it wants to compute this step. */
  numNewTokens: number;
  /**
   * Blocks that must leave the free queue for the allocation to succeed: fresh blocks plus
   * prefix-cache hits currently in the free queue. Success needs `numFreeBlocks >= numBlocksNeeded`.
   */
  numBlocksNeeded: number;
  /** Free blocks now. */
  numFreeBlocks: number;
  /** Requests already scheduled in this step (their blocks are read by this step's forward). */
  scheduledReqIds: ReadonlySet<RequestId>;
  scheduler: SchedulerView;
}

/**
 * Strategy consulted when the pool cannot satisfy an allocation (before preemption).
 *
 * Contract: return true only after returning at least one block to the pool; the scheduler
 * retries the allocation and asks again if it still fails. A true answer that freed nothing is
 * treated as false (so a faulty handler cannot loop the scheduler forever).
 */
export interface KVPressureHandler {
  /** Tries to free device blocks; true when it freed some. */
  relieveKVPressure(ctx: KVPressureContext): boolean;
  /**
   * Largest number of device blocks one request may need and still be served (the admission
   * limit). Default without a handler: the pool size. HiSparse raises it, since its requests
   * keep most pages in host memory.
   */
  maxBlocksPerRequest?(numGpuBlocks: number): number;
  /**
   * Whether the waiting request at the head of the queue may start (or restart) its prefill in
   * this step, asked before its first chunk is allocated; false keeps it waiting, and FCFS keeps
   * everything behind it waiting too. Absent: always (vLLM: an admission that later runs short
   * preempts). HiSparse answers false while the prefills already under way would leave too little
   * of the pool for this one's pages (core/hisparse/hybrid_policy.ts admitsPrefill).
   * Contract: true whenever no request is running, else the head of the queue waits forever (the
   * no-deadlock argument of src/core/README.md rests on it).
   */
  admitsPrefill?(request: Request, scheduler: SchedulerView): boolean;
}

/** Why a request's blocks are being freed. */
export type FreeReason = "finished" | "preempted";

/**
 * An optional feature riding on each step. Every method is optional; the feature reads and writes
 * its entries of `SchedulerOutput.extensions` and `ModelRunnerOutput.extensions` through its own
 * ExtensionKeys (typed, no casts), and its worker half (worker/extension.ts) has the same `name`.
 */
export interface SchedulerExtension {
  readonly name: string;
  /**
   * Called at the end of `schedule()`, once the batch is fixed and before `numComputedTokens`
   * advances (so `request.numComputedTokens` still equals the output's start-of-step values):
   * adds the feature's entry to `output.extensions` (nothing when the step needs none).
   */
  onScheduled?(output: SchedulerOutput, scheduler: SchedulerView): void;
  /**
   * Called at the start of `updateFromOutput()`; the feature reads its entry of
   * `modelRunnerOutput.extensions` (absent when the worker sent none).
   */
  onModelRunnerOutput?(modelRunnerOutput: ModelRunnerOutput, scheduler: SchedulerView): void;
  /**
   * Called just before a request's blocks return to the pool, so
   * `kvCacheManager.getBlockIds(request.requestId)` still lists them.
   */
  onRequestFreed?(request: Request, reason: FreeReason, scheduler: SchedulerView): void;
}

/** Optional strategies and features of a {@link Scheduler}. */
export interface SchedulerOptions {
  kvPressureHandler?: KVPressureHandler;
  extensions?: readonly SchedulerExtension[];
  /**
   * Block bookkeeping to use instead of a fresh `KVCacheManager(new BlockPool(...))` (e.g. one a
   * feature also holds). Its block size and pool size must match the cache config.
   */
  kvCacheManager?: KVCacheManager;
}

/** Counters and gauges of the scheduler (vLLM SchedulerStats, PrefixCacheStats). */
export interface SchedulerStats {
  numRunningReqs: number;
  numWaitingReqs: number;
  /** Fraction of device KV blocks in use, in [0, 1]. */
  kvCacheUsage: number;
  /** Tokens looked up in the prefix cache by scheduled requests (their numTokens), total. */
  prefixCacheQueries: number;
  /** Of those, tokens found in the cache, total. */
  prefixCacheHits: number;
  /**
   * Of the hits, tokens whose pages were only in the host tier (HiSparse; loaded back for the
   * prefill), total; the rest were device-resident. 0 without HiSparse.
   */
  prefixCacheHostHits: number;
  /** Preemptions since the scheduler started. */
  numPreemptions: number;
}
