import type { FinishReason } from "../core/request.js";
import type { TokenLogprobs } from "../core/sched/output.js";

/**
 * How much of a request's output each RequestOutput carries (vllm/sampling_params.py
 * RequestOutputKind): the whole output so far, only what is new since the last output
 * (streaming), or one output when the request finishes.
 */
export type RequestOutputKind = "cumulative" | "delta" | "final_only";

/** One completion of a request (vllm/outputs.py CompletionOutput). */
export interface CompletionOutput {
  index: number;
  /** Generated text (all of it, or the new part in "delta" mode). */
  text: string;
  tokenIds: number[];
  /** Sum of the sampled tokens' logprobs (when logprobs were asked for). */
  cumulativeLogprob: number | null;
  logprobs: TokenLogprobs[] | null;
  finishReason: FinishReason | null;
  /** The stop string or stop token id that ended generation, if any. */
  stopReason: number | string | null;
}

/** Timing of a request in seconds (performance.now() / 1000 scale). */
export interface RequestMetrics {
  arrivalTime: number;
  /** When the request was first scheduled. */
  firstScheduledTime: number | null;
  firstTokenTime: number | null;
  lastTokenTime: number | null;
  finishedTime: number | null;
}

/** The state of one request after an engine step (vllm/outputs.py RequestOutput). */
export interface RequestOutput {
  requestId: string;
  prompt: string | null;
  promptTokenIds: number[];
  outputs: CompletionOutput[];
  finished: boolean;
  /** Prompt tokens whose KV came from the prefix cache. */
  numCachedTokens: number;
  /** Of those, tokens whose pages were only in HiSparse's host tier (loaded back); 0 without HiSparse. */
  numHostCachedTokens: number;
  metrics: RequestMetrics;
}
