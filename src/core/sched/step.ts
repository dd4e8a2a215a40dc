import { LONG_PREFILL_THRESHOLD_OFF } from "../../config/configs.js";
import { newExtensionData } from "../extension_data.js";
import type { BlockId, RequestId } from "../ids.js";
import type { KVCacheManager } from "../kv/kv_cache_manager.js";
import { finishReasonOf, type Request } from "../request.js";
import type { CachedRequestData, EngineCoreOutput, SchedulerOutput } from "./output.js";

/** Work decided so far in one `Scheduler.schedule()` call. */
export interface StepState {
  /** Tokens the step may still schedule. */
  tokenBudget: number;
  numScheduledTokens: Map<RequestId, number>;
  /** Running requests served this step, and the blocks appended for each. */
  scheduledRunning: Request[];
  newBlockIds: Map<RequestId, BlockId[]>;
  /** Waiting requests admitted this step: first-time ones, and ones resumed from preemption. */
  scheduledNew: Request[];
  scheduledResumed: Request[];
  /** Requests preempted this step, in preemption order. */
  preempted: Request[];
}

/** An empty step with the whole token budget (maxNumBatchedTokens). */
export function newStepState(tokenBudget: number): StepState {
  return {
    tokenBudget,
    numScheduledTokens: new Map(),
    scheduledRunning: [],
    newBlockIds: new Map(),
    scheduledNew: [],
    scheduledResumed: [],
    preempted: [],
  };
}

/**
 * vLLM v1's long-prefill cap (vllm/v1/core/sched/scheduler.py schedule(), for running and
 * waiting requests alike: `if 0 < threshold < num_new_tokens: num_new_tokens = threshold`),
 * applied before the step's budget. Decodes (1 token) are never cut.
 * @param numNewTokens tokens the request still has to compute (prompt and outputs, after
 *   prefix-cache hits)
 * @param threshold SchedulerConfig.longPrefillTokenThreshold in tokens; 0 or absent = no cap
 * @returns the tokens it may take this step, before the budget
 */
export function capLongPrefill(numNewTokens: number, threshold = LONG_PREFILL_THRESHOLD_OFF): number {
  return threshold > LONG_PREFILL_THRESHOLD_OFF && threshold < numNewTokens ? threshold : numNewTokens;
}

/**
 * Turns a decided step into the worker's {@link SchedulerOutput}: first-time requests in full;
 * running requests as deltas (blocks appended this step), then resumed ones with their whole
 * block list. Reads `numComputedTokens` as the start-of-step value, so call it before they
 * advance.
 * @param finishedReqIds requests finished since the previous step (moved into the output).
 */
export function buildSchedulerOutput(
  st: StepState,
  kv: KVCacheManager,
  finishedReqIds: Set<RequestId>,
): SchedulerOutput {
  const cached: CachedRequestData = {
    reqIds: [],
    resumedFromPreemption: [],
    newBlockIds: [],
    numComputedTokens: [],
  };
  const pushCached = (r: Request, resumed: boolean, blockIds: BlockId[]) => {
    cached.reqIds.push(r.requestId);
    cached.resumedFromPreemption.push(resumed);
    cached.newBlockIds.push(blockIds);
    cached.numComputedTokens.push(r.numComputedTokens);
  };
  for (const r of st.scheduledRunning) pushCached(r, false, st.newBlockIds.get(r.requestId)!);
  for (const r of st.scheduledResumed) pushCached(r, true, kv.getBlockIds(r.requestId));
  let total = 0;
  for (const n of st.numScheduledTokens.values()) total += n;
  return {
    scheduledNewReqs: st.scheduledNew.map((r) => ({
      reqId: r.requestId,
      promptTokenIds: r.promptTokenIds,
      samplingParams: r.samplingParams,
      blockIds: kv.getBlockIds(r.requestId),
      numComputedTokens: r.numComputedTokens,
    })),
    scheduledCachedReqs: cached,
    numScheduledTokens: st.numScheduledTokens,
    totalNumScheduledTokens: total,
    preemptedReqIds: new Set(st.preempted.map((r) => r.requestId)),
    finishedReqIds,
    extensions: newExtensionData(),
  };
}

/** Prompt tokens a request found in the prefix cache when it was first scheduled. */
export interface PromptCacheHits {
  /** Tokens of the hits, every tier (whole blocks). */
  numCachedTokens: number;
  /** Of those, tokens whose pages were only in the host tier (HiSparse; loaded back for the prefill). */
  numHostCachedTokens: number;
}
const NO_CACHE_HITS: PromptCacheHits = { numCachedTokens: 0, numHostCachedTokens: 0 };

/**
 * One request's progress for the engine (vLLM EngineCoreOutput); the finish reason follows the
 * request's status.
 * @param cached prompt tokens served from the prefix cache at the request's first scheduling
 *   ({@link PromptCacheHits}); none when omitted.
 */
export function makeEngineCoreOutput(
  request: Request,
  newTokenIds: number[],
  newLogprobs: EngineCoreOutput["newLogprobs"],
  cached: PromptCacheHits = NO_CACHE_HITS,
): EngineCoreOutput {
  return {
    reqId: request.requestId,
    newTokenIds,
    newLogprobs,
    finishReason: finishReasonOf(request.status),
    stopReason: request.stopReason,
    numPromptTokens: request.numPromptTokens,
    numOutputTokens: request.numOutputTokens,
    numCachedTokens: cached.numCachedTokens,
    numHostCachedTokens: cached.numHostCachedTokens,
  };
}

/**
 * Most KV tokens a request can ever hold: its whole prompt, plus every output token but the
 * last (the last sampled token's KV is never computed), capped at maxModelLen - 1 for the
 * outputs (the request stops when numTokens reaches maxModelLen).
 * Example: prompt 10, maxTokens 5, maxModelLen 100 -> 14 tokens.
 */
export function maxKvTokens(request: Request, maxModelLen: number): number {
  const numPrompt = request.numPromptTokens;
  return Math.max(numPrompt, Math.min(numPrompt + request.samplingParams.maxTokens, maxModelLen) - 1);
}
