/**
 * POST /v1/preheat (a hisparse extension, not an OpenAI route): computes the KV cache of a prompt
 * (a completion's `prompt`, or chat `messages` rendered with the template) and leaves it in the
 * prefix cache, so that later requests starting with it prefill only their own tokens (a long
 * document before the questions about it). It runs the prompt as one engine request of a single
 * greedy token, waits for it, and answers two things, both true of their own moment:
 * - what the preheat found: prompt tokens that were already cached when it was scheduled, by the
 *   tier their pages were in (a device copy read in place, or only the pinned host tier of Hybrid
 *   HiSparse, loaded back for the prefill), and the tokens its prefill computed;
 * - what is cached now (after the run): tokens of the cached run of whole pages from the first
 *   token, and where those pages live (a host page loaded back by the preheat has a device copy
 *   again, so it counts as a device page here; one whose copy was evicted since counts as host).
 * The pages stay cached like any finished request's: least recently used first out when room
 * is needed. Needs `--enable-prefix-caching`.
 */
import type { FastifyReply } from "fastify";
import { z } from "zod";
import { makeSamplingParams } from "../core/sampling_params.js";
import type { ServingContext } from "./context.js";
import { badRequest, OpenAIError } from "./errors.js";
import type { TokenizedPrompt } from "./request_group.js";
import { chatCompletionRequestSchema, completionRequestSchema, parseBody } from "./schemas.js";
import { renderChatPrompt } from "./serving_chat.js";
import { tokenizePrompts } from "./serving_completion.js";
import { onClientGone } from "./sse.js";

/** POST /v1/preheat body: exactly one of `prompt` (text or token ids) and `messages`. */
export const preheatRequestSchema = z
  .object({
    model: z.string().nullish(),
    prompt: z.union([z.string(), z.array(z.int().min(0)).min(1)]).optional(),
    messages: chatCompletionRequestSchema.shape.messages.optional(),
    add_special_tokens: z.boolean().nullish(),
    /** Chat: append the assistant opener (default false: the prefix a conversation continues). */
    add_generation_prompt: z.boolean().nullish(),
    chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  })
  .refine((b) => (b.prompt === undefined) !== (b.messages === undefined), {
    message: "give exactly one of prompt and messages",
    path: ["prompt"],
  });
export type PreheatRequest = z.infer<typeof preheatRequestSchema>;

/** The answer of POST /v1/preheat. */
export interface PreheatResponse {
  id: string;
  object: "preheat";
  model: string;
  /** Tokens of the prompt. */
  prompt_tokens: number;
  /** Of those, tokens whose KV is in the prefix cache now, after the run (whole pages from the first token). */
  cached_tokens: number;
  block_size: number;
  /** Those cached pages by tier, now: with a device block, and only in the host tier (HiSparse). */
  pages: { device: number; host: number };
  /**
   * Prompt tokens found in the prefix cache when the preheat was scheduled, by the tier of their
   * pages then: `device` (read in place), `host` (only in HiSparse's host tier, loaded back).
   */
  hit_tokens: { device: number; host: number };
  /** Prompt tokens the preheat's prefill computed: prompt_tokens - hit_tokens.device - hit_tokens.host. */
  computed_tokens: number;
}

/**
 * Handles one preheat request.
 * @throws OpenAIError 400 (bad body, prompt too long, prefix caching off), 404 (unknown model),
 *   503 (overloaded, or aborted by shutdown).
 */
export async function servePreheat(
  ctx: ServingContext,
  body: unknown,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const r = parseBody(body, preheatRequestSchema, []);
  ctx.checkModel(r.model);
  const kv = ctx.llm.engine.scheduler.kvCacheManager;
  if (!kv.enableCaching)
    throw badRequest("POST /v1/preheat needs a server started with --enable-prefix-caching");
  const prompt = await promptOf(ctx, r);
  const id = ctx.newResponseId("cmpl").replace(/^cmpl/, "preheat");
  // One greedy token: the prefill computes (and caches) every page of the prompt.
  const params = makeSamplingParams({ maxTokens: 1, temperature: 0, ignoreEos: true });
  const group = ctx.submit([{ index: 0, requestId: `${id}-0`, prompt, params }]);
  const gone = onClientGone(reply.raw, () => group.abort());
  let hits = { numCachedTokens: 0, numHostCachedTokens: 0 };
  try {
    // Only its end matters (the hits are those of its first scheduling, in every output).
    for await (const { output } of group.outputs()) hits = output;
    if (gone()) return reply.hijack();
    if (!group.finished)
      throw new OpenAIError(503, "the preheat was aborted because the server is shutting down");
  } finally {
    ctx.release(group);
  }
  const where = kv.locateCachedPrefix(prompt.promptTokenIds);
  const numPages = where.numDevicePages + where.numHostPages;
  const numPromptTokens = prompt.promptTokenIds.length;
  const out: PreheatResponse = {
    id,
    object: "preheat",
    model: ctx.modelName,
    prompt_tokens: numPromptTokens,
    cached_tokens: numPages * kv.blockSize,
    block_size: kv.blockSize,
    pages: { device: where.numDevicePages, host: where.numHostPages },
    hit_tokens: {
      device: hits.numCachedTokens - hits.numHostCachedTokens,
      host: hits.numHostCachedTokens,
    },
    computed_tokens: numPromptTokens - hits.numCachedTokens,
  };
  return reply.send(out);
}

/** The prompt's tokens: text or ids as /v1/completions takes them, or rendered chat messages. */
async function promptOf(ctx: ServingContext, r: PreheatRequest): Promise<TokenizedPrompt> {
  if (r.prompt !== undefined) {
    const c = completionRequestSchema.parse({ prompt: r.prompt, add_special_tokens: r.add_special_tokens });
    const [p] = await tokenizePrompts(ctx, c);
    return p!;
  }
  const chat = chatCompletionRequestSchema.parse({
    messages: r.messages,
    add_generation_prompt: r.add_generation_prompt ?? false,
    add_special_tokens: r.add_special_tokens,
    chat_template_kwargs: r.chat_template_kwargs,
  });
  return renderChatPrompt(ctx, chat);
}
