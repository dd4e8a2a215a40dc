import type { AttentionMetadata } from "../backends/backend.js";
import type { ExtensionData } from "../core/extension_data.js";
import type { SchedulerOutput } from "../core/sched/output.js";
import type { PreparedInputs } from "./input_batch.js";

/**
 * The worker half of an optional feature (the scheduler half is a SchedulerExtension with the
 * same `name`): it reads its entry of `SchedulerOutput.extensions`, gives its attention backend
 * per-step metadata as an entry of `AttentionMetadata.extensions`, and answers with an entry of
 * `ModelRunnerOutput.extensions`, each through the feature's own ExtensionKey (typed: readers
 * need no casts). Every method is optional; ModelRunner calls them in the order listed.
 */
export interface WorkerExtension {
  readonly name: string;
  /**
   * Every step, after the runner updated its request states (also when nothing is scheduled):
   * apply the step's plan (finished and preempted requests, table changes).
   */
  applySchedulerOutput?(so: SchedulerOutput): void;
  /**
   * Before the forward, once the step's inputs and metadata are staged (workspace tensors made
   * here live until the step ends): adds the feature's entry to `out`, the step's
   * `meta.extensions`.
   */
  prepareForward?(
    so: SchedulerOutput,
    inputs: PreparedInputs,
    meta: AttentionMetadata,
    out: ExtensionData,
  ): void;
  /**
   * After the forward (not called when nothing was scheduled): adds the feature's answer to
   * `out`, the step's `ModelRunnerOutput.extensions` (plain data: it may cross threads).
   */
  afterForward?(so: SchedulerOutput, out: ExtensionData): void;
  /**
   * Optional: lets decode steps run by this feature replay from CUDA graphs (CudaGraphRunner).
   * Without it, steps with this extension always run eagerly.
   */
  readonly graph?: ExtensionGraphHooks;
  /** Optional: releases what the extension holds (device tables, pinned memory, streams). */
  dispose?(): void;
}

/** How a feature takes part in graph-captured decode steps. */
export interface ExtensionGraphHooks {
  /**
   * The graph variant of this decode step (steps of one batch bucket with different variants
   * replay different graphs, e.g. "dense" and "sparse"), or null to run the step eagerly.
   */
  variant(so: SchedulerOutput, inputs: PreparedInputs): string | null;
  /**
   * Creates the persistent state of one (bucket size, variant). `base` is the bucket's metadata
   * (its tensors persist; rows past the step's requests are padding).
   */
  createBucket(size: number, variant: string, base: AttentionMetadata): ExtensionGraphBucket;
}

/** One bucket's persistent state of a feature: metadata whose tensors every replay reads. */
export interface ExtensionGraphBucket {
  /**
   * Adds the bucket's entry (metadata over its persistent tensors, which every replay reads) to
   * `out`, the recorded forward's `meta.extensions`.
   */
  addTo(out: ExtensionData): void;
  /** Writes the step's inputs into the bucket's tensors; called before each replay (never while capturing). */
  write(so: SchedulerOutput, inputs: PreparedInputs): void;
  /** Recorded into the graph before the model's layers (device ops deriving per-step tables). */
  beginForward?(): void;
  /**
   * Save and restore device state that a forward changes, around the eager warm-up run that
   * precedes capture (the replay that follows must start from the same state).
   */
  saveState?(): void;
  restoreState?(): void;
  /** Frees the bucket's tensors. */
  dispose(): void;
}
