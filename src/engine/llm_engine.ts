import { performance } from "node:perf_hooks";
import {
  ConfigError,
  cacheConfigOf,
  type EngineArgs,
  schedulerConfigOf,
  validateEngineArgs,
} from "../config/engine_args.js";
import { hisparseConfigOf } from "../config/hisparse_config.js";
import { createHiSparseScheduling, type HiSparseScheduling } from "../core/hisparse/hisparse_scheduling.js";
import type { HiSparseStats } from "../core/hisparse/plan.js";
import { asRequestId, type RequestId } from "../core/ids.js";
import { Request, RequestStatus } from "../core/request.js";
import type { SamplingParams } from "../core/sampling_params.js";
import { validateSamplingParams } from "../core/sampling_params.js";
import type { SchedulerOptions, SchedulerStats } from "../core/sched/extensions.js";
import type { SchedulerOutput } from "../core/sched/output.js";
import { Scheduler } from "../core/sched/scheduler.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import type { WorkerInfo } from "../worker/worker.js";
import { type Executor, InprocExecutor, type ProgressFn, ThreadExecutor } from "./executor.js";
import { checkKVCacheCapacity } from "./kv_capacity.js";
import { OutputProcessor } from "./output_processor.js";
import type { RequestOutput, RequestOutputKind } from "./outputs.js";
import { TensorParallelExecutor } from "./tp_executor.js";

/** A request the engine refuses (bad prompt or parameters); the message is one sentence for the user. */
export class EngineInputError extends Error {
  override name = "EngineInputError";
  constructor(
    message: string,
    /** The request field at fault (OpenAI `param`), when one is. */
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

/**
 * A call on an `LLM` or `AsyncLLM` after its `shutdown()`: the engine and its thread are gone
 * and do not come back (create a new one to generate again).
 */
export class EngineShutdownError extends Error {
  override name = "EngineShutdownError";
  constructor(what: string) {
    super(`this ${what} was shut down; create a new ${what} to generate again`);
  }
}

/** A prompt as text (tokenized by the engine) or as token ids. */
export type PromptInput = string | { promptTokenIds: readonly number[]; prompt?: string };

/** Options of {@link LLMEngine.create}. */
export interface EngineCreateOptions {
  onLoadProgress?: ProgressFn;
  /** Hooks of optional features (HiSparse), given to the scheduler. */
  schedulerOptions?: (info: WorkerInfo) => SchedulerOptions;
}

/** Counters of one step, for metrics and the periodic stats line. */
export interface StepStats {
  numScheduledTokens: number;
  numPromptTokens: number;
  numGenerationTokens: number;
  scheduler: SchedulerStats;
  /** HiSparse pages, pools and counters (absent when HiSparse is off). */
  hisparse?: HiSparseStats;
}

const now = () => performance.now() / 1000;

/**
 * The engine (vllm/v1/engine/llm_engine.py): tokenizes and validates requests, schedules a
 * step, runs it on the executor, turns token ids into text. `step()` is async: with the thread
 * executor the forward runs off the event loop.
 */
export class LLMEngine {
  private readonly processor: OutputProcessor;
  private lastStepStats: StepStats | null = null;
  private stepping = false;

  private constructor(
    readonly args: EngineArgs,
    readonly info: WorkerInfo,
    readonly tokenizer: Tokenizer | null,
    readonly scheduler: Scheduler,
    private readonly executor: Executor,
    /** The scheduler side of HiSparse, or null when it is off. */
    readonly hisparse: HiSparseScheduling | null,
  ) {
    this.processor = new OutputProcessor(tokenizer);
  }

  /**
   * Loads the tokenizer and the model (on a worker thread unless `args.inprocWorker`), sizes
   * the KV cache and checks that it holds one request of max_model_len tokens.
   * @throws ConfigError, ModelConfigError, WeightLoadError, TokenizerError (one sentence each);
   *   KVCacheCapacityError (a ConfigError) when one max_model_len request does not fit.
   */
  static async create(args: EngineArgs, opts: EngineCreateOptions = {}): Promise<LLMEngine> {
    const reasons = validateEngineArgs(args);
    if (reasons.length > 0) throw new ConfigError(reasons);
    const executor = executorFor(args);
    let info: WorkerInfo;
    try {
      info = await executor.init(args, opts.onLoadProgress);
    } catch (e) {
      await executor.shutdown();
      throw e;
    }
    try {
      const tokDir = args.tokenizer ?? info.modelDir;
      const tokenizer =
        args.tokenizer !== undefined || Tokenizer.existsIn(tokDir) ? Tokenizer.fromDir(tokDir) : null;
      const hisparse = hisparseSchedulingFor(args, info);
      if (hisparse !== null && opts.schedulerOptions !== undefined)
        throw new ConfigError([
          "custom scheduler options cannot be combined with --enable-hybrid-sparse on or auto",
        ]);
      const scheduler = new Scheduler(
        schedulerConfigOf(args, info.maxModelLen),
        cacheConfigOf(args, info.numGpuBlocks),
        hisparse?.schedulerOptions ?? opts.schedulerOptions?.(info) ?? {},
      );
      checkKVCacheCapacity(scheduler, {
        backend: info.backend,
        numHostBlocks: info.hisparse?.numHostBlocks ?? null,
        streamingPrefillBlocks: hisparse?.policy.streamingPrefillBlocks(),
      });
      return new LLMEngine(args, info, tokenizer, scheduler, executor, hisparse);
    } catch (e) {
      await executor.shutdown();
      throw e;
    }
  }

  get maxModelLen(): number {
    return this.info.maxModelLen;
  }

  /** EOS ids that end generation: the model config's, else the tokenizer's. */
  get eosTokenIds(): number[] {
    const fromConfig = this.info.modelConfig.eosTokenIds;
    if (fromConfig.length > 0) return fromConfig;
    const e = this.tokenizer?.eosTokenId;
    return e === null || e === undefined ? [] : [e];
  }

  /**
   * Tokenizes a prompt (text prompts get the tokenizer's special tokens, as vLLM does), on the
   * calling thread (the server tokenizes on its TokenizerPool instead and passes ids).
   * @throws EngineInputError when the text cannot be tokenized (no tokenizer), or when its
   *   length bound (Tokenizer.minTokens) proves it longer than max_model_len.
   */
  tokenize(prompt: PromptInput): { prompt: string | null; promptTokenIds: number[] } {
    if (typeof prompt !== "string")
      return { prompt: prompt.prompt ?? null, promptTokenIds: [...prompt.promptTokenIds] };
    if (this.tokenizer === null) {
      throw new EngineInputError(
        "this model has no tokenizer, so prompts must be given as token ids",
        "prompt",
      );
    }
    // A text whose byte length alone proves it longer than the context is refused before it is
    // tokenized (tokenizing costs time and memory that grow with the text).
    const min = this.tokenizer.minTokens(prompt);
    if (min >= this.maxModelLen) {
      throw new EngineInputError(
        `the prompt is ${Buffer.byteLength(prompt)} bytes long, so at least ${min} tokens, but the maximum model length is ${this.maxModelLen} (prompt + output)`,
        "prompt",
      );
    }
    return { prompt, promptTokenIds: this.tokenizer.encode(prompt) };
  }

  /**
   * Checks a tokenized request against the model and engine limits.
   * @throws EngineInputError naming the problem.
   */
  validateRequest(promptTokenIds: readonly number[], params: SamplingParams): void {
    const reasons = validateSamplingParams(params);
    if (reasons.length > 0) throw new EngineInputError(reasons[0]!, reasons[0]!.split(" ")[0] ?? null);
    if (promptTokenIds.length === 0)
      throw new EngineInputError("the prompt must contain at least one token", "prompt");
    const V = this.info.modelConfig.vocabSize;
    const bad = promptTokenIds.find((t) => !Number.isInteger(t) || t < 0 || t >= V);
    if (bad !== undefined)
      throw new EngineInputError(`token id ${bad} is out of vocabulary (size ${V})`, "prompt");
    // Forced tokens are fed back as inputs (and scored): each must be a token of the model.
    const badForced = params.forcedTokenIds?.find((t) => t >= V);
    if (badForced !== undefined)
      throw new EngineInputError(`forced token id ${badForced} is out of vocabulary (size ${V})`);
    const max = this.maxModelLen;
    if (promptTokenIds.length >= max) {
      throw new EngineInputError(
        `the prompt is ${promptTokenIds.length} tokens long, but the maximum model length is ${max} (prompt + output)`,
        "prompt",
      );
    }
  }

  /**
   * Adds a request.
   * @throws EngineInputError for a bad prompt or parameters, or a duplicate id.
   */
  addRequest(
    requestId: string,
    prompt: PromptInput,
    params: SamplingParams,
    opts: { outputKind?: RequestOutputKind; arrivalTime?: number } = {},
  ): void {
    const id = asRequestId(requestId);
    if (this.scheduler.getRequest(id) !== undefined) {
      throw new EngineInputError(`request id ${requestId} is already in use`, "request_id");
    }
    const tok = this.tokenize(prompt);
    this.validateRequest(tok.promptTokenIds, params);
    const arrival = opts.arrivalTime ?? now();
    const req = new Request(id, tok.promptTokenIds, params, this.eosTokenIds, arrival);
    const refusal = this.scheduler.admissionError(req);
    if (refusal !== null) throw new EngineInputError(refusal, "prompt");
    this.processor.addRequest(
      requestId,
      tok.prompt,
      tok.promptTokenIds,
      params,
      opts.outputKind ?? "cumulative",
      arrival,
    );
    this.scheduler.addRequest(req);
  }

  /** Aborts requests: frees their KV blocks in the next step. Unknown ids are ignored. */
  abortRequest(requestIds: readonly string[]): void {
    this.scheduler.finishRequests(requestIds.map(asRequestId), RequestStatus.FINISHED_ABORTED);
    for (const id of requestIds) this.processor.removeRequest(id);
  }

  hasUnfinishedRequests(): boolean {
    return this.scheduler.hasUnfinishedRequests();
  }

  /** True when finished requests still have to be released on the worker. */
  hasPendingWork(): boolean {
    return this.scheduler.hasUnfinishedRequests() || this.scheduler.hasFinishedRequests();
  }

  /** Statistics of the last step (null before the first). */
  get stats(): StepStats | null {
    return this.lastStepStats;
  }

  /**
   * One engine step: schedule, execute, update, detokenize.
   * @returns outputs of the requests that progressed (per their output kind).
   * @throws Error when called while a step is running, or the worker failed.
   */
  async step(): Promise<RequestOutput[]> {
    if (this.stepping) throw new Error("LLMEngine.step() is already running");
    this.stepping = true;
    try {
      const so = this.scheduler.schedule();
      const t = now();
      for (const n of so.scheduledNewReqs) this.processor.markScheduled(n.reqId, t);
      const mro = await this.executor.executeModel(so);
      const coreOutputs = this.scheduler.updateFromOutput(so, mro);
      const { requestOutputs, stopHits } = this.processor.process(coreOutputs, now());
      if (stopHits.length > 0) {
        this.scheduler.finishRequests(
          stopHits.map((h) => asRequestId(h.requestId)),
          RequestStatus.FINISHED_STOPPED,
        );
      }
      this.lastStepStats = this.makeStepStats(
        so,
        coreOutputs.reduce((a, o) => a + o.newTokenIds.length, 0),
      );
      return requestOutputs;
    } finally {
      this.stepping = false;
    }
  }

  private makeStepStats(so: SchedulerOutput, numGenerationTokens: number): StepStats {
    let numPromptTokens = 0;
    for (const n of so.scheduledNewReqs) numPromptTokens += so.numScheduledTokens.get(n.reqId) ?? 0;
    return {
      numScheduledTokens: so.totalNumScheduledTokens,
      numPromptTokens,
      numGenerationTokens,
      scheduler: this.scheduler.makeStats(),
      ...(this.hisparse === null ? {} : { hisparse: this.hisparse.stats() }),
    };
  }

  /** Stops the worker and frees every resource. */
  async shutdown(): Promise<void> {
    await this.executor.shutdown();
  }
}

/** The executor the args ask for: one rank per worker thread under tensor parallelism, else one worker. */
function executorFor(args: EngineArgs): Executor {
  const threads =
    (args.distributedExecutorBackend ?? (args.tensorParallelSize > 1 ? "threads" : "uni")) === "threads";
  if (threads) return new TensorParallelExecutor(args.tensorParallelSize);
  return args.inprocWorker ? new InprocExecutor() : new ThreadExecutor();
}

/**
 * The scheduler side of HiSparse for the pools the worker sized, or null when HiSparse is off
 * (core/hisparse: HybridKVCacheManager, HybridPolicy, the "hisparse" extension).
 */
function hisparseSchedulingFor(args: EngineArgs, info: WorkerInfo): HiSparseScheduling | null {
  const config = hisparseConfigOf(args.extensions);
  if (config === null || info.hisparse === null) return null;
  // A DSA model's settings are derived from the user's by the worker (config/hisparse_dsa.ts).
  return createHiSparseScheduling(info.hisparse.config ?? config, {
    blockSize: info.blockSize,
    numGpuBlocks: info.numGpuBlocks,
    numHostBlocks: info.hisparse.numHostBlocks,
    enablePrefixCaching: args.enablePrefixCaching,
    prefillReadsHostTier: info.hisparse.prefillReadsHostTier ?? false,
    maxNumBatchedTokens: schedulerConfigOf(args, info.maxModelLen).maxNumBatchedTokens,
  });
}

export type { RequestId };
