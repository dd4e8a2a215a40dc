import type { RequestId } from "./ids.js";
import type { SamplingParams } from "./sampling_params.js";

/** Life cycle of a request in the scheduler (vllm/v1/request.py RequestStatus). */
export enum RequestStatus {
  WAITING = "waiting",
  RUNNING = "running",
  PREEMPTED = "preempted",
  FINISHED_STOPPED = "finished_stopped",
  FINISHED_LENGTH_CAPPED = "finished_length_capped",
  FINISHED_ABORTED = "finished_aborted",
  /** Rejected at admission (e.g. can never fit in the KV cache). */
  FINISHED_IGNORED = "finished_ignored",
}

/** OpenAI finish reasons reported for finished requests. */
export type FinishReason = "stop" | "length" | "abort";

export function isFinished(status: RequestStatus): boolean {
  return (
    status === RequestStatus.FINISHED_STOPPED ||
    status === RequestStatus.FINISHED_LENGTH_CAPPED ||
    status === RequestStatus.FINISHED_ABORTED ||
    status === RequestStatus.FINISHED_IGNORED
  );
}

export function finishReasonOf(status: RequestStatus): FinishReason | null {
  switch (status) {
    case RequestStatus.FINISHED_STOPPED:
      return "stop";
    case RequestStatus.FINISHED_LENGTH_CAPPED:
    case RequestStatus.FINISHED_IGNORED:
      return "length";
    case RequestStatus.FINISHED_ABORTED:
      return "abort";
    default:
      return null;
  }
}

/**
 * A request as the scheduler sees it (vllm/v1/request.py): its tokens, how many of them have KV
 * in the cache (`numComputedTokens`, which catches up with `numTokens`), and its status. Pure
 * data plus bookkeeping; no tensors.
 */
export class Request {
  readonly requestId: RequestId;
  readonly promptTokenIds: readonly number[];
  readonly samplingParams: SamplingParams;
  /** EOS token ids of the model (a finish condition unless `ignoreEos`). */
  readonly eosTokenIds: readonly number[];
  /** Arrival time in seconds (performance.now() / 1000 scale); orders the waiting queue. */
  readonly arrivalTime: number;

  status: RequestStatus = RequestStatus.WAITING;
  /** Prompt followed by every generated token. */
  readonly allTokenIds: number[];
  readonly outputTokenIds: number[] = [];
  /** Tokens whose KV has been computed and written to the cache. */
  numComputedTokens = 0;
  /** Number of times this request was preempted (recompute). */
  numPreemptions = 0;
  /** Token id or stop string that ended the request, when one did. */
  stopReason: number | string | null = null;

  constructor(
    requestId: RequestId,
    promptTokenIds: readonly number[],
    samplingParams: SamplingParams,
    eosTokenIds: readonly number[],
    arrivalTime: number,
  ) {
    if (promptTokenIds.length === 0) throw new Error("prompt must contain at least one token");
    this.requestId = requestId;
    this.promptTokenIds = promptTokenIds;
    this.samplingParams = samplingParams;
    this.eosTokenIds = eosTokenIds;
    this.arrivalTime = arrivalTime;
    this.allTokenIds = [...promptTokenIds];
  }

  get numPromptTokens(): number {
    return this.promptTokenIds.length;
  }
  get numTokens(): number {
    return this.allTokenIds.length;
  }
  get numOutputTokens(): number {
    return this.outputTokenIds.length;
  }
  get isFinished(): boolean {
    return isFinished(this.status);
  }

  /** Appends generated tokens (the scheduler does this after each model step). */
  appendOutputTokenIds(tokenIds: readonly number[]): void {
    for (const t of tokenIds) {
      this.outputTokenIds.push(t);
      this.allTokenIds.push(t);
    }
  }
}
