import { type AttentionBackend, DensePagedAttention } from "../attention/backend.js";
import type { AttentionMetadata, Backend, Tensor } from "../backends/backend.js";
import type { RequestId } from "../core/ids.js";
import type { ModelRunnerOutput, SchedulerOutput, TokenLogprobs } from "../core/sched/output.js";
import type { LlamaForCausalLM } from "../models/llama.js";
import { CudaGraphRunner, graphStepExtensions } from "./cuda_graph_runner.js";
import type { WorkerExtension } from "./extension.js";
import { type CachedRequestState, type PreparedInputs, prepareInputs, updateStates } from "./input_batch.js";
import { RequestSampler } from "./request_sampler.js";

/** Settings of a ModelRunner. */
export interface ModelRunnerOptions {
  /** Seed of the engine-level sampling generator. */
  seed: number;
  /** Disable CUDA graphs. */
  enforceEager: boolean;
  maxModelLen: number;
  maxNumSeqs: number;
}

/**
 * Turns a SchedulerOutput into one model forward and sampled tokens
 * (vllm/v1/worker/gpu_model_runner.py): keeps the worker-side request states, builds the flat
 * inputs and attention metadata, runs the model, samples, and appends sampled tokens to its
 * states.
 */
export class ModelRunner {
  private readonly states = new Map<RequestId, CachedRequestState>();
  private readonly sampler: RequestSampler;
  /** How attention uses the KV cache; replaceable by optional features (HiSparse). */
  attention: AttentionBackend;
  /** The worker halves of optional features (HiSparse), called around each step. */
  readonly extensions: WorkerExtension[] = [];

  /** Replays decode steps from CUDA graphs (null: eager, e.g. CPU or --enforce-eager). */
  private readonly graphRunner: CudaGraphRunner | null;

  constructor(
    private readonly backend: Backend,
    private readonly model: LlamaForCausalLM,
    private readonly kvCaches: readonly Tensor[],
    readonly blockSize: number,
    opts: ModelRunnerOptions,
  ) {
    this.attention = new DensePagedAttention(backend, model.layout, blockSize);
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
          );
  }

  /** Frees graph resources and what the extensions hold. */
  dispose(): void {
    this.graphRunner?.dispose();
    for (const ext of this.extensions) ext.dispose?.();
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
    const out: ModelRunnerOutput = { reqIds: [], sampledTokenIds: [], logprobs: [], extensions: new Map() };
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
    for (const ext of this.extensions) {
      const data = ext.afterForward?.(so);
      if (data !== undefined) out.extensions.set(ext.name, data);
    }
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
    const numReqs = inputs.reqIds.length;
    const meta: AttentionMetadata = {
      numReqs,
      numTokens: T,
      queryStartLoc: b.stage(inputs.queryStartLoc, [numReqs + 1], "i32"),
      seqLens: b.stage(inputs.seqLens, [numReqs], "i32"),
      blockTables: b.stage(inputs.blockTables, [numReqs, inputs.maxBlocksPerReq], "i32"),
      slotMapping: b.stage(inputs.slotMapping, [T], "i32"),
      maxQueryLen: inputs.maxQueryLen,
      maxSeqLen: inputs.maxSeqLen,
      host: {
        queryStartLoc: inputs.queryStartLoc,
        seqLens: inputs.seqLens,
        blockTables: inputs.blockTables,
        maxBlocksPerReq: inputs.maxBlocksPerReq,
        slotMapping: inputs.slotMapping,
        positions: inputs.positions,
      },
    };
    if (this.extensions.length > 0) {
      const perFeature = new Map<string, unknown>();
      for (const ext of this.extensions) {
        const data = ext.prepareForward?.(so, inputs, meta);
        if (data !== undefined) perFeature.set(ext.name, data);
      }
      meta.extensions = perFeature;
    }
    const ids = b.stage(inputs.inputIds, [T], "i32");
    const pos = b.stage(inputs.positions, [T], "i32");
    const B = inputs.logitsIndices.length;
    const logitsIdx = B === 0 ? null : b.stage(inputs.logitsIndices, [B], "i32");
    return this.model.forward(
      ids,
      pos,
      { meta, attention: this.attention, kvCaches: this.kvCaches },
      logitsIdx,
    );
  }
}
