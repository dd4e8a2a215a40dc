import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { Piscina } from "piscina";
import type { ApplyChatTemplateOptions, ChatMessage } from "./chat_template.js";
import { PromptTooLongError, TokenizerError } from "./errors.js";
import type { TokenizerTask, TokenizerTaskResult } from "./tokenizer_worker.js";

/** Options of {@link TokenizerPool.create}. */
export interface TokenizerPoolOptions {
  /** Most threads (default: a quarter of the CPUs, 1 to 4). */
  maxThreads?: number;
  /**
   * Added to the threads' nice value (Linux, through piscina's optional @napi-rs/nice; default
   * 0). A positive value lets the engine's threads go first under CPU contention, at the cost
   * of starving tokenization (and so new requests' first tokens) on a busy CPU backend.
   */
  niceIncrement?: number;
}

/** A prompt tokenized by the pool. */
export interface PoolEncoding {
  promptTokenIds: number[];
  /** The rendered chat text (chat only). */
  text?: string;
}

/** Idle threads beyond the first exit after this many ms. */
const IDLE_TIMEOUT_MS = 30_000;

/**
 * Tokenizes and renders chat templates on worker threads (piscina), so that the work, which
 * grows with the text, never runs on the event loop: the HTTP server keeps answering `/health`
 * and streaming other requests while a large prompt is tokenized. Each thread loads its own
 * copy of the tokenizer from `dir`. One thread stays up (piscina unrefs idle threads, so the
 * pool never keeps a process alive); more start under load up to `maxThreads`.
 *
 * Every call takes `maxTokens`, the longest prompt the caller can use: longer prompts reject
 * with {@link PromptTooLongError} (found by the length bound without tokenizing, or by the
 * count), so the caller never receives more ids than fit.
 */
export class TokenizerPool {
  private constructor(private readonly pool: Piscina<TokenizerTask, TokenizerTaskResult>) {}

  /**
   * Starts the pool and loads the tokenizer in its first thread.
   * @throws TokenizerError (or the thread's error) when the tokenizer cannot be loaded there.
   */
  static async create(dir: string, o: TokenizerPoolOptions = {}): Promise<TokenizerPool> {
    const maxThreads = o.maxThreads ?? Math.min(4, Math.max(1, Math.floor(availableParallelism() / 4)));
    const pool = new Piscina<TokenizerTask, TokenizerTaskResult>({
      filename: workerFile(),
      workerData: { dir },
      minThreads: 1,
      maxThreads,
      idleTimeout: IDLE_TIMEOUT_MS,
      niceIncrement: o.niceIncrement ?? 0,
    });
    const p = new TokenizerPool(pool);
    try {
      unwrap(await pool.run({ op: "ping" }));
    } catch (e) {
      await pool.destroy();
      throw e;
    }
    return p;
  }

  /** Threads running now. */
  get numThreads(): number {
    return this.pool.threads.length;
  }

  /**
   * Token ids of `text`.
   * @throws PromptTooLongError when it has more than `maxTokens` tokens
   * @throws TokenizerError for a tokenizer failure
   */
  async encode(
    text: string,
    addSpecialTokens: boolean,
    maxTokens: number,
    signal?: AbortSignal,
  ): Promise<number[]> {
    const r = await this.pool.run(
      { op: "encode", text, addSpecialTokens, maxTokens },
      { signal: signal ?? null },
    );
    return unwrap(r).promptTokenIds;
  }

  /**
   * The conversation rendered with the chat template, and its token ids.
   * @throws PromptTooLongError when the rendered text has more than `maxTokens` tokens
   * @throws TokenizerError when there is no template, a message is malformed or the template raises
   */
  async renderChat(
    messages: ChatMessage[],
    template: ApplyChatTemplateOptions,
    addSpecialTokens: boolean,
    maxTokens: number,
    signal?: AbortSignal,
  ): Promise<Required<PoolEncoding>> {
    const r = await this.pool.run(
      { op: "chat", messages, template, addSpecialTokens, maxTokens },
      { signal: signal ?? null },
    );
    const out = unwrap(r);
    return { promptTokenIds: out.promptTokenIds, text: out.text ?? "" };
  }

  /** Stops the threads (tasks in flight are cancelled). */
  async close(): Promise<void> {
    await this.pool.destroy();
  }
}

/** The thread's module: the compiled handler, or under tsx the boot file that registers tsx first. */
function workerFile(): string {
  const fromSource = import.meta.url.endsWith(".ts");
  return fileURLToPath(
    new URL(fromSource ? "./tokenizer_worker_boot.mjs" : "./tokenizer_worker.js", import.meta.url),
  );
}

/** A task result as ids, or its error thrown. */
function unwrap(r: TokenizerTaskResult): PoolEncoding {
  switch (r.kind) {
    case "ids":
      return { promptTokenIds: Array.from(r.ids), ...(r.text === undefined ? {} : { text: r.text }) };
    case "tooLong":
      throw new PromptTooLongError(r.numTokens, r.exact, r.numBytes);
    case "error":
      throw new TokenizerError(r.message);
    case "pong":
      return { promptTokenIds: [] };
  }
}
