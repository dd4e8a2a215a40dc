/**
 * What the engine's tensor-parallel executor needs of the workers' groups (vLLM's
 * parallel_state): the rendezvous the ranks build their communicators from (its layout is the
 * collectives', backends/collectives.ts), and the shape check made before any rank starts.
 */
import { ConfigError, type EngineArgs } from "../config/engine_args.js";
import { loadModelConfig } from "../config/model_config.js";
import { tensorParallelReasons } from "../core/tensor_parallel.js";
import { resolveModelDir } from "../models/registry.js";

export { type CommunicatorRendezvous, createRendezvous } from "../backends/collectives.js";

/**
 * Refuses, on the calling thread and before any rank thread starts, a model that cannot be
 * split over `args.tensorParallelSize` ranks (core/tensor_parallel.ts; every rank checks again
 * when it loads).
 * @throws ConfigError with the reasons; ModelConfigError when config.json cannot be read.
 */
export function checkTensorParallelShapes(args: EngineArgs): void {
  const reasons = tensorParallelReasons(
    loadModelConfig(resolveModelDir(args.model)),
    args.tensorParallelSize,
  );
  if (reasons.length > 0) throw new ConfigError(reasons);
}
