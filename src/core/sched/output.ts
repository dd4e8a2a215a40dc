import type { ExtensionData } from "../extension_data.js";
import type { BlockId, RequestId } from "../ids.js";
import type { FinishReason } from "../request.js";
import type { SamplingParams } from "../sampling_params.js";

/**
 * A request scheduled for the first time: sent to the worker in full
 * (vllm/v1/core/sched/output.py NewRequestData).
 */
export interface NewRequestData {
  reqId: RequestId;
  promptTokenIds: readonly number[];
  samplingParams: SamplingParams;
  /** Device blocks holding this request's KV, in token order. */
  blockIds: BlockId[];
  /** Tokens already in the cache before this step (prefix-cache hits). */
  numComputedTokens: number;
}

/**
 * Requests the worker already knows, as deltas (vllm CachedRequestData). Parallel arrays indexed
 * like `reqIds`. A request resumed from preemption gets its whole block list in `newBlockIds`
 * (replacing the old one) and `resumedFromPreemption` true; the worker keeps its token history.
 */
export interface CachedRequestData {
  reqIds: RequestId[];
  resumedFromPreemption: boolean[];
  /** Blocks appended this step (or the full list when resumed); empty when none. */
  newBlockIds: BlockId[][];
  /** numComputedTokens of each request at the start of this step. */
  numComputedTokens: number[];
}

/**
 * The plain description of one step that the scheduler hands to the worker
 * (vllm/v1/core/sched/output.py SchedulerOutput). Ints and id lists only.
 */
export interface SchedulerOutput {
  scheduledNewReqs: NewRequestData[];
  scheduledCachedReqs: CachedRequestData;
  /** Tokens to compute this step per request (prefill chunk length, or 1 for decode). */
  numScheduledTokens: Map<RequestId, number>;
  totalNumScheduledTokens: number;
  /** Requests preempted this step (their blocks are freed; the worker drops them from the batch). */
  preemptedReqIds: Set<RequestId>;
  /** Requests finished since the last step: the worker frees their state. */
  finishedReqIds: Set<RequestId>;
  /**
   * Extra per-step work of optional features (HiSparse: page-table deltas, mirrors), one typed
   * entry per feature (SchedulerExtension.onScheduled writes it).
   */
  extensions: ExtensionData;
}

/** Top log-probabilities of one sampled token. */
export interface TokenLogprobs {
  /** Log-probability of the sampled token under the raw logits (before penalties and temperature), as vLLM returns it. */
  sampledLogprob: number;
  /** 1-based rank of the sampled token among all tokens. */
  sampledRank: number;
  /** Top token ids, most likely first, and their log-probabilities. */
  topTokenIds: number[];
  topLogprobs: number[];
}

/**
 * What the worker returns for one step (vllm/v1/outputs.py ModelRunnerOutput). Parallel arrays
 * indexed like `reqIds`; a request in the middle of a chunked prefill gets no token.
 */
export interface ModelRunnerOutput {
  reqIds: RequestId[];
  /** Tokens sampled for each request this step (empty while its prefill is incomplete). */
  sampledTokenIds: number[][];
  /** Log-probabilities of each sampled token when the request asked for them. */
  logprobs: (TokenLogprobs[] | null)[];
  /** Extra per-step results of optional features (HiSparse counters), one typed entry per feature. */
  extensions: ExtensionData;
}

/** One request's progress after a step (vllm EngineCoreOutput). */
export interface EngineCoreOutput {
  reqId: RequestId;
  newTokenIds: number[];
  newLogprobs: TokenLogprobs[] | null;
  finishReason: FinishReason | null;
  stopReason: number | string | null;
  numPromptTokens: number;
  numOutputTokens: number;
  /** Number of prompt tokens served from the prefix cache (for usage.prompt_tokens_details). */
  numCachedTokens: number;
  /**
   * Of those, tokens whose pages were only in a slower tier than the device pool (HiSparse's host
   * tier: loaded back for the prefill); 0 without HiSparse.
   */
  numHostCachedTokens: number;
}
