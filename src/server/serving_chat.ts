/**
 * POST /v1/chat/completions (vllm/entrypoints/openai/serving_chat.py): the messages are
 * rendered with the model's chat template, encoded without the tokenizer's special tokens (the
 * template holds them), and generated like a completion; `n` choices; SSE or one body.
 */
import type { FastifyReply } from "fastify";
import type { ChatMessage } from "../tokenizer/chat_template.js";
import type { ServingContext } from "./context.js";
import { badRequest } from "./errors.js";
import { type ChatTokenLogprob, chatLogprobEntries, type TokenText } from "./logprobs.js";
import type { ChildRequest, GroupOutput, TokenizedPrompt } from "./request_group.js";
import { checkRequestFields, resolveMaxTokens, toSamplingParams } from "./sampling.js";
import {
  CHAT_UNSUPPORTED,
  type ChatCompletionRequest,
  type ChatRequestMessage,
  chatCompletionRequestSchema,
  checkMessages,
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

/**
 * Handles one chat completions request.
 * @throws OpenAIError 400 (bad body, parameters or messages; template errors), 404 (unknown
 *   model), 503 (overloaded).
 */
export async function serveChat(
  ctx: ServingContext,
  body: unknown,
  reply: FastifyReply,
): Promise<FastifyReply> {
  const r = parseBody(body, chatCompletionRequestSchema, CHAT_UNSUPPORTED);
  checkMessages(body as { messages?: unknown });
  ctx.checkModel(r.model);
  checkRequestFields(r);
  if (r.top_logprobs != null && r.logprobs !== true) {
    throw badRequest("top_logprobs can only be given when logprobs is true", "top_logprobs");
  }
  const prompt = await whileClientWaits(reply, (signal) => renderChatPrompt(ctx, r, signal));
  if (prompt === null) return reply.hijack();
  const maxParam = r.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
  const maxTokens = resolveMaxTokens(
    r.max_completion_tokens ?? r.max_tokens,
    prompt.promptTokenIds.length,
    ctx.maxModelLen,
    "messages",
    maxParam,
  );
  const logprobs = r.logprobs === true ? (r.top_logprobs ?? 0) : null;
  const id = ctx.newResponseId("chatcmpl");
  const children: ChildRequest[] = [];
  for (let i = 0; i < (r.n ?? 1); i++) {
    children.push({
      index: i,
      requestId: `${id}-${i}`,
      prompt,
      params: toSamplingParams(r, maxTokens, logprobs, i),
    });
  }
  const group = ctx.submit(children);
  const format = new ChatFormat(id, ctx.created(), ctx.modelName, prompt, r, tokenTextOf(ctx));
  return sendReply(ctx, reply, group, format, {
    stream: r.stream === true,
    includeUsage: r.stream_options?.include_usage === true,
  });
}

/**
 * The chat prompt: the template's text (with the assistant opener unless
 * `add_generation_prompt: false`) and its tokens, both made on the tokenizer pool.
 * @throws OpenAIError 400 for a message without content (other than the assistant's), a model
 *   without tokenizer or chat template, a template that raises, or a rendered prompt that
 *   cannot fit the context.
 */
export async function renderChatPrompt(
  ctx: ServingContext,
  r: ChatCompletionRequest,
  signal?: AbortSignal,
): Promise<TokenizedPrompt> {
  const messages = r.messages.map(toChatMessage);
  const prompt = await ctx.renderChat(
    messages,
    {
      addGenerationPrompt: r.add_generation_prompt ?? true,
      chatTemplateKwargs: r.chat_template_kwargs ?? undefined,
      addSpecialTokens: r.add_special_tokens ?? false,
    },
    signal,
  );
  if (prompt.promptTokenIds.length === 0)
    throw badRequest("the messages render to an empty prompt", "messages");
  return prompt;
}

/** A request message as the template takes it (absent optional fields left out). */
function toChatMessage(m: ChatRequestMessage, i: number): ChatMessage {
  if ((m.content === null || m.content === undefined) && m.role !== "assistant") {
    throw badRequest(`messages[${i}].content is required for role ${m.role}`, `messages[${i}].content`);
  }
  const out: ChatMessage = { role: m.role, content: m.content ?? null };
  if (m.name != null) out.name = m.name;
  if (m.tool_call_id != null) out.tool_call_id = m.tool_call_id;
  return out;
}

interface ChatChoice extends ChoiceState {
  logprobs: ChatTokenLogprob[] | null;
}

/** Formats chat chunks and bodies (objects "chat.completion.chunk" / "chat.completion"). */
class ChatFormat implements ReplyFormat {
  private readonly choices: ChatChoice[] = [];
  private readonly topN: number;

  constructor(
    private readonly id: string,
    private readonly created: number,
    private readonly model: string,
    private readonly prompt: TokenizedPrompt,
    private readonly r: ChatCompletionRequest,
    private readonly tokenText: TokenText,
  ) {
    for (let i = 0; i < (r.n ?? 1); i++) {
      this.choices.push({ ...newChoice(i, prompt.promptTokenIds.length), logprobs: r.logprobs ? [] : null });
    }
    this.topN = r.top_logprobs ?? 0;
  }

  /** vLLM's first chunk per choice: the assistant role with empty content. */
  startChunks(): unknown[] {
    return this.choices.map((c) => ({
      ...this.header("chat.completion.chunk"),
      choices: [
        { index: c.index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null },
      ],
    }));
  }

  onOutput({ index, output }: GroupOutput): unknown[] {
    const c = this.choices[index]!;
    const o = accumulateChoice(c, output);
    let entries: ChatTokenLogprob[] | null = null;
    if (c.logprobs !== null && o.logprobs !== null) {
      entries = chatLogprobEntries(o.tokenIds, o.logprobs, this.tokenText, this.topN);
      c.logprobs.push(...entries);
    }
    if (o.text.length === 0 && !output.finished && entries === null) return [];
    const fields = {
      delta: o.text.length > 0 ? { content: o.text } : {},
      logprobs: entries === null ? null : { content: entries },
    };
    const continuousUsage = this.r.stream_options?.continuous_usage_stats === true;
    return [choiceChunk(this.header("chat.completion.chunk"), c, output.finished, fields, continuousUsage)];
  }

  usageChunk(): unknown {
    return { ...this.header("chat.completion.chunk"), choices: [], usage: this.usage() };
  }

  body(): unknown {
    return {
      ...this.header("chat.completion"),
      choices: this.choices.map((c) => ({
        index: c.index,
        message: { role: "assistant", content: c.text },
        logprobs: c.logprobs === null ? null : { content: c.logprobs },
        finish_reason: c.finishReason,
        stop_reason: c.stopReason,
      })),
      usage: this.usage(),
    };
  }

  private header(object: string) {
    return { id: this.id, object, created: this.created, model: this.model };
  }

  /** The prompt counts once for all n choices (vLLM's usage). */
  private usage() {
    return usage(
      this.prompt.promptTokenIds.length,
      this.choices.reduce((a, c) => a + c.numTokens, 0),
    );
  }
}
