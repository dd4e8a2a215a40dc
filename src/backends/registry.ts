import type { EngineArgs } from "../config/engine_args.js";
import { ConfigError } from "../config/engine_args.js";
import type { Backend } from "./backend.js";
import type { CpuBackend } from "./cpu/cpu_backend.js";
import type { CudaBackend } from "./cuda/cuda_backend.js";

/** The backend classes by `Backend.name` (each class declares its name as a literal). */
export interface BackendKinds {
  cpu: CpuBackend;
  cuda: CudaBackend;
}
export type BackendName = keyof BackendKinds;

/**
 * Creates the compute backend for `args.device`: "cpu", "cuda", or "auto" (CUDA when the addon
 * loads and a GPU is present, else CPU). The CUDA module is imported only when used.
 * @throws ConfigError when "cuda" is asked for but unavailable (the reason says why).
 */
export async function createBackend(args: EngineArgs): Promise<Backend> {
  if (args.device !== "cpu") {
    const { detectCuda } = await import("./detect.js");
    const cuda = detectCuda();
    if (cuda.available) {
      const { CudaBackend } = await import("./cuda/cuda_backend.js");
      return new CudaBackend();
    }
    if (args.device === "cuda") throw new ConfigError([`--device cuda is not available: ${cuda.reason}`]);
  }
  const { CpuBackend } = await import("./cpu/cpu_backend.js");
  return new CpuBackend({ numThreads: args.cpuThreads });
}

/**
 * The backend as its own class, for code written against one backend (the worker's KV
 * set-ups, worker/kv_cache_registry.ts): `backend` when its name is `name`, else null. Every
 * Backend implementation in this tree is the class its name maps to in {@link BackendKinds}, so
 * the name identifies the class without importing it (the CUDA module loads only when used).
 */
export function backendOfKind<N extends BackendName>(backend: Backend, name: N): BackendKinds[N] | null {
  return backend.name === name ? (backend as BackendKinds[N]) : null;
}
