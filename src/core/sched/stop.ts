import { type Request, RequestStatus } from "../request.js";

/**
 * Decides whether `request` is finished after its last output token was appended (vLLM
 * vllm/v1/core/sched/utils.py check_stop), and if so sets its status and stop reason:
 * 1. EOS (one of `request.eosTokenIds`, unless `ignoreEos`) -> FINISHED_STOPPED, stopReason null;
 * 2. a token of `stopTokenIds` -> FINISHED_STOPPED, stopReason = that token id;
 *    (1 and 2 only once `minTokens` output tokens exist, as vLLM's min_tokens masks them);
 * 3. `maxTokens` output tokens, or `numTokens >= maxModelLen` -> FINISHED_LENGTH_CAPPED.
 * A stop token on the last allowed position reports "stop", as in vLLM.
 * @param maxModelLen longest prompt + output, in tokens.
 * @returns true when the request is finished.
 */
export function checkStop(request: Request, maxModelLen: number): boolean {
  const sp = request.samplingParams;
  const last = request.outputTokenIds[request.outputTokenIds.length - 1];
  if (last !== undefined && request.numOutputTokens >= sp.minTokens) {
    if (!sp.ignoreEos && request.eosTokenIds.includes(last)) {
      request.status = RequestStatus.FINISHED_STOPPED;
      request.stopReason = null;
      return true;
    }
    if (sp.stopTokenIds.includes(last)) {
      request.status = RequestStatus.FINISHED_STOPPED;
      request.stopReason = last;
      return true;
    }
  }
  if (request.numOutputTokens >= sp.maxTokens || request.numTokens >= maxModelLen) {
    request.status = RequestStatus.FINISHED_LENGTH_CAPPED;
    return true;
  }
  return false;
}

/**
 * Appends sampled tokens to the request one at a time, checking {@link checkStop} after each;
 * tokens after the one that finishes it are dropped (vLLM _update_request_with_output).
 * @returns the tokens actually appended.
 */
export function appendOutputTokens(
  request: Request,
  sampled: readonly number[],
  maxModelLen: number,
): number[] {
  const appended: number[] = [];
  for (const t of sampled) {
    request.appendOutputTokenIds([t]);
    appended.push(t);
    if (checkStop(request, maxModelLen)) break;
  }
  return appended;
}
