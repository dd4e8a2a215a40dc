import { EventEmitter } from "node:events";
import type { EngineArgs } from "../config/engine_args.js";
import type { SamplingParams } from "../core/sampling_params.js";
import { type EngineCreateOptions, EngineShutdownError, LLMEngine, type PromptInput } from "./llm_engine.js";
import type { RequestOutput, RequestOutputKind } from "./outputs.js";

/** Waiters of one request: outputs queued until the consumer takes them. */
interface Stream {
  queue: RequestOutput[];
  error: Error | null;
  done: boolean;
  wake: (() => void) | null;
}

/**
 * The engine for concurrent callers (vllm/v1/engine/async_llm.py): a background loop steps the
 * engine while requests are live, and each `generate()` call gets an async iterator of its
 * outputs. Breaking out of the iteration (e.g. an HTTP client disconnected) aborts the request,
 * whose KV blocks are freed in the next step.
 */
export class AsyncLLM extends EventEmitter {
  private readonly streams = new Map<string, Stream>();
  private loop: Promise<void> | null = null;
  private closed = false;
  private nextId = 0;

  private constructor(readonly engine: LLMEngine) {
    super();
  }

  /** Starts an engine (see LLMEngine.create). */
  static async create(args: EngineArgs, opts: EngineCreateOptions = {}): Promise<AsyncLLM> {
    return new AsyncLLM(await LLMEngine.create(args, opts));
  }

  /** Requests not yet finished. */
  get numActiveRequests(): number {
    return this.streams.size;
  }

  /**
   * Submits a request and iterates over its outputs until it finishes.
   * Validation errors (EngineInputError) are thrown by this call, before any iteration.
   * @param requestId unique id; generated when omitted
   * @throws EngineShutdownError after {@link shutdown}
   */
  generate(
    prompt: PromptInput,
    params: SamplingParams,
    opts: { requestId?: string; outputKind?: RequestOutputKind } = {},
  ): AsyncIterableIterator<RequestOutput> {
    if (this.closed) throw new EngineShutdownError("AsyncLLM");
    const requestId = opts.requestId ?? `req-${this.nextId++}`;
    const stream: Stream = { queue: [], error: null, done: false, wake: null };
    this.engine.addRequest(requestId, prompt, params, { outputKind: opts.outputKind ?? "delta" });
    this.streams.set(requestId, stream);
    this.ensureLoop();
    return this.iterate(requestId, stream);
  }

  /** Aborts a request (idempotent). */
  abort(requestId: string): void {
    const s = this.streams.get(requestId);
    if (s === undefined) return;
    this.streams.delete(requestId);
    this.engine.abortRequest([requestId]);
    s.done = true;
    s.wake?.();
    this.ensureLoop();
  }

  private async *iterate(requestId: string, s: Stream): AsyncIterableIterator<RequestOutput> {
    let finished = false;
    try {
      while (true) {
        const out = s.queue.shift();
        if (out !== undefined) {
          if (out.finished) finished = true;
          yield out;
          if (finished) return;
          continue;
        }
        if (s.error !== null) throw s.error;
        if (s.done) return;
        await new Promise<void>((r) => {
          s.wake = r;
        });
        s.wake = null;
      }
    } finally {
      if (!finished) this.abort(requestId);
    }
  }

  private ensureLoop(): void {
    if (this.loop !== null) return;
    this.loop = this.runLoop().finally(() => {
      this.loop = null;
      if (!this.closed && this.engine.hasPendingWork()) this.ensureLoop();
    });
  }

  private async runLoop(): Promise<void> {
    while (!this.closed && this.engine.hasPendingWork()) {
      let outputs: RequestOutput[];
      try {
        outputs = await this.engine.step();
      } catch (e) {
        this.failAll(e instanceof Error ? e : new Error(String(e)));
        return;
      }
      for (const o of outputs) {
        const s = this.streams.get(o.requestId);
        if (s === undefined) continue;
        s.queue.push(o);
        if (o.finished) this.streams.delete(o.requestId);
        s.wake?.();
      }
      this.emit("step", this.engine.stats);
      // Let I/O callbacks (new requests, disconnects) run between steps.
      await new Promise<void>((r) => setImmediate(r));
    }
  }

  /** A step failed (worker error): every live request ends with that error. */
  private failAll(err: Error): void {
    const ids = [...this.streams.keys()];
    for (const id of ids) {
      const s = this.streams.get(id)!;
      s.error = err;
      s.wake?.();
      this.streams.delete(id);
    }
    this.engine.abortRequest(ids);
    this.emit("engineError", err);
  }

  /** Stops the loop and the engine. */
  async shutdown(): Promise<void> {
    this.closed = true;
    await this.loop;
    for (const id of [...this.streams.keys()]) this.abort(id);
    await this.engine.shutdown();
  }
}
