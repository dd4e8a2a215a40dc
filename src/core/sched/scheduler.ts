import {
  type CacheConfig,
  type SchedulerConfig,
  validateCacheConfig,
  validateSchedulerConfig,
} from "../../config/configs.js";
import type { BlockId, RequestId } from "../ids.js";
import { BlockPool } from "../kv/block_pool.js";
import { KVCacheManager } from "../kv/kv_cache_manager.js";
import { blocksForTokens, maxBlocksPerRequest } from "../kv/kv_memory.js";
import { isFinished, type Request, RequestStatus } from "../request.js";
import type {
  FreeReason,
  KVPressureHandler,
  SchedulerExtension,
  SchedulerOptions,
  SchedulerStats,
  SchedulerView,
} from "./extensions.js";
import { type PressureStepArgs, relieveKVPressure } from "./kv_pressure.js";
import type { EngineCoreOutput, ModelRunnerOutput, SchedulerOutput } from "./output.js";
import { RequestQueue } from "./request_queue.js";
import {
  buildSchedulerOutput,
  capLongPrefill,
  makeEngineCoreOutput,
  maxKvTokens,
  newStepState,
  type PromptCacheHits,
  type StepState,
} from "./step.js";
import { appendOutputTokens } from "./stop.js";

/**
 * vLLM v1's scheduler (vllm/v1/core/sched/scheduler.py) over a {@link KVCacheManager}: one token
 * budget per step shared by decodes and (chunked) prefills, FCFS admission, recompute
 * preemption of the newest running request. Pure bookkeeping: it emits a plain
 * {@link SchedulerOutput} and reads back a {@link ModelRunnerOutput}.
 *
 * Request order ("arrival") is the order of `addRequest` calls; `running` is kept in that order,
 * so the newest running request is always last and the oldest is served first.
 */
export class Scheduler implements SchedulerView {
  readonly schedulerConfig: SchedulerConfig;
  readonly cacheConfig: CacheConfig;
  readonly kvCacheManager: KVCacheManager;
  private readonly kvPressureHandler: KVPressureHandler | null;
  private readonly extensions: readonly SchedulerExtension[];

  /** Live (unfinished) requests by id. */
  private readonly requests = new Map<RequestId, Request>();
  private readonly waiting = new RequestQueue();
  /** Running requests in arrival order. */
  private running: Request[] = [];
  /** Finished since the last `schedule()`; sent to the worker in the next output. */
  private finishedReqIds = new Set<RequestId>();
  /** Outputs of requests rejected at admission, reported by the next `updateFromOutput()`. */
  private pendingOutputs: EngineCoreOutput[] = [];
  /** Prompt tokens served from the prefix cache at each request's first scheduling. */
  private readonly numCachedTokens = new Map<RequestId, PromptCacheHits>();
  private prefixCacheQueries = 0;
  private prefixCacheHits = 0;
  private numPreemptions = 0;

  /**
   * @throws Error (one sentence listing the reasons) when a config is invalid, the pool has no
   *   blocks, or a given kvCacheManager does not match the cache config.
   */
  constructor(schedulerConfig: SchedulerConfig, cacheConfig: CacheConfig, options: SchedulerOptions = {}) {
    const reasons = [...validateSchedulerConfig(schedulerConfig), ...validateCacheConfig(cacheConfig)];
    if (cacheConfig.numGpuBlocks < 1)
      reasons.push("the KV cache has no blocks (raise --gpu-memory-utilization)");
    const kv = options.kvCacheManager;
    if (
      kv !== undefined &&
      (kv.blockSize !== cacheConfig.blockSize || kv.blockPool.numGpuBlocks !== cacheConfig.numGpuBlocks)
    )
      reasons.push("the given KV cache manager does not match the cache config's block size and block count");
    if (reasons.length > 0) throw new Error(`invalid scheduler setup: ${reasons.join("; ")}`);
    this.schedulerConfig = schedulerConfig;
    this.cacheConfig = cacheConfig;
    this.kvCacheManager =
      kv ??
      new KVCacheManager(
        new BlockPool(cacheConfig.numGpuBlocks, cacheConfig.enablePrefixCaching),
        cacheConfig.blockSize,
      );
    this.kvPressureHandler = options.kvPressureHandler ?? null;
    this.extensions = options.extensions ?? [];
  }

  get numRunning(): number {
    return this.running.length;
  }
  get numWaiting(): number {
    return this.waiting.length;
  }
  get runningRequests(): readonly Request[] {
    return this.running;
  }
  /** Waiting requests, front (next to admit) first. */
  get waitingRequests(): readonly Request[] {
    return this.waiting.toArray();
  }

  getRequest(reqId: RequestId): Request | undefined {
    return this.requests.get(reqId);
  }

  /**
   * Most KV blocks one request may ever hold: the pressure handler's `maxBlocksPerRequest`
   * (HiSparse: device and host pool), else the pool; read by admission and the start-up check.
   */
  get maxBlocksPerRequest(): number {
    const numGpuBlocks = this.kvCacheManager.blockPool.numGpuBlocks;
    return (
      this.kvPressureHandler?.maxBlocksPerRequest?.(numGpuBlocks) ??
      maxBlocksPerRequest({ numGpuBlocks, numHostBlocks: null })
    );
  }

  /**
   * Queues a new request, or rejects it at once as FINISHED_IGNORED (reported by the next
   * `updateFromOutput()`, its id in the next output's finishedReqIds) when its prompt is longer
   * than maxModelLen or it could never fit in the KV cache, even alone.
   * @throws Error when a request with the same id is live, or the request is not WAITING.
   */
  addRequest(request: Request): void {
    const reqId = request.requestId;
    if (this.requests.has(reqId)) throw new Error(`request ${reqId} is already in the scheduler`);
    if (request.status !== RequestStatus.WAITING)
      throw new Error(`request ${reqId} must be waiting to be added, it is ${request.status}`);
    if (this.admissionError(request) !== null) {
      request.status = RequestStatus.FINISHED_IGNORED;
      this.finishedReqIds.add(reqId);
      this.pendingOutputs.push(makeEngineCoreOutput(request, [], null));
      return;
    }
    this.requests.set(reqId, request);
    this.waiting.add(request);
  }

  /**
   * Why the request can never be served, as one sentence for the user, or null when it can:
   * its prompt must fit maxModelLen and its largest KV footprint ({@link maxKvTokens}) the block
   * limit ({@link maxBlocksPerRequest}). The server calls it up front; `addRequest` applies it.
   */
  admissionError(request: Request): string | null {
    const { maxModelLen } = this.schedulerConfig;
    if (request.numPromptTokens > maxModelLen)
      return `the prompt has ${request.numPromptTokens} tokens, more than the maximum model length of ${maxModelLen}`;
    const numTokens = maxKvTokens(request, maxModelLen);
    const blocksNeeded = blocksForTokens(numTokens, this.cacheConfig.blockSize);
    const limit = this.maxBlocksPerRequest;
    if (blocksNeeded > limit)
      return `the request may need ${numTokens} tokens of KV cache (prompt plus max_tokens), more than the ${limit * this.cacheConfig.blockSize} the cache can hold`;
    return null;
  }

  /*
   * schedule(): one step of vLLM v1's single-token-budget loop (full statement and the
   * no-deadlock argument: src/core/README.md).
   * 1. Running requests, oldest first, get min(rest, budget) tokens (rest capped at
   *    longPrefillTokenThreshold when set); when blocks run out, the pressure handler may free
   *    some, else the newest running request is preempted (possibly the request itself).
   * 2. If nothing was preempted: waiting requests, FCFS, with prefix-cache hits, within
   *    maxNumSeqs and the budget (whole prompts only without chunked prefill).
   * 3. Emit the output, let extensions attach data, then advance numComputedTokens.
   */
  schedule(): SchedulerOutput {
    const st = newStepState(this.schedulerConfig.maxNumBatchedTokens);
    this.scheduleRunning(st);
    if (st.preempted.length === 0) this.scheduleWaiting(st);
    const output = buildSchedulerOutput(st, this.kvCacheManager, this.finishedReqIds);
    this.finishedReqIds = new Set();
    for (const ext of this.extensions) ext.onScheduled?.(output, this);
    for (const [reqId, n] of st.numScheduledTokens) this.requests.get(reqId)!.numComputedTokens += n;
    return output;
  }

  private scheduleRunning(st: StepState): void {
    let i = 0;
    while (i < this.running.length && st.tokenBudget > 0) {
      const request = this.running[i]!;
      const numRest = this.capLongPrefill(request.numTokens - request.numComputedTokens);
      const numNewTokens = Math.min(numRest, st.tokenBudget);
      if (numNewTokens <= 0) {
        // Nothing to compute (its last token was not returned yet); it keeps its place.
        i++;
        continue;
      }
      const newBlockIds = this.allocateForRunning(request, numNewTokens, st);
      // It preempted itself, after every request behind it: nothing more runs this step.
      if (newBlockIds === null) break;
      st.scheduledRunning.push(request);
      st.newBlockIds.set(request.requestId, newBlockIds);
      this.addScheduled(st, request, numNewTokens);
      i++;
    }
  }

  /** allocateSlots, else pressure handler, else preempt the newest running request; repeat. */
  private allocateForRunning(request: Request, numNewTokens: number, st: StepState): BlockId[] | null {
    for (;;) {
      const ids = this.kvCacheManager.allocateSlots(request, numNewTokens);
      if (ids !== null) return ids;
      if (this.relievePressure("running", request, numNewTokens, [], st)) continue;
      const victim = this.running.pop()!;
      this.preempt(victim);
      st.preempted.push(victim);
      if (victim === request) return null;
    }
  }

  private scheduleWaiting(st: StepState): void {
    const { maxNumSeqs } = this.schedulerConfig;
    while (this.waiting.length > 0 && st.tokenBudget > 0) {
      if (this.running.length >= maxNumSeqs) break;
      const request = this.waiting.peek()!;
      const admitted = this.allocateForWaiting(request, st);
      // FCFS: when the head cannot start now, nothing behind it starts either.
      if (admitted === null) break;
      this.waiting.popFront();
      // Appending keeps `running` in arrival order: FCFS admission (preempted requests return
      // to the front) and newest-first preemption mean an admitted request is the newest.
      this.running.push(request);
      if (request.status === RequestStatus.PREEMPTED) st.scheduledResumed.push(request);
      else st.scheduledNew.push(request);
      request.status = RequestStatus.RUNNING;
      request.numComputedTokens = admitted.numComputedTokens;
      if (!this.numCachedTokens.has(request.requestId))
        this.numCachedTokens.set(request.requestId, {
          numCachedTokens: admitted.numComputedTokens,
          numHostCachedTokens: admitted.numHostCachedTokens,
        });
      if (this.kvCacheManager.enableCaching) {
        this.prefixCacheQueries += request.numTokens;
        this.prefixCacheHits += admitted.numComputedTokens;
      }
      this.addScheduled(st, request, admitted.numNewTokens);
    }
  }

  /**
   * Plans and allocates a waiting request's first chunk: prefix-cache hits, then
   * min(rest, budget) tokens (the whole rest without chunked prefill; rest capped at
   * longPrefillTokenThreshold when set). Waiting requests have
   * numComputedTokens 0 (new, or reset by preemption).
   * @returns hits (tokens, and those of host-only pages) and chunk size, or null when it must keep waiting (the pressure
   *   handler does not admit its prefill yet, it does not fit the budget unchunked, or the pool cannot take it even after
   *   the pressure handler).
   */
  private allocateForWaiting(
    request: Request,
    st: StepState,
  ): { numComputedTokens: number; numHostCachedTokens: number; numNewTokens: number } | null {
    if (this.kvPressureHandler?.admitsPrefill?.(request, this) === false) return null;
    for (;;) {
      // Looked up again after each relief, in case the handler touched the prefix cache.
      const hits = this.kvCacheManager.getComputedBlocks(request);
      const numRest = this.capLongPrefill(request.numTokens - hits.numComputedTokens);
      if (!this.schedulerConfig.enableChunkedPrefill && numRest > st.tokenBudget) return null;
      const numNewTokens = Math.min(numRest, st.tokenBudget);
      if (this.kvCacheManager.allocateSlots(request, numNewTokens, hits.blocks) !== null) {
        const numHostCachedTokens = this.kvCacheManager.numHostHitTokensOf(hits.blocks);
        return { numComputedTokens: hits.numComputedTokens, numHostCachedTokens, numNewTokens };
      }
      if (!this.relievePressure("waiting", request, numNewTokens, hits.blocks, st)) return null;
    }
  }

  /** The rest a request may compute this step before the budget ({@link capLongPrefill}). */
  private capLongPrefill(numNewTokens: number): number {
    return capLongPrefill(numNewTokens, this.schedulerConfig.longPrefillTokenThreshold);
  }

  private addScheduled(st: StepState, request: Request, numNewTokens: number): void {
    st.numScheduledTokens.set(request.requestId, numNewTokens);
    st.tokenBudget -= numNewTokens;
  }

  /** Asks the pressure handler for room ({@link relieveKVPressure}). */
  private relievePressure(...step: PressureStepArgs): boolean {
    return relieveKVPressure(this.kvPressureHandler, this.kvCacheManager, this, ...step);
  }

  /** Recompute preemption: blocks freed, progress reset, front of the waiting queue. */
  private preempt(request: Request): void {
    this.releaseBlocks(request, "preempted");
    request.status = RequestStatus.PREEMPTED;
    request.numComputedTokens = 0;
    request.numPreemptions++;
    this.numPreemptions++;
    this.waiting.prepend(request);
  }

  private releaseBlocks(request: Request, reason: FreeReason): void {
    for (const ext of this.extensions) ext.onRequestFreed?.(request, reason, this);
    this.kvCacheManager.free(request);
  }

  /**
   * Applies one step's results: appends each request's sampled tokens, stops finished ones
   * (freeing their blocks; their ids go out in the next output's finishedReqIds) and returns
   * one output per request that got tokens or finished, plus those rejected at admission.
   * Requests finished since `schedule()` (aborts) are skipped. A request in the middle of its
   * prefill gets no token.
   * @throws Error when the worker returned tokens for a request whose prefill is incomplete.
   */
  updateFromOutput(
    schedulerOutput: SchedulerOutput,
    modelRunnerOutput: ModelRunnerOutput,
  ): EngineCoreOutput[] {
    const outputs = this.pendingOutputs;
    this.pendingOutputs = [];
    for (const ext of this.extensions) ext.onModelRunnerOutput?.(modelRunnerOutput, this);
    const indexOf = new Map<RequestId, number>();
    for (const [i, id] of modelRunnerOutput.reqIds.entries()) indexOf.set(id, i);
    const stopped = new Set<Request>();
    for (const reqId of schedulerOutput.numScheduledTokens.keys()) {
      const request = this.requests.get(reqId);
      if (request === undefined || request.status !== RequestStatus.RUNNING) continue;
      const idx = indexOf.get(reqId);
      const sampled = idx === undefined ? [] : (modelRunnerOutput.sampledTokenIds[idx] ?? []);
      if (sampled.length === 0) continue;
      if (request.numComputedTokens < request.numTokens)
        throw new Error(`the worker returned a token for request ${reqId} before its prefill completed`);
      const newTokenIds = appendOutputTokens(request, sampled, this.schedulerConfig.maxModelLen);
      const logprobs = idx === undefined ? null : (modelRunnerOutput.logprobs[idx] ?? null);
      const cached = this.numCachedTokens.get(reqId);
      outputs.push(
        makeEngineCoreOutput(request, newTokenIds, logprobs?.slice(0, newTokenIds.length) ?? null, cached),
      );
      if (request.isFinished) {
        stopped.add(request);
        this.releaseFinished(request);
      }
    }
    if (stopped.size > 0) this.running = this.running.filter((r) => !stopped.has(r));
    return outputs;
  }

  /**
   * Finishes live requests from outside (aborts; stop strings found by the output processor):
   * removes them from their queue and frees their blocks. Unknown or finished ids are ignored.
   * No EngineCoreOutput is produced (the caller already knows); their ids go out in the next
   * output's finishedReqIds.
   * @throws Error when `status` is not a finished status.
   */
  finishRequests(reqIds: RequestId | Iterable<RequestId>, status: RequestStatus): void {
    if (!isFinished(status)) throw new Error(`finishRequests needs a finished status, got ${status}`);
    const ids = typeof reqIds === "string" ? [reqIds] : reqIds;
    const toRemove = new Set<Request>();
    for (const reqId of ids) {
      const request = this.requests.get(reqId);
      if (request === undefined) continue;
      if (request.status === RequestStatus.RUNNING) toRemove.add(request);
      else this.waiting.remove(request);
      request.status = status;
      this.releaseFinished(request);
    }
    if (toRemove.size > 0) this.running = this.running.filter((r) => !toRemove.has(r));
  }

  /** Frees a finished request's blocks and forgets it (it stays out of `running` by the caller). */
  private releaseFinished(request: Request): void {
    const reqId = request.requestId;
    this.releaseBlocks(request, "finished");
    this.kvCacheManager.freeBlockHashes(reqId);
    this.requests.delete(reqId);
    this.numCachedTokens.delete(reqId);
    this.finishedReqIds.add(reqId);
  }

  /**
   * True while a request is waiting or running, or an admission rejection is still to be
   * reported by `updateFromOutput()` (so the engine keeps stepping until every request got
   * its final output).
   */
  hasUnfinishedRequests(): boolean {
    return this.running.length > 0 || this.waiting.length > 0 || this.pendingOutputs.length > 0;
  }

  /** True when finished ids still have to reach the worker through a `schedule()`. */
  hasFinishedRequests(): boolean {
    return this.finishedReqIds.size > 0;
  }

  /** Gauges and counters for metrics. */
  makeStats(): SchedulerStats {
    return {
      numRunningReqs: this.running.length,
      numWaitingReqs: this.waiting.length,
      kvCacheUsage: this.kvCacheManager.usage,
      prefixCacheQueries: this.prefixCacheQueries,
      prefixCacheHits: this.prefixCacheHits,
      prefixCacheHostHits: this.kvCacheManager.numHostHitTokens,
      numPreemptions: this.numPreemptions,
    };
  }
}
