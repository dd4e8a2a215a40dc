/**
 * OpenAI request fields -> engine SamplingParams, with vLLM's context-length rules
 * (vllm/entrypoints/openai/serving_engine.py `_validate_input`, protocol.py
 * `to_sampling_params`).
 */
import { makeSamplingParams, type SamplingParams, validateSamplingParams } from "../core/sampling_params.js";
import type { PromptTooLongError } from "../tokenizer/errors.js";
import { badRequest, type OpenAIError } from "./errors.js";

/** The sampling fields both request kinds share (already type-checked by zod). */
export interface SamplingFields {
  n?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null; continuous_usage_stats?: boolean | null } | null;
  stop?: string | string[] | null;
  stop_token_ids?: number[] | null;
  seed?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  repetition_penalty?: number | null;
  min_tokens?: number | null;
  ignore_eos?: boolean | null;
  skip_special_tokens?: boolean | null;
}

/** Which part of the request holds the prompt, for vLLM's context-length message. */
export type PromptKind = "messages" | "prompt";

/**
 * The output budget of one prompt: the requested max_tokens, or all of the context that the
 * prompt leaves (vLLM's default_max_tokens = max_model_len - prompt_len).
 * @param requested max_tokens (or max_completion_tokens) from the request; null/undefined = default
 * @param param name of the field, for messages ("max_tokens" / "max_completion_tokens")
 * @returns max tokens to generate, >= 1
 * @throws OpenAIError 400 when the prompt fills the context, max_tokens < 1, or
 *   prompt + max_tokens > max_model_len (vLLM's message).
 */
export function resolveMaxTokens(
  requested: number | null | undefined,
  promptLen: number,
  maxModelLen: number,
  kind: PromptKind,
  param = "max_tokens",
): number {
  if (requested !== null && requested !== undefined && requested < 1) {
    throw badRequest(`${param} must be at least 1, got ${requested}.`, param);
  }
  if (promptLen >= maxModelLen) {
    throw badRequest(
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${promptLen} tokens in the ${kind}. Please reduce the length of the ${kind}.`,
      kind,
    );
  }
  const maxTokens = requested ?? maxModelLen - promptLen;
  if (promptLen + maxTokens > maxModelLen) {
    throw badRequest(
      `This model's maximum context length is ${maxModelLen} tokens. However, you requested ${promptLen + maxTokens} tokens (${promptLen} in the ${kind}, ${maxTokens} in the completion). Please reduce the length of the ${kind} or completion.`,
      param,
    );
  }
  return maxTokens;
}

/**
 * vLLM's context-length 400 for a prompt the tokenizer pool refused: with its exact length
 * (as {@link resolveMaxTokens} words it), or, when the length bound refused it untokenized,
 * with its byte length and the fewest tokens it can have.
 */
export function promptTooLong(e: PromptTooLongError, maxModelLen: number, kind: PromptKind): OpenAIError {
  const what = kind === "messages" ? "your messages render to" : "your prompt is";
  const detail = e.exact
    ? `you requested ${e.numTokens} tokens in the ${kind}`
    : `${what} ${e.numBytes} bytes, which is at least ${e.numTokens} tokens for this model's tokenizer`;
  return badRequest(
    `This model's maximum context length is ${maxModelLen} tokens. However, ${detail}. Please reduce the length of the ${kind}.`,
    kind,
  );
}

/**
 * Checks the fields that do not depend on the prompt: stream_options needs stream, and the
 * child seeds seed..seed+n-1 must be safe integers.
 * @throws OpenAIError 400 naming the field.
 */
export function checkRequestFields(r: SamplingFields): void {
  if (r.stream_options != null && r.stream !== true) {
    throw badRequest("stream_options can only be given when stream is true", "stream_options");
  }
  const n = r.n ?? 1;
  if (r.seed != null && !Number.isSafeInteger(r.seed + (n - 1))) {
    throw badRequest(`seed must leave room for seed + n - 1 within the safe integer range`, "seed");
  }
}

/**
 * Builds the SamplingParams of one engine request (one choice of one prompt).
 * Seeds: when `seed` is given, the choice with index i within its prompt uses seed + i (as vLLM's
 * ParentRequest does for n > 1), so n > 1 with a seed gives n different, reproducible samples.
 * @param maxTokens resolved by {@link resolveMaxTokens}
 * @param logprobs top log-probabilities per token, or null for none
 * @param choiceIndex index of this choice within its prompt (0..n-1)
 * @throws OpenAIError 400 when a value is out of range (validateSamplingParams' reasons;
 *   `param` is the field named first in the reason).
 */
export function toSamplingParams(
  r: SamplingFields,
  maxTokens: number,
  logprobs: number | null,
  choiceIndex: number,
): SamplingParams {
  const stop = r.stop == null ? [] : typeof r.stop === "string" ? [r.stop] : r.stop;
  const p = makeSamplingParams({
    maxTokens,
    minTokens: r.min_tokens ?? 0,
    temperature: r.temperature ?? 1.0,
    topP: r.top_p ?? 1.0,
    topK: r.top_k ?? 0,
    minP: r.min_p ?? 0,
    seed: r.seed == null ? null : r.seed + choiceIndex,
    stop: [...stop],
    stopTokenIds: [...(r.stop_token_ids ?? [])],
    ignoreEos: r.ignore_eos ?? false,
    repetitionPenalty: r.repetition_penalty ?? 1.0,
    presencePenalty: r.presence_penalty ?? 0,
    frequencyPenalty: r.frequency_penalty ?? 0,
    logprobs,
    skipSpecialTokens: r.skip_special_tokens ?? true,
  });
  const reasons = validateSamplingParams(p);
  if (reasons.length > 0) {
    const first = reasons[0]!;
    throw badRequest(first, first.split(" ")[0] ?? null);
  }
  return p;
}
