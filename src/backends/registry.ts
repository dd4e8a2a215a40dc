import type { EngineArgs } from "../config/engine_args.js";
import { ConfigError } from "../config/engine_args.js";
import type { Backend } from "./backend.js";

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
