import type { AttentionBackend } from "../attention/backend.js";
import type { AttentionMetadata, Backend, BackendGraphs, GraphHandle, Tensor } from "../backends/backend.js";
import { newExtensionData } from "../core/extension_data.js";
import { PAD_SLOT_ID } from "../core/ids.js";
import type { SchedulerOutput } from "../core/sched/output.js";
import type { ForwardContext } from "../models/blocks.js";
import type { LlamaForCausalLM } from "../models/llama.js";
import type { ExtensionGraphBucket, WorkerExtension } from "./extension.js";
import type { PreparedInputs } from "./input_batch.js";

/**
 * Batch sizes with a captured decode graph: 1, 2, 4, then multiples of 8 (vLLM's default
 * cudagraph capture sizes), up to `maxNumSeqs`.
 */
export function captureSizes(maxNumSeqs: number): number[] {
  const limit = Math.min(maxNumSeqs, MAX_CAPTURE_SIZE);
  const sizes: number[] = [];
  for (let b = 1; sizes.length === 0 || sizes.at(-1)! < limit; b = b < 8 ? b * 2 : b + 8) sizes.push(b);
  return sizes;
}

/** Largest captured batch (vLLM's default max_cudagraph_capture_size); bigger batches run eagerly. */
export const MAX_CAPTURE_SIZE = 512;

/** Static inputs and the captured graph of one batch-size bucket. */
interface Bucket {
  size: number;
  inputIds: Tensor; // i32 [b]
  positions: Tensor; // i32 [b]
  slotMapping: Tensor; // i32 [b]
  queryStartLoc: Tensor; // i32 [b + 1]
  seqLens: Tensor; // i32 [b]
  blockTables: Tensor; // i32 [b, maxBlocksPerReq]
  logitsIndices: Tensor; // i32 [b]
  graph: GraphHandle | null;
  /** The logits tensor the captured forward returned: f32 [b, V], valid after each replay. */
  logits: Tensor | null;
  /** Per-bucket state of the features taking part (name -> state), in extension order. */
  ext: Map<string, ExtensionGraphBucket>;
}

/** The features of a step that replays from a graph, each with the variant it asks for. */
/** The MLA fields of a step's ForwardContext (empty for GQA models). */
export type MlaForwardContext = Pick<ForwardContext, "mlaAttention" | "indexerKeyCaches">;

export interface GraphStepExtensions {
  so: SchedulerOutput;
  items: { ext: WorkerExtension; variant: string }[];
}

/**
 * The graph variants of a step: one per extension (each must have graph hooks and accept the
 * step), or null when the step must run eagerly.
 */
export function graphStepExtensions(
  extensions: readonly WorkerExtension[],
  so: SchedulerOutput,
  inputs: PreparedInputs,
): GraphStepExtensions | null {
  const items: GraphStepExtensions["items"] = [];
  for (const ext of extensions) {
    const variant = ext.graph?.variant(so, inputs) ?? null;
    if (variant === null) return null;
    items.push({ ext, variant });
  }
  return { so, items };
}

/**
 * Decode steps replayed from CUDA graphs (vLLM's CUDAGraphRunner): for a pure decode batch
 * (one new token per request, every request sampling) the runner pads the batch to the next
 * capture size, writes the inputs into that bucket's persistent tensors and replays the graph
 * captured for it, so a step costs one launch instead of hundreds. Padded rows have slot
 * PAD_SLOT_ID and seqLen 0, which every kernel treats as no-ops. Block tables have the static
 * width ceil(maxModelLen / blockSize), so kernel grids do not depend on per-step lengths.
 * Each bucket is captured on its first use, after one eager warm-up run.
 */
export class CudaGraphRunner {
  private readonly sizes: number[];
  /** Buckets by key: size, then each feature's variant ("16", "16|hisparse:sparse"). */
  private readonly buckets = new Map<string, Bucket>();
  readonly maxBlocksPerReq: number;

  constructor(
    private readonly backend: Backend,
    private readonly graphs: BackendGraphs,
    private readonly model: LlamaForCausalLM,
    private readonly kvCaches: readonly Tensor[],
    private readonly attention: () => AttentionBackend,
    private readonly blockSize: number,
    maxModelLen: number,
    maxNumSeqs: number,
    /** An MLA model's attention side (ForwardContext mlaAttention, indexerKeyCaches); {} otherwise. */
    private readonly mla: () => MlaForwardContext = () => ({}),
  ) {
    this.sizes = captureSizes(maxNumSeqs);
    this.maxBlocksPerReq = Math.ceil(maxModelLen / blockSize);
  }

  /** Largest batch the runner replays. */
  get maxBatchSize(): number {
    return this.sizes.at(-1) ?? 0;
  }

  /** True when the step is a pure decode batch this runner can replay. */
  canRun(inputs: PreparedInputs): boolean {
    const n = inputs.reqIds.length;
    return (
      n > 0 &&
      n <= this.maxBatchSize &&
      inputs.inputIds.length === n &&
      inputs.maxQueryLen === 1 &&
      inputs.logitsIndices.length === n &&
      inputs.maxBlocksPerReq <= this.maxBlocksPerReq
    );
  }

  /**
   * Runs the decode step through its bucket's graph (capturing it first if needed). Features
   * (`ext`) get their own persistent state per bucket and variant; a bucket's graph is keyed by
   * its size and the variants.
   * @returns logits f32 [bucketSize, V]; rows past `inputs.reqIds.length` are padding.
   */
  run(inputs: PreparedInputs, ext: GraphStepExtensions | null = null): Tensor {
    const n = inputs.reqIds.length;
    const size = this.sizes.find((s) => s >= n)!;
    const items = ext?.items ?? [];
    const key = [String(size), ...items.map((i) => `${i.ext.name}:${i.variant}`)].join("|");
    const bucket = this.buckets.get(key) ?? this.createBucket(size, key, items);
    this.writeInputs(bucket, inputs);
    for (const st of bucket.ext.values()) st.write(ext!.so, inputs);
    if (bucket.graph === null) {
      // Warm up eagerly (cuBLASLt plans, kernel attributes), then capture; features restore the
      // device state the warm-up changed, so that the replay below computes this step once.
      this.backend.resetWorkspace();
      for (const st of bucket.ext.values()) st.saveState?.();
      this.forward(bucket);
      for (const st of bucket.ext.values()) st.restoreState?.();
      this.backend.resetWorkspace();
      bucket.graph = this.graphs.capture(() => {
        bucket.logits = this.forward(bucket);
      });
    }
    this.backend.resetWorkspace();
    this.graphs.replay(bucket.graph);
    return bucket.logits!;
  }

  private forward(b: Bucket): Tensor {
    const meta = this.bucketMeta(b);
    if (b.ext.size > 0) {
      const perFeature = newExtensionData();
      for (const st of b.ext.values()) st.addTo(perFeature);
      meta.extensions = perFeature;
      for (const st of b.ext.values()) st.beginForward?.();
    }
    return this.model.forward(
      b.inputIds,
      b.positions,
      { meta, attention: this.attention(), kvCaches: this.kvCaches, ...this.mla() },
      b.logitsIndices,
    );
  }

  /** The bucket's attention metadata over its persistent tensors. */
  private bucketMeta(b: Bucket): AttentionMetadata {
    const size = b.size;
    return {
      numReqs: size,
      numTokens: size,
      queryStartLoc: b.queryStartLoc,
      seqLens: b.seqLens,
      blockTables: b.blockTables,
      slotMapping: b.slotMapping,
      maxQueryLen: 1,
      maxSeqLen: this.maxBlocksPerReq * this.blockSize, // the static bound: every length fits the table
      // Host copies are not read by the CUDA kernels; a captured graph cannot depend on them.
      host: {
        queryStartLoc: new Int32Array(0),
        seqLens: new Int32Array(0),
        blockTables: new Int32Array(0),
        maxBlocksPerReq: this.maxBlocksPerReq,
        slotMapping: new Int32Array(0),
        positions: new Int32Array(0),
      },
    };
  }

  private createBucket(size: number, key: string, items: GraphStepExtensions["items"]): Bucket {
    const up = (shape: number[]) =>
      this.backend.upload(new Int32Array(shape.reduce((a, x) => a * x, 1)), shape, "i32");
    const bucket: Bucket = {
      size,
      inputIds: up([size]),
      positions: up([size]),
      slotMapping: up([size]),
      queryStartLoc: up([size + 1]),
      seqLens: up([size]),
      blockTables: up([size, this.maxBlocksPerReq]),
      logitsIndices: up([size]),
      graph: null,
      logits: null,
      ext: new Map(),
    };
    this.backend.writeTensor(
      bucket.logitsIndices,
      Int32Array.from({ length: size }, (_, i) => i),
    );
    const base = this.bucketMeta(bucket);
    for (const { ext, variant } of items)
      bucket.ext.set(ext.name, ext.graph!.createBucket(size, variant, base));
    this.buckets.set(key, bucket);
    return bucket;
  }

  /** Writes the step's inputs, padded to the bucket size, into the bucket's tensors. */
  private writeInputs(b: Bucket, inputs: PreparedInputs): void {
    const n = inputs.reqIds.length;
    const size = b.size;
    const W = this.maxBlocksPerReq;
    const pad = (src: Int32Array, fill: number) => {
      const out = new Int32Array(size).fill(fill);
      out.set(src.subarray(0, n));
      return out;
    };
    const qsl = new Int32Array(size + 1);
    for (let i = 0; i <= size; i++) qsl[i] = Math.min(i, size);
    const tables = new Int32Array(size * W);
    const srcW = inputs.maxBlocksPerReq;
    for (let r = 0; r < n; r++) {
      tables.set(inputs.blockTables.subarray(r * srcW, (r + 1) * srcW), r * W);
    }
    const be = this.backend;
    be.writeTensor(b.inputIds, pad(inputs.inputIds, 0));
    be.writeTensor(b.positions, pad(inputs.positions, 0));
    be.writeTensor(b.slotMapping, pad(inputs.slotMapping, PAD_SLOT_ID));
    be.writeTensor(b.queryStartLoc, qsl);
    be.writeTensor(b.seqLens, pad(inputs.seqLens, 0));
    be.writeTensor(b.blockTables, tables);
  }

  /** Frees the graphs and the static tensors. */
  dispose(): void {
    for (const b of this.buckets.values()) {
      if (b.graph !== null) this.graphs.dispose(b.graph);
      for (const st of b.ext.values()) st.dispose();
      for (const t of [
        b.inputIds,
        b.positions,
        b.slotMapping,
        b.queryStartLoc,
        b.seqLens,
        b.blockTables,
        b.logitsIndices,
      ]) {
        this.backend.free(t);
      }
    }
    this.buckets.clear();
  }
}
