import type { SamplingParams } from "../core/sampling_params.js";
import type { EngineCoreOutput, TokenLogprobs } from "../core/sched/output.js";
import { IncrementalDetokenizer } from "../tokenizer/detokenizer.js";
import { StopStringChecker } from "../tokenizer/stop_strings.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import type { RequestOutput, RequestOutputKind } from "./outputs.js";

/** Per-request state of the output processor (vllm/v1/engine/output_processor.py RequestState). */
interface RequestState {
  requestId: string;
  prompt: string | null;
  promptTokenIds: number[];
  params: SamplingParams;
  kind: RequestOutputKind;
  detok: IncrementalDetokenizer | null;
  stops: StopStringChecker | null;
  tokenIds: number[];
  text: string;
  logprobs: TokenLogprobs[] | null;
  cumulativeLogprob: number | null;
  /** Lengths already sent, for "delta" outputs. */
  sentTokens: number;
  sentText: number;
  sentLogprobs: number;
  arrivalTime: number;
  firstScheduledTime: number | null;
  firstTokenTime: number | null;
  lastTokenTime: number | null;
}

/** A request the processor found a stop string in: the engine must finish it in the scheduler. */
export interface StopStringHit {
  requestId: string;
  stop: string;
}

/**
 * Turns EngineCoreOutputs (token ids) into RequestOutputs (text): incremental detokenization,
 * stop strings (held back while they may still match), logprobs, delta/cumulative modes, and
 * per-request timing. Runs on the engine's thread, next to the HTTP layer.
 */
export class OutputProcessor {
  private readonly states = new Map<string, RequestState>();

  constructor(private readonly tokenizer: Tokenizer | null) {}

  get numRequests(): number {
    return this.states.size;
  }

  addRequest(
    requestId: string,
    prompt: string | null,
    promptTokenIds: number[],
    params: SamplingParams,
    kind: RequestOutputKind,
    arrivalTime: number,
  ): void {
    const tok = this.tokenizer;
    this.states.set(requestId, {
      requestId,
      prompt,
      promptTokenIds,
      params,
      kind,
      detok:
        tok === null
          ? null
          : new IncrementalDetokenizer(tok, { promptTokenIds, skipSpecialTokens: params.skipSpecialTokens }),
      stops: tok === null || params.stop.length === 0 ? null : new StopStringChecker(params.stop),
      tokenIds: [],
      text: "",
      logprobs: params.logprobs === null ? null : [],
      cumulativeLogprob: params.logprobs === null ? null : 0,
      sentTokens: 0,
      sentText: 0,
      sentLogprobs: 0,
      arrivalTime,
      firstScheduledTime: null,
      firstTokenTime: null,
      lastTokenTime: null,
    });
  }

  /** Drops a request (aborted before any output). */
  removeRequest(requestId: string): void {
    this.states.delete(requestId);
  }

  /** Marks the first time a request was scheduled. */
  markScheduled(requestId: string, now: number): void {
    const s = this.states.get(requestId);
    if (s !== undefined && s.firstScheduledTime === null) s.firstScheduledTime = now;
  }

  /**
   * Processes one step's outputs.
   * @returns the RequestOutputs to deliver, and the requests in which a stop string matched
   *   (the engine finishes those in the scheduler; their outputs here are already final).
   */
  process(
    outputs: EngineCoreOutput[],
    now: number,
  ): { requestOutputs: RequestOutput[]; stopHits: StopStringHit[] } {
    const requestOutputs: RequestOutput[] = [];
    const stopHits: StopStringHit[] = [];
    for (const o of outputs) {
      const s = this.states.get(o.reqId);
      if (s === undefined) continue;
      let finishReason = o.finishReason;
      let stopReason = o.stopReason;
      if (o.newTokenIds.length > 0) {
        s.firstTokenTime ??= now;
        s.lastTokenTime = now;
      }
      for (let i = 0; i < o.newTokenIds.length; i++) {
        const id = o.newTokenIds[i]!;
        s.tokenIds.push(id);
        const lp = o.newLogprobs?.[i];
        if (lp !== undefined && s.logprobs !== null) {
          s.logprobs.push(lp);
          s.cumulativeLogprob = (s.cumulativeLogprob ?? 0) + lp.sampledLogprob;
        }
        const hit = this.appendText(s, s.detok?.push(id) ?? "");
        if (hit !== null) {
          finishReason = "stop";
          stopReason = hit;
          stopHits.push({ requestId: s.requestId, stop: hit });
          break;
        }
      }
      const finished = finishReason !== null;
      if (finished && stopHits.at(-1)?.requestId !== s.requestId) {
        // The scheduler already finished it; a stop string in the released text still decides
        // the finish reason, as one found earlier does.
        const hit = this.flushText(s);
        if (hit !== null) {
          finishReason = "stop";
          stopReason = hit;
        }
      }
      const out = this.makeOutput(s, finished, finishReason, stopReason, o, now);
      if (out !== null) requestOutputs.push(out);
      if (finished) this.states.delete(s.requestId);
    }
    return { requestOutputs, stopHits };
  }

  /** Feeds detokenized text through the stop checker; returns the matched stop, if any. */
  private appendText(s: RequestState, delta: string): string | null {
    if (s.stops === null) {
      s.text += delta;
      return null;
    }
    const r = s.stops.push(delta);
    s.text += r.text;
    return r.stop;
  }

  /**
   * At the end of a request: releases text held by the detokenizer and the stop checker.
   * @returns the stop string found in the released text, or null.
   */
  private flushText(s: RequestState): string | null {
    const rest = s.detok?.flush() ?? "";
    const hit = this.appendText(s, rest);
    if (hit !== null) return hit;
    if (s.stops !== null) s.text += s.stops.flush();
    return null;
  }

  private makeOutput(
    s: RequestState,
    finished: boolean,
    finishReason: RequestOutput["outputs"][number]["finishReason"],
    stopReason: number | string | null,
    cached: Pick<EngineCoreOutput, "numCachedTokens" | "numHostCachedTokens">,
    now: number,
  ): RequestOutput | null {
    if (s.kind === "final_only" && !finished) return null;
    const delta = s.kind === "delta";
    const text = delta ? s.text.slice(s.sentText) : s.text;
    const tokenIds = delta ? s.tokenIds.slice(s.sentTokens) : [...s.tokenIds];
    const logprobs = s.logprobs === null ? null : delta ? s.logprobs.slice(s.sentLogprobs) : [...s.logprobs];
    if (delta && !finished && text.length === 0 && tokenIds.length === 0) return null;
    s.sentText = s.text.length;
    s.sentTokens = s.tokenIds.length;
    s.sentLogprobs = s.logprobs?.length ?? 0;
    return {
      requestId: s.requestId,
      prompt: s.prompt,
      promptTokenIds: s.promptTokenIds,
      outputs: [
        {
          index: 0,
          text,
          tokenIds,
          cumulativeLogprob: s.cumulativeLogprob,
          logprobs,
          finishReason,
          stopReason,
        },
      ],
      finished,
      numCachedTokens: cached.numCachedTokens,
      numHostCachedTokens: cached.numHostCachedTokens,
      metrics: {
        arrivalTime: s.arrivalTime,
        firstScheduledTime: s.firstScheduledTime,
        firstTokenTime: s.firstTokenTime,
        lastTokenTime: s.lastTokenTime,
        finishedTime: finished ? now : null,
      },
    };
  }
}
