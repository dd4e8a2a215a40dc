import type { FastifyReply } from "fastify";
import type { FinishReason } from "../core/request.js";
import type { CompletionOutput, RequestOutput } from "../engine/outputs.js";
import type { ServingContext } from "./context.js";
import { OpenAIError, toOpenAIError } from "./errors.js";
import type { TokenText } from "./logprobs.js";
import type { GroupOutput, RequestGroup } from "./request_group.js";
import { onClientGone, SseWriter } from "./sse.js";

/** OpenAI `usage`. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** Builds a {@link Usage}. */
export function usage(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
}

/** Accumulated state of one choice (one engine request). */
export interface ChoiceState {
  index: number;
  /** Prompt tokens of this choice's prompt. */
  numPromptTokens: number;
  text: string;
  numTokens: number;
  finishReason: FinishReason | null;
  /** The stop string or token id that ended the choice (vLLM's `stop_reason`). */
  stopReason: number | string | null;
}

/** A fresh {@link ChoiceState}. */
export function newChoice(index: number, numPromptTokens: number): ChoiceState {
  return { index, numPromptTokens, text: "", numTokens: 0, finishReason: null, stopReason: null };
}

/**
 * Adds one "delta" output to its choice: its text and token count, and the finish and stop
 * reasons once the output is the last.
 * @returns the output's completion (`outputs[0]`).
 */
export function accumulateChoice(c: ChoiceState, output: RequestOutput): CompletionOutput {
  const o = output.outputs[0]!;
  c.text += o.text;
  c.numTokens += o.tokenIds.length;
  if (output.finished) {
    c.finishReason = o.finishReason;
    c.stopReason = o.stopReason;
  }
  return o;
}

/**
 * One stream chunk for one choice: `header`, then the choice with `fields` (text or delta, and
 * logprobs), its finish and stop reasons (null until it finished), and the choice's running
 * usage when `continuousUsage` (vLLM's stream_options.continuous_usage_stats).
 */
export function choiceChunk(
  header: Record<string, unknown>,
  c: ChoiceState,
  finished: boolean,
  fields: Record<string, unknown>,
  continuousUsage: boolean,
): Record<string, unknown> {
  const chunk: Record<string, unknown> = {
    ...header,
    choices: [
      {
        index: c.index,
        ...fields,
        finish_reason: finished ? c.finishReason : null,
        stop_reason: finished ? c.stopReason : null,
      },
    ],
  };
  if (continuousUsage) chunk.usage = usage(c.numPromptTokens, c.numTokens);
  return chunk;
}

/**
 * How a route turns engine outputs into replies: accumulates each output into its choice and
 * returns the SSE chunks to send for it (ignored when not streaming).
 */
export interface ReplyFormat {
  /** Chunks sent first in a stream (chat: the assistant role of each choice). */
  startChunks(): unknown[];
  /** Accumulates one output; returns its stream chunks (possibly none). */
  onOutput(o: GroupOutput): unknown[];
  /** The last stream chunk with `choices: []` and the whole usage (include_usage). */
  usageChunk(): unknown;
  /** The non-streamed reply body. */
  body(): unknown;
}

/** The text of a token id for logprobs (`token_id:<id>` without a tokenizer, as vLLM writes it). */
export function tokenTextOf(ctx: ServingContext): TokenText {
  const tok = ctx.llm.engine.tokenizer;
  if (tok === null) return (id) => `token_id:${id}`;
  return (id) => tok.decode([id]);
}

/**
 * Runs a request's preparation (tokenization on the pool, which can take seconds for a long
 * prompt) with a signal that aborts if the client disconnects meanwhile, so a client that left
 * costs no tokenization and no generation.
 * @returns the preparation's value, or null when the client left (nothing is to be sent).
 * @throws whatever `prepare` throws while the client is still there
 */
export async function whileClientWaits<T>(
  reply: FastifyReply,
  prepare: (signal: AbortSignal) => Promise<T>,
): Promise<T | null> {
  const ac = new AbortController();
  const res = reply.raw;
  const onClose = () => {
    if (!res.writableFinished) ac.abort();
  };
  res.once("close", onClose);
  try {
    const value = await prepare(ac.signal);
    return ac.signal.aborted || res.destroyed ? null : value;
  } catch (e) {
    if (ac.signal.aborted || res.destroyed) return null;
    throw e;
  } finally {
    res.off("close", onClose);
  }
}

/** Message of the error event sent when a stream ends because the server aborted it. */
const ABORTED_MESSAGE = "the request was aborted because the server is shutting down";

/**
 * Runs a submitted group to its end and replies: one JSON body, or an SSE stream
 * (`data: {...}` chunks, an optional usage chunk, `data: [DONE]`). A client that disconnects
 * (either mode) aborts the group, so its KV blocks are freed in the engine's next step; nothing
 * is sent to it then. An engine failure mid-stream becomes an error event before [DONE].
 * @throws OpenAIError (non-streamed only) when the engine failed or the server aborted the group.
 */
export async function sendReply(
  ctx: ServingContext,
  reply: FastifyReply,
  group: RequestGroup,
  format: ReplyFormat,
  opts: { stream: boolean; includeUsage: boolean },
): Promise<FastifyReply> {
  const gone = onClientGone(reply.raw, () => group.abort());
  try {
    if (!opts.stream) {
      for await (const o of group.outputs()) format.onOutput(o);
      if (gone()) return reply.hijack();
      if (!group.finished) throw new OpenAIError(503, ABORTED_MESSAGE);
      return reply.send(format.body());
    }
    reply.hijack();
    const sse = new SseWriter(reply.raw);
    sse.open();
    for (const c of format.startChunks()) sse.send(c);
    try {
      for await (const o of group.outputs()) for (const c of format.onOutput(o)) sse.send(c);
      if (!group.finished) {
        if (!gone()) sse.send(new OpenAIError(503, ABORTED_MESSAGE).toBody());
      } else if (opts.includeUsage) sse.send(format.usageChunk());
    } catch (e) {
      sse.send(toOpenAIError(e).toBody());
    }
    sse.done();
    return reply;
  } finally {
    ctx.release(group);
  }
}
