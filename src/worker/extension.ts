import type { AttentionMetadata } from "../backends/backend.js";
import type { SchedulerOutput } from "../core/sched/output.js";
import type { PreparedInputs } from "./input_batch.js";

/**
 * The worker half of an optional feature (the scheduler half is a SchedulerExtension with the
 * same `name`): it reads its data from `SchedulerOutput.extensions[name]`, gives its attention
 * backend per-step metadata through `AttentionMetadata.extensions[name]`, and answers in
 * `ModelRunnerOutput.extensions[name]`. Every method is optional; ModelRunner calls them in the
 * order listed.
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
   * here live until the step ends).
   * @returns metadata stored as `meta.extensions.get(name)`; undefined stores nothing.
   */
  prepareForward?(so: SchedulerOutput, inputs: PreparedInputs, meta: AttentionMetadata): unknown;
  /**
   * After the forward (not called when nothing was scheduled).
   * @returns data stored as `modelRunnerOutput.extensions.get(name)`; undefined stores nothing.
   */
  afterForward?(so: SchedulerOutput): unknown;
}
