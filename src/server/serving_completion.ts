/**
 * POST /v1/completions (vllm/entrypoints/openai/serving_completion.py): prompts as text, a batch
 * of texts, token ids or a batch of token id lists; `n` choices per prompt (choice index =
 * prompt index × n + i); streamed as SSE or returned whole with `usage`.
 */
import type { FastifyReply } from "fastify";
import type { ServingContext } from "./context.js";
import { badRequest } from "./errors.js";
import {
  appendCompletionLogprobs,
  type CompletionLogprobs,
  emptyCompletionLogprobs,
  extendCompletionLogprobs,
  type TokenText,
} from "./logprobs.js";
import type { ChildRequest, GroupOutput, TokenizedPrompt } from "./request_group.js";
import { checkRequestFields, resolveMaxTokens, toSamplingParams } from "./sampling.js";
import {
  COMPLETION_UNSUPPORTED,
  type CompletionRequest,
  completionRequestSchema,
  parseBody,
} from "./schemas.js";
import {
  accumulateChoice,
  type ChoiceState,
  choiceChunk,
  newChoice,
  type ReplyFormat,
  sendReply,
  tokenTextOf,
  usage,
  whileClientWaits,
} from "./serving_common.js";

/** vLLM's (and OpenAI's) default max_tokens of /v1/completions; an explicit null means "the rest of the context". */
export const COMPLETION_DEFAULT_MAX_TOKENS = 16;

/**
 * Handles one completions request.
 * @throws OpenAIError 400 (bad body or parameters), 404 (unknown model), 503 (overloaded).
 */
export async function serveCompletion(
  ctx: ServingContext,
  body: unknown,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const r = parseBody(body, completionRequestSchema, COMPLETION_UNSUPPORTED);
  ctx.checkModel(r.model);
  checkRequestFields(r);
  const n = r.n ?? 1;
  if (r.best_of != null && r.best_of !== n) {
    throw badRequest(`best_of is not supported by this server (it must equal n, ${n})`, "best_of");
  }
  const prompts = await whileClientWaits(reply, (signal) => tokenizePrompts(ctx, r, signal));
  if (prompts === null) return reply.hijack();
  const id = ctx.newResponseId("cmpl");
  const children: ChildRequest[] = [];
  for (const [p, prompt] of prompts.entries()) {
    const requested = r.max_tokens === undefined ? COMPLETION_DEFAULT_MAX_TOKENS : r.max_tokens;
    const maxTokens = resolveMaxTokens(requested, prompt.promptTokenIds.length, ctx.maxModelLen, "prompt");
    for (let i = 0; i < n; i++) {
      const index = p * n + i;
      const params = toSamplingParams(r, maxTokens, r.logprobs ?? null, i);
      children.push({ index, requestId: `${id}-${index}`, prompt, params });
    }
  }
  const group = ctx.submit(children);
  const format = new CompletionFormat(id, ctx.created(), ctx.modelName, children, r, tokenTextOf(ctx));
  return sendReply(ctx, reply, group, format, {
    stream: r.stream === true,
    includeUsage: r.stream_options?.include_usage === true,
  });
}

/**
 * The request's prompts as token ids; text prompts are tokenized on the tokenizer pool (off
 * the event loop), all at once. Text is encoded with the tokenizer's special tokens unless
 * `add_special_tokens: false` (vLLM's default is true).
 * @throws OpenAIError 400 for an empty prompt, a text prompt that cannot fit the context (found
 *   before tokenizing when its length alone proves it), or a text prompt on a model without
 *   tokenizer.
 */
export async function tokenizePrompts(
  ctx: ServingContext,
  r: CompletionRequest,
  signal?: AbortSignal,
): Promise<TokenizedPrompt[]> {
  const addSpecialTokens = r.add_special_tokens ?? true;
  const list: (string | number[])[] =
    typeof r.prompt === "string"
      ? [r.prompt]
      : typeof r.prompt[0] === "number"
        ? [r.prompt as number[]]
        : (r.prompt as string[] | number[][]);
  const param = (i: number) => (list.length > 1 ? `prompt[${i}]` : "prompt");
  // Empty prompts first: "" is refused without a trip to the pool.
  for (const [i, p] of list.entries()) {
    if (p.length === 0) throw badRequest("the prompt must contain at least one token", param(i));
  }
  return Promise.all(
    list.map(async (p, i): Promise<TokenizedPrompt> => {
      if (typeof p !== "string") return { promptTokenIds: p };
      const tokens = await ctx.encodePrompt(p, param(i), addSpecialTokens, signal);
      if (tokens.length === 0) throw badRequest("the prompt must contain at least one token", param(i));
      return { prompt: p, promptTokenIds: tokens };
    }),
  );
}

interface CompletionChoice extends ChoiceState {
  logprobs: CompletionLogprobs | null;
  textOffset: number;
}

/** Formats completions chunks and bodies (object "text_completion"). */
class CompletionFormat implements ReplyFormat {
  private readonly choices: CompletionChoice[];
  private readonly numPromptTokens: number;

  constructor(
    private readonly id: string,
    private readonly created: number,
    private readonly model: string,
    children: readonly ChildRequest[],
    private readonly r: CompletionRequest,
    private readonly tokenText: TokenText,
  ) {
    const wantLogprobs = r.logprobs !== null && r.logprobs !== undefined;
    this.choices = children.map((c) => ({
      ...newChoice(c.index, c.prompt.promptTokenIds.length),
      logprobs: wantLogprobs ? emptyCompletionLogprobs() : null,
      textOffset: 0,
    }));
    // Each prompt counts once however many choices it has (vLLM's usage).
    const n = r.n ?? 1;
    this.numPromptTokens = children.reduce(
      (a, c, i) => a + (i % n === 0 ? c.prompt.promptTokenIds.length : 0),
      0,
    );
  }

  startChunks(): unknown[] {
    return [];
  }

  onOutput({ index, output }: GroupOutput): unknown[] {
    const c = this.choices[index]!;
    const o = accumulateChoice(c, output);
    let logprobs: CompletionLogprobs | null = null;
    if (c.logprobs !== null && o.logprobs !== null) {
      logprobs = emptyCompletionLogprobs();
      c.textOffset = appendCompletionLogprobs(logprobs, o.tokenIds, o.logprobs, this.tokenText, c.textOffset);
      extendCompletionLogprobs(c.logprobs, logprobs);
    }
    // vLLM's rule: a step that produced tokens gets a chunk even when its text is empty (partial
    // UTF-8, a held-back stop string, or a model served without a tokenizer, whose text is always
    // empty), so streaming clients see every token's timing; only token-less steps are skipped.
    if (o.text.length === 0 && o.tokenIds.length === 0 && !output.finished && logprobs === null) return [];
    const continuousUsage = this.r.stream_options?.continuous_usage_stats === true;
    return [choiceChunk(this.header(), c, output.finished, { text: o.text, logprobs }, continuousUsage)];
  }

  usageChunk(): unknown {
    return { ...this.header(), choices: [], usage: this.usage() };
  }

  body(): unknown {
    return {
      ...this.header(),
      choices: this.choices.map((c) => ({
        index: c.index,
        text: c.text,
        logprobs: c.logprobs,
        finish_reason: c.finishReason,
        stop_reason: c.stopReason,
      })),
      usage: this.usage(),
    };
  }

  private header() {
    return { id: this.id, object: "text_completion", created: this.created, model: this.model };
  }

  private usage() {
    return usage(
      this.numPromptTokens,
      this.choices.reduce((a, c) => a + c.numTokens, 0),
    );
  }
}
