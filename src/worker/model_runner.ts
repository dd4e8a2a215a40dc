import type { AttentionBackend } from "../attention/backend.js";
import type { MlaAttentionBackend } from "../attention/mla.js";
import type { AttentionMetadata, Backend, Tensor } from "../backends/backend.js";
import { newExtensionData } from "../core/extension_data.js";
import type { RequestId } from "../core/ids.js";
import type { ModelRunnerOutput, SchedulerOutput, TokenLogprobs } from "../core/sched/output.js";
import type { LlamaForCausalLM } from "../models/llama.js";
import { CudaGraphRunner, graphStepExtensions, type MlaForwardContext } from "./cuda_graph_runner.js";
import type { WorkerExtension } from "./extension.js";
import {
  type CachedRequestState,
  type PreparedInputs,
  prepareInputs,
  stageAttentionMetadata,
  updateStates,
} from "./input_batch.js";
import type { KVCacheSetup } from "./kv_cache_setup.js";
import { RequestSampler } from "./request_sampler.js";

/** Settings of a ModelRunner. */
export interface ModelRunnerOptions {
  /** Seed of the engine-level sampling generator. */
  seed: number;
  /** Disable CUDA graphs. */
  enforceEager: boolean;
  maxModelLen: number;
  maxNumSeqs: number;
  /**
   * Benchmarks only: a step with prefill tokens does not run the model; every layer's K/V (and
   * feature state such as HiSparse digests) is written from a fixed random qkv through
   * AttentionBackend.writeKv (MLA models: latent rows and DSA indexer keys through
   * MlaAttentionBackend.fillRows), and rows that sample get zero logits (token 0). Fills long contexts
   * in a fraction of a real prefill's time; the decode steps that follow run the real model.
   */
  fastPrefill?: boolean;
}

/** What the runner takes of a KV set-up (worker/kv_cache_setup.ts); it owns it from then on. */
export type ModelRunnerKV = Pick<
  KVCacheSetup,
  "blockSize" | "kvCaches" | "attention" | "mla" | "extensions" | "dispose"
>;

/**
 * Turns a SchedulerOutput into one model forward and sampled tokens
 * (vllm/v1/worker/gpu_model_runner.py): keeps the worker-side request states, builds the flat
 * inputs and attention metadata, runs the model, samples, and appends sampled tokens to its
 * states.
 */
export class ModelRunner {
  private readonly states = new Map<RequestId, CachedRequestState>();
  private readonly sampler: RequestSampler;
  /** How attention uses the KV cache (the set-up's: dense paged, HiSparse...). */
  readonly attention: AttentionBackend;
  /** MLA models: how the MLA layers use the latent (and indexer key) caches; null for GQA models. */
  readonly mlaAttention: MlaAttentionBackend | null;
  private readonly indexerKeyCaches: readonly (Tensor | null)[] | undefined;
  /** The worker halves of optional features (HiSparse), called around each step. */
  readonly extensions: readonly WorkerExtension[];
  /** [numLayers] each layer's KV cache tensor. */
  private readonly kvCaches: readonly Tensor[];
  /** Tokens per KV block. */
  readonly blockSize: number;
  /** ModelRunnerOptions.fastPrefill. */
  readonly fastPrefill: boolean;
  /** bf16 [rows, qkv width] random rows used by fastPrefill (grown on demand). */
  /** fastPrefill's random row tables, by row width. */
  private readonly fillRowTables = new Map<number, Tensor>();

  /** Replays decode steps from CUDA graphs (null: eager, e.g. CPU or --enforce-eager). */
  private readonly graphRunner: CudaGraphRunner | null;

  /**
   * @param kv the KV set-up (worker/kv_cache_registry.ts createKVCacheSetup): caches, attention
   *   backend and extensions, used as they are; freed by {@link dispose}.
   */
  constructor(
    private readonly backend: Backend,
    private readonly model: LlamaForCausalLM,
    private readonly kv: ModelRunnerKV,
    opts: ModelRunnerOptions,
  ) {
    const blockSize = kv.blockSize;
    const kvCaches = kv.kvCaches;
    this.blockSize = blockSize;
    this.kvCaches = kvCaches;
    this.attention = kv.attention;
    this.extensions = kv.extensions;
    this.fastPrefill = opts.fastPrefill ?? false;
    this.mlaAttention = kv.mla?.attention ?? null;
    this.indexerKeyCaches = kv.mla?.indexerKeyCaches;
    this.sampler = new RequestSampler(backend, model.config.vocabSize, model.config.eosTokenIds, opts.seed);
    this.graphRunner =
      backend.graphs === undefined || opts.enforceEager
        ? null
        : new CudaGraphRunner(
            backend,
            backend.graphs,
            model,
            kvCaches,
            () => this.attention,
            blockSize,
            opts.maxModelLen,
            opts.maxNumSeqs,
            () => this.mlaContext(),
          );
  }

  /**
   * Frees the captured decode graphs; the next decode steps capture them again. For benchmarks
   * that change a setting a graph holds as a kernel argument (bench/hisparse_throughput.ts
   * `--overlap`: CudaQuestSelector.setBenchSelectionOverlap).
   */
  dropGraphs(): void {
    this.graphRunner?.dispose();
  }

  /** Frees graph resources, then the KV set-up (what the extensions hold, the caches). */
  dispose(): void {
    this.graphRunner?.dispose();
    for (const t of this.fillRowTables.values()) this.backend.free(t);
    this.fillRowTables.clear();
    this.kv.dispose();
  }

  /**
   * fastPrefill's step: K/V of every token from random qkv rows (no attention, no MLP).
   * @returns zero logits f32 [B, V], or null when no row samples.
   * @throws Error when the attention backend cannot write K/V alone.
   */
  private fill(inputs: PreparedInputs, meta: AttentionMetadata): Tensor | null {
    const b = this.backend;
    const T = inputs.inputIds.length;
    const mla = this.model.config.mla;
    if (this.mlaAttention !== null && mla != null) {
      const fillRows = this.mlaAttention.fillRows?.bind(this.mlaAttention);
      if (fillRows === undefined) throw new Error("fastPrefill needs an MLA attention backend with fillRows");
      const latent = this.randomRows(T, mla.kvLoraRank + mla.qkRopeHeadDim);
      const keys = mla.indexer === null ? null : this.randomRows(T, mla.indexer.headDim);
      for (let l = 0; l < this.kvCaches.length; l++) {
        const keyCache = this.indexerKeyCaches?.[l] ?? null;
        fillRows(l, latent, keyCache === null ? null : keys, this.kvCaches[l]!, keyCache, meta);
      }
    } else {
      const attn = this.attention;
      if (attn.writeKv === undefined)
        throw new Error("fastPrefill needs an attention backend with writeKv (or an MLA model)");
      const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = this.model.layout;
      const qkv = this.randomRows(T, (Hq + 2 * Hkv) * D);
      for (let l = 0; l < this.kvCaches.length; l++) attn.writeKv(l, qkv, this.kvCaches[l]!, meta);
    }
    const B = inputs.logitsIndices.length;
    return B === 0
      ? null
      : b.stage(new Float32Array(B * this.model.config.vocabSize), [B, this.model.config.vocabSize], "f32");
  }

  /** T rows of W fixed uniform [-1, 1) bf16 values (fastPrefill's K/V or latent rows), from a table kept per width. */
  private randomRows(T: number, W: number): Tensor {
    const b = this.backend;
    let table = this.fillRowTables.get(W);
    if (table === undefined || (table.shape[0] ?? 0) < T) {
      if (table !== undefined) b.free(table);
      const rows = Math.max(T, 2048);
      const data = new Float32Array(rows * W);
      let x = 0x9e3779b9;
      for (let i = 0; i < data.length; i++) {
        x = (Math.imul(x ^ (x >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) | 0;
        data[i] = ((x >>> 8) / 2 ** 24 - 0.5) * 2; // uniform in [-1, 1)
      }
      table = b.upload(data, [rows, W], "bf16");
      this.fillRowTables.set(W, table);
    }
    return b.gatherRows(
      table,
      b.stage(
        Int32Array.from({ length: T }, (_, t) => t),
        [T],
        "i32",
      ),
    );
  }

  /** Number of requests whose state the runner holds. */
  get numRequests(): number {
    return this.states.size;
  }

  /**
   * Runs one step.
   * @throws Error when the SchedulerOutput is inconsistent with the runner's states.
   */
  executeModel(so: SchedulerOutput): ModelRunnerOutput {
    updateStates(this.states, so);
    for (const id of so.finishedReqIds) this.sampler.forget(id);
    for (const ext of this.extensions) ext.applySchedulerOutput?.(so);
    const out: ModelRunnerOutput = {
      reqIds: [],
      sampledTokenIds: [],
      logprobs: [],
      extensions: newExtensionData(),
    };
    if (so.totalNumScheduledTokens === 0) return out;
    const inputs = prepareInputs(this.states, so, this.blockSize);
    const logits = this.forward(inputs, so);
    out.reqIds = inputs.reqIds;
    out.sampledTokenIds = inputs.reqIds.map(() => []);
    out.logprobs = inputs.reqIds.map(() => null);
    if (logits !== null) {
      const rows = Array.from(inputs.logitsReqIdx, (r) => this.states.get(inputs.reqIds[r]!)!);
      const sampled = this.sampler.sample(logits, rows);
      for (let b = 0; b < rows.length; b++) {
        const r = inputs.logitsReqIdx[b]!;
        const token = sampled.tokenIds[b]!;
        rows[b]!.outputTokenIds.push(token);
        out.sampledTokenIds[r] = [token];
        const lp: TokenLogprobs | null = sampled.logprobs[b] ?? null;
        out.logprobs[r] = lp === null ? null : [lp];
      }
    }
    for (const ext of this.extensions) ext.afterForward?.(so, out.extensions);
    return out;
  }

  /**
   * Runs the model: a captured graph for pure decode batches when every extension takes part in
   * graphs (WorkerExtension.graph; HiSparse on CUDA does), else eagerly.
   * @returns logits [>= B, V] (a graph's padded rows follow the B real ones); null when no row samples
   */
  private forward(inputs: PreparedInputs, so: SchedulerOutput): Tensor | null {
    if (this.graphRunner?.canRun(inputs)) {
      const ext = graphStepExtensions(this.extensions, so, inputs);
      if (ext !== null) return this.graphRunner.run(inputs, ext);
    }
    const b = this.backend;
    b.resetWorkspace();
    const T = inputs.inputIds.length;
    const meta = stageAttentionMetadata(b, inputs);
    if (this.extensions.length > 0) {
      const perFeature = newExtensionData();
      for (const ext of this.extensions) ext.prepareForward?.(so, inputs, meta, perFeature);
      meta.extensions = perFeature;
    }
    if (this.fastPrefill && inputs.maxQueryLen > 1) return this.fill(inputs, meta);
    const ids = b.stage(inputs.inputIds, [T], "i32");
    const pos = b.stage(inputs.positions, [T], "i32");
    const B = inputs.logitsIndices.length;
    const logitsIdx = B === 0 ? null : b.stage(inputs.logitsIndices, [B], "i32");
    const ctx = { meta, attention: this.attention, kvCaches: this.kvCaches };
    return this.model.forward(ids, pos, { ...ctx, ...this.mlaContext() }, logitsIdx);
  }

  /** The MLA attention side of a step's forward context (eager and captured steps alike). */
  private mlaContext(): MlaForwardContext {
    return this.mlaAttention === null
      ? {}
      : { mlaAttention: this.mlaAttention, indexerKeyCaches: this.indexerKeyCaches };
  }
}
