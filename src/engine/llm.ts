import { type EngineArgs, makeEngineArgs } from "../config/engine_args.js";
import { makeSamplingParams, type SamplingParams } from "../core/sampling_params.js";
import type { ChatMessage } from "../tokenizer/chat_template.js";
import {
  type EngineCreateOptions,
  EngineInputError,
  EngineShutdownError,
  LLMEngine,
  type PromptInput,
} from "./llm_engine.js";
import type { RequestOutput } from "./outputs.js";

/** Options of {@link LLM}: engine args (all optional) plus load callbacks. */
export type LLMOptions = Partial<EngineArgs> & EngineCreateOptions;

/** Options of {@link LLM.generate} beyond the prompts and parameters. */
export interface GenerateOptions {
  /** Called each time a prompt of this call finishes: (finished so far, prompts in the call). */
  onProgress?: (done: number, total: number) => void;
}

/**
 * Offline batch generation (vllm.LLM): `await new LLM({ model }).generate(prompts, params)`.
 * The engine loads on first use. Its worker thread keeps the process alive only while a call
 * runs, so a script may end without `shutdown()`; `shutdown()` stops the thread at once and
 * frees the model, after which every call rejects with EngineShutdownError.
 */
export class LLM {
  private enginePromise: Promise<LLMEngine> | null = null;
  private closed = false;
  private nextId = 0;
  /** The last generate() call: calls run one after another (the engine steps one call's batch). */
  private lastCall: Promise<unknown> = Promise.resolve();

  constructor(private readonly options: LLMOptions = {}) {}

  /**
   * The engine, loading it on first call.
   * @throws EngineShutdownError (rejects) after {@link shutdown}
   */
  getEngine(): Promise<LLMEngine> {
    if (this.closed) return Promise.reject(new EngineShutdownError("LLM"));
    if (this.enginePromise === null) {
      const { onLoadProgress, schedulerOptions, ...args } = this.options;
      this.enginePromise = LLMEngine.create(makeEngineArgs(args), { onLoadProgress, schedulerOptions });
    }
    return this.enginePromise;
  }

  /**
   * Generates completions for every prompt, batched together; outputs in prompt order.
   * Concurrent calls are queued: each starts once the previous one returned.
   * @param params one set for all prompts, or one per prompt; partial sets take vLLM defaults
   * @throws EngineInputError for a bad prompt or parameters (nothing is generated then); the
   *   worker's error when a step fails (this call's requests are aborted then);
   *   EngineShutdownError after {@link shutdown} (all as rejections)
   */
  generate(
    prompts: PromptInput | PromptInput[],
    params: Partial<SamplingParams> | Partial<SamplingParams>[] = {},
    opts: GenerateOptions = {},
  ): Promise<RequestOutput[]> {
    if (this.closed) return Promise.reject(new EngineShutdownError("LLM"));
    const call = this.lastCall.then(() => this.generateNow(prompts, params, opts));
    this.lastCall = call.catch(() => undefined);
    return call;
  }

  /** One generate() call, with the engine to itself. */
  private async generateNow(
    prompts: PromptInput | PromptInput[],
    params: Partial<SamplingParams> | Partial<SamplingParams>[],
    opts: GenerateOptions,
  ): Promise<RequestOutput[]> {
    const engine = await this.getEngine();
    const list = Array.isArray(prompts) ? prompts : [prompts];
    if (Array.isArray(params) && params.length !== list.length) {
      throw new EngineInputError(`got ${params.length} sampling parameter sets for ${list.length} prompts`);
    }
    const ids: string[] = [];
    try {
      for (const [i, p] of list.entries()) {
        const sp = makeSamplingParams(Array.isArray(params) ? params[i] : params);
        const id = `llm-${this.nextId++}`;
        engine.addRequest(id, p, sp, { outputKind: "final_only" });
        ids.push(id);
      }
    } catch (e) {
      engine.abortRequest(ids);
      while (engine.hasPendingWork()) await engine.step();
      throw e;
    }
    const done = new Map<string, RequestOutput>();
    try {
      while (engine.hasPendingWork()) {
        for (const o of await engine.step()) {
          if (!o.finished) continue;
          done.set(o.requestId, o);
          opts.onProgress?.(done.size, ids.length);
        }
      }
    } catch (e) {
      // A failed step leaves these requests mid-step: abort them (finished ids are ignored), or
      // the next call would step them forever.
      engine.abortRequest(ids);
      throw e;
    }
    return ids.map((id) => done.get(id)!);
  }

  /**
   * Generates a reply to each conversation with the model's chat template.
   * @throws TokenizerError when the model has no chat template; EngineShutdownError after
   *   {@link shutdown}
   */
  async chat(
    conversations: ChatMessage[] | ChatMessage[][],
    params: Partial<SamplingParams> = {},
  ): Promise<RequestOutput[]> {
    const engine = await this.getEngine();
    const tok = engine.tokenizer;
    if (tok === null) throw new EngineInputError("this model has no tokenizer, so it cannot chat");
    const convs = (Array.isArray(conversations[0]) ? conversations : [conversations]) as ChatMessage[][];
    const prompts = convs.map((c) => {
      const text = tok.applyChatTemplate(c, { addGenerationPrompt: true });
      return { prompt: text, promptTokenIds: tok.encode(text, { addSpecialTokens: false }) };
    });
    return this.generate(prompts, params);
  }

  /** Stops the engine's worker and frees the model (idempotent); later calls are refused. */
  async shutdown(): Promise<void> {
    this.closed = true;
    if (this.enginePromise === null) return;
    const e = await this.enginePromise.catch(() => null);
    this.enginePromise = null;
    await e?.shutdown();
  }
}
