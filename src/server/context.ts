import { randomUUID } from "node:crypto";
import type { AsyncLLM } from "../engine/async_llm.js";
import type { MetricsRegistry } from "../metrics/metrics_registry.js";
import type { ChatMessage } from "../tokenizer/chat_template.js";
import { PromptTooLongError } from "../tokenizer/errors.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import type { TokenizerPool } from "../tokenizer/tokenizer_pool.js";
import { badRequest, OpenAIError } from "./errors.js";
import { type ChildRequest, RequestGroup, type TokenizedPrompt } from "./request_group.js";
import { type PromptKind, promptTooLong } from "./sampling.js";

/** Admission limits of the server. */
export interface ServingLimits {
  /**
   * Engine requests allowed to wait in the scheduler's queue; a request whose sequences would
   * push the queue past this gets 503. (`--max-waiting-requests`, default 4 × max-num-seqs.)
   */
  maxWaitingRequests: number;
}

/** Chat template settings of one request. */
export interface ChatRender {
  addGenerationPrompt: boolean;
  chatTemplateKwargs?: Record<string, unknown>;
  addSpecialTokens: boolean;
}

/**
 * What the OpenAI routes share (vllm/entrypoints/openai/serving_engine.py OpenAIServing): the
 * engine, the served model name, limits, metrics, the tokenizer pool, and the live request
 * groups (aborted together on shutdown).
 */
export class ServingContext {
  /** Set when the engine failed: /health answers 503 and new requests are refused. */
  engineError: Error | null = null;
  private readonly groups = new Set<RequestGroup>();

  constructor(
    readonly llm: AsyncLLM,
    /** The name clients put in `model` (`--served-model-name`). */
    readonly modelName: string,
    readonly limits: ServingLimits,
    readonly metrics: MetricsRegistry | null,
    /**
     * Tokenizes text and renders chat templates off the event loop; null only where a caller
     * builds a context without one (text is then tokenized on this thread).
     */
    readonly tokenizers: TokenizerPool | null = null,
    /** `root` of /v1/models: the model as given (`--model`), not the resolved path. */
    readonly modelRoot: string = llm.engine.info.modelDir,
  ) {
    llm.on("engineError", (e: Error) => {
      this.engineError = e;
    });
  }

  /** Longest prompt + output in tokens (the engine's max_model_len). */
  get maxModelLen(): number {
    return this.llm.engine.maxModelLen;
  }

  /**
   * The tokenizer, for text prompts and chat.
   * @throws OpenAIError 400 when the model has none (only token-id prompts work then).
   */
  tokenizer(param: string): Tokenizer {
    const tok = this.llm.engine.tokenizer;
    if (tok === null) throw badRequest("this model has no tokenizer, so prompts must be token ids", param);
    return tok;
  }

  /**
   * A text prompt's token ids, tokenized on the pool. A text whose byte length alone proves it
   * longer than the context (the tokenizer's length bound) is refused here, untokenized; the
   * pool refuses one whose ids exceed max_model_len - 1 without sending them back.
   * @throws OpenAIError 400 (vLLM's context-length message) for a prompt that cannot fit, or a
   *   model without tokenizer
   */
  async encodePrompt(
    text: string,
    param: string,
    addSpecialTokens: boolean,
    signal?: AbortSignal,
  ): Promise<number[]> {
    const tok = this.tokenizer(param);
    const limit = this.maxModelLen - 1;
    try {
      const min = tok.minTokens(text);
      if (min > limit) throw new PromptTooLongError(min, false, Buffer.byteLength(text));
      if (this.tokenizers === null) return tok.encode(text, { addSpecialTokens });
      return await this.tokenizers.encode(text, addSpecialTokens, limit, signal);
    } catch (e) {
      throw this.tooLong(e, "prompt", param);
    }
  }

  /**
   * A conversation rendered with the chat template and tokenized, on the pool (the rendered
   * text's length bound is checked there before tokenizing).
   * @throws OpenAIError 400 for a conversation that cannot fit; TokenizerError for a template
   *   failure (400 through toOpenAIError)
   */
  async renderChat(messages: ChatMessage[], r: ChatRender, signal?: AbortSignal): Promise<TokenizedPrompt> {
    const tok = this.tokenizer("messages");
    const template = { addGenerationPrompt: r.addGenerationPrompt, chatTemplateKwargs: r.chatTemplateKwargs };
    const limit = this.maxModelLen - 1;
    try {
      if (this.tokenizers === null) {
        const text = tok.applyChatTemplate(messages, template);
        return { prompt: text, promptTokenIds: tok.encode(text, { addSpecialTokens: r.addSpecialTokens }) };
      }
      const out = await this.tokenizers.renderChat(messages, template, r.addSpecialTokens, limit, signal);
      return { prompt: out.text, promptTokenIds: out.promptTokenIds };
    } catch (e) {
      throw this.tooLong(e, "messages", "messages");
    }
  }

  /** A PromptTooLongError as vLLM's 400; any other error unchanged. */
  private tooLong(e: unknown, kind: PromptKind, param: string): unknown {
    if (!(e instanceof PromptTooLongError)) return e;
    const err = promptTooLong(e, this.maxModelLen, kind);
    return param === kind ? err : new OpenAIError(err.status, err.message, param);
  }

  /**
   * Checks the request's `model` (absent means the served model, as in vLLM).
   * @throws OpenAIError 404 "The model `x` does not exist." (vLLM's message).
   */
  checkModel(model: string | null | undefined): void {
    if (model === null || model === undefined || model === this.modelName) return;
    throw new OpenAIError(404, `The model \`${model}\` does not exist.`, "model");
  }

  /** A response id: `<prefix>-<uuid without dashes>` (cmpl-..., chatcmpl-...). */
  newResponseId(prefix: "cmpl" | "chatcmpl"): string {
    return `${prefix}-${randomUUID().replaceAll("-", "")}`;
  }

  /** Unix time in seconds (the `created` field). */
  created(): number {
    return Math.floor(Date.now() / 1000);
  }

  /**
   * Admits and submits the engine requests of one HTTP request.
   * @throws OpenAIError 503 when the engine failed or the waiting queue is full; 400 when the
   *   request alone asks for more sequences than the queue holds; the engine's refusal (400).
   */
  submit(children: readonly ChildRequest[]): RequestGroup {
    if (this.engineError !== null) {
      throw new OpenAIError(503, `the engine failed and cannot serve requests (${this.engineError.message})`);
    }
    const limit = this.limits.maxWaitingRequests;
    if (children.length > limit) {
      throw badRequest(
        `this request asks for ${children.length} sequences, more than this server queues at once (${limit}); lower n or send fewer prompts`,
        "n",
      );
    }
    // Requests that will really queue: those waiting beyond the free running slots (a request
    // just added counts as waiting until the next step schedules it).
    const sched = this.llm.engine.scheduler;
    const freeSlots = Math.max(0, sched.schedulerConfig.maxNumSeqs - sched.numRunning);
    const waiting = Math.max(0, sched.numWaiting - freeSlots);
    if (Math.max(0, sched.numWaiting + children.length - freeSlots) > limit) {
      throw new OpenAIError(
        503,
        `the server is overloaded: ${waiting} requests are waiting (limit ${limit}); retry later`,
      );
    }
    const group = RequestGroup.submit(this.llm, children, this.metrics);
    this.groups.add(group);
    return group;
  }

  /** Forgets a group whose HTTP request ended. */
  release(group: RequestGroup): void {
    this.groups.delete(group);
  }

  /** Number of HTTP requests being served. */
  get numActiveGroups(): number {
    return this.groups.size;
  }

  /** Aborts every live request (shutdown). */
  abortAll(): void {
    for (const g of this.groups) g.abort();
  }

  /**
   * Waits until every HTTP request has finished replying (after {@link abortAll}: their last
   * events are written), or `timeoutMs` passed.
   */
  async drain(timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (this.groups.size > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 5));
  }
}
