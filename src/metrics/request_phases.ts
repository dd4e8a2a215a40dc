import type { RequestMetrics } from "../engine/outputs.js";

/**
 * The phases of one request, in seconds, as vLLM v1 splits them
 * (vllm/v1/metrics/stats.py IterationStats.update_from_finished_request), from the engine's
 * timestamps ({@link RequestMetrics}: `arrivalTime` when the engine queued it, `firstScheduledTime`
 * right after the `schedule()` that first gave it tokens, `firstTokenTime` / `lastTokenTime` when
 * the step outputs carrying its first / last token were processed):
 * - queued: first scheduled − arrival (vLLM: scheduled_ts − queued_ts). The time spent waiting,
 *   for the running step to end and then for room in a step (budget, `--max-num-seqs`, KV blocks).
 * - prefill: first token − first scheduled. Every step of its (chunked) prompt, including steps
 *   it shared with other requests' prefill chunks and any preemption in between.
 * - decode: last token − first token.
 * - inference: last token − first scheduled (= prefill + decode; vLLM measures it to the last
 *   token too, not to the finish event).
 * TTFT (first token − arrival) is queued + prefill, exactly.
 */
export interface RequestPhaseTimes {
  queued: number;
  /** Null when no token came (e.g. finished by an abort before its first token). */
  prefill: number | null;
  decode: number | null;
  inference: number | null;
}

/**
 * Splits a request's timestamps into its phases; the one place the intervals are computed.
 * @returns null when the request was never scheduled (its queue time is not known)
 */
export function requestPhaseTimes(m: RequestMetrics): RequestPhaseTimes | null {
  if (m.firstScheduledTime === null) return null;
  const queued = m.firstScheduledTime - m.arrivalTime;
  if (m.firstTokenTime === null || m.lastTokenTime === null)
    return { queued, prefill: null, decode: null, inference: null };
  return {
    queued,
    prefill: m.firstTokenTime - m.firstScheduledTime,
    decode: m.lastTokenTime - m.firstTokenTime,
    inference: m.lastTokenTime - m.firstScheduledTime,
  };
}
