/**
 * Request bodies of the OpenAI routes, parsed with zod at the edge (vllm/entrypoints/openai/
 * protocol.py CompletionRequest, ChatCompletionRequest). Unknown keys are stripped (ignored, as
 * vLLM does); known fields whose semantics this server does not implement are rejected by
 * {@link checkUnsupported} with a 400 naming the field, so a request never silently gets a
 * different meaning.
 */
import { z } from "zod";
import { MAX_LOGPROBS } from "../core/sampling_params.js";
import { badRequest, fromZodError, type OpenAIError } from "./errors.js";

/** Largest `n` (OpenAI's documented limit for chat completions). */
export const MAX_N = 128;

const num = z.number().nullish();
const int = z.int().nullish();
const bool = z.boolean().nullish();

/** Sampling fields shared by both routes (OpenAI names, plus vLLM's extra sampling params). */
const samplingFields = {
  model: z.string().nullish(),
  n: z.int().min(1).max(MAX_N).nullish(),
  stream: bool,
  stream_options: z.object({ include_usage: bool, continuous_usage_stats: bool }).nullish(),
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  stop_token_ids: z.array(z.int().min(0)).nullish(),
  seed: int,
  temperature: num,
  top_p: num,
  top_k: int,
  min_p: num,
  presence_penalty: num,
  frequency_penalty: num,
  repetition_penalty: num,
  min_tokens: int,
  ignore_eos: bool,
  skip_special_tokens: bool,
  max_tokens: int,
};

/**
 * A prompt of /v1/completions: text, token ids, a batch of texts, or a batch of token id lists.
 * The union tries its options in order and a failing option checks every element, so token ids
 * come before texts: a 32K-token id prompt checked against "array of strings" first cost ~50 ms
 * of issues per request before it matched (the other orders fail on few elements: batches are short).
 */
const promptSchema = z.union([
  z.string(),
  z.array(z.int()).min(1),
  z.array(z.string()).min(1),
  z.array(z.array(z.int()).min(1)).min(1),
]);

/** POST /v1/completions body. */
export const completionRequestSchema = z.object({
  ...samplingFields,
  prompt: promptSchema,
  /** 0..20 top log-probabilities per token (OpenAI legacy completions). */
  logprobs: z.int().min(0).max(MAX_LOGPROBS).nullish(),
  best_of: z.int().min(1).nullish(),
  add_special_tokens: bool,
});
/** A parsed /v1/completions body. */
export type CompletionRequest = z.infer<typeof completionRequestSchema>;

/** Roles OpenAI defines for chat messages (legacy "function" is not accepted). */
export const CHAT_ROLES = ["system", "developer", "user", "assistant", "tool"] as const;

const textPart = z.object({
  type: z.literal("text", { error: "only text content parts are supported" }),
  text: z.string(),
});

const chatMessage = z.object({
  role: z.enum(CHAT_ROLES),
  content: z.union([z.string(), z.array(textPart), z.null()]).optional(),
  name: z.string().nullish(),
  tool_call_id: z.string().nullish(),
});
/** One parsed chat message. */
export type ChatRequestMessage = z.infer<typeof chatMessage>;

/** POST /v1/chat/completions body. */
export const chatCompletionRequestSchema = z.object({
  ...samplingFields,
  messages: z.array(chatMessage).min(1),
  logprobs: bool,
  top_logprobs: z.int().min(0).max(MAX_LOGPROBS).nullish(),
  max_completion_tokens: int,
  add_generation_prompt: bool,
  add_special_tokens: bool,
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
});
/** A parsed /v1/chat/completions body. */
export type ChatCompletionRequest = z.infer<typeof chatCompletionRequestSchema>;

/** A field that is accepted only with a value that keeps the default semantics. */
interface UnsupportedRule {
  field: string;
  /** True when the value keeps the request's meaning (absent, null, false, empty, ...). */
  allowed: (v: unknown) => boolean;
}

const unset = (v: unknown) => v === undefined || v === null;
const falsy = (v: unknown) => unset(v) || v === false;
const empty = (v: unknown) =>
  unset(v) ||
  v === "" ||
  (Array.isArray(v) && v.length === 0) ||
  (typeof v === "object" && v !== null && Object.keys(v).length === 0);
const rule = (field: string, allowed: (v: unknown) => boolean = unset): UnsupportedRule => ({
  field,
  allowed,
});

/** Fields of both routes that would change the output and are not implemented. */
const COMMON_UNSUPPORTED: readonly UnsupportedRule[] = [
  rule("logit_bias", empty),
  rule("response_format", (v) => unset(v) || (v as { type?: unknown }).type === "text"),
  rule("use_beam_search", falsy),
  rule("include_stop_str_in_output", falsy),
  rule("prompt_logprobs"),
  rule("guided_json"),
  rule("guided_regex"),
  rule("guided_choice"),
  rule("guided_grammar"),
  rule("structured_outputs"),
  rule("allowed_token_ids"),
  rule("bad_words", empty),
  rule("truncate_prompt_tokens"),
  rule("priority", (v) => unset(v) || v === 0),
  rule("logits_processors"),
  rule("return_tokens_as_token_ids", falsy),
  rule("kv_transfer_params"),
  rule("vllm_xargs"),
];

/** Completions-only fields that are not implemented. */
export const COMPLETION_UNSUPPORTED: readonly UnsupportedRule[] = [
  ...COMMON_UNSUPPORTED,
  rule("echo", falsy),
  rule("suffix", empty),
  rule("prompt_embeds"),
];

const toolChoiceNone = (v: unknown) => unset(v) || v === "none" || v === "auto";

/** Chat-only fields that are not implemented (tools, audio, structured output, ...). */
export const CHAT_UNSUPPORTED: readonly UnsupportedRule[] = [
  ...COMMON_UNSUPPORTED,
  rule("tools", empty),
  rule("tool_choice", toolChoiceNone),
  rule("functions", empty),
  rule("function_call", toolChoiceNone),
  rule("audio"),
  rule("modalities", (v) => unset(v) || (Array.isArray(v) && v.every((m) => m === "text"))),
  rule("prediction"),
  rule("web_search_options"),
  rule("reasoning_effort"),
  rule("continue_final_message", falsy),
  rule("echo", falsy),
  rule("chat_template"),
  rule("documents"),
];

/**
 * Rejects a body that sets a field this server does not implement.
 * @throws OpenAIError 400 naming the first such field.
 */
export function checkUnsupported(body: Record<string, unknown>, rules: readonly UnsupportedRule[]): void {
  for (const r of rules) {
    if (!r.allowed(body[r.field])) {
      throw badRequest(`${r.field} is not supported by this server; remove it from the request`, r.field);
    }
  }
}

/**
 * Parses a body with a schema after the unsupported-field check.
 * @throws OpenAIError 400 for a body that is not an object, has a wrong type, or sets an
 *   unsupported field.
 */
export function parseBody<S extends z.ZodType>(
  body: unknown,
  schema: S,
  unsupported: readonly UnsupportedRule[],
): z.infer<S> {
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw badRequest("the request body must be a JSON object");
  }
  checkUnsupported(body as Record<string, unknown>, unsupported);
  const r = schema.safeParse(body);
  if (!r.success) throw fromZodError(r.error, body) satisfies OpenAIError;
  return r.data;
}

/** Chat message-level fields that are not implemented (assistant tool calls). */
export function checkMessages(body: { messages?: unknown }): void {
  const msgs = Array.isArray(body.messages) ? body.messages : [];
  for (const [i, m] of msgs.entries()) {
    const calls = (m as { tool_calls?: unknown } | null)?.tool_calls;
    if (!empty(calls))
      throw badRequest("tool calls are not supported by this server", `messages[${i}].tool_calls`);
  }
}
