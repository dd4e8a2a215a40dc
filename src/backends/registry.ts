import type { EngineArgs } from "../config/engine_args.js";
import { ConfigError } from "../config/engine_args.js";
import type { Backend } from "./backend.js";
import type { CommunicatorRendezvous, DeviceCommunicator } from "./collectives.js";
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
 * loads and a GPU is present, else CPU). The CUDA module is imported only when used. `rank`
 * (tensor parallelism): CUDA rank i runs on device i; CPU ranks run one thread each unless
 * `--cpu-threads` says otherwise (the ranks are the parallelism). `sizes.workspaceBytes`: the CUDA
 * step workspace (config/activation_bytes.ts stepWorkspaceBytes; the backend's default when absent).
 * @throws ConfigError when "cuda" is asked for but unavailable (the reason says why), or when
 *   `--tensor-parallel-size` exceeds the GPUs present.
 */
export async function createBackend(
  args: EngineArgs,
  rank = 0,
  sizes: { workspaceBytes?: number } = {},
): Promise<Backend> {
  const tp = args.tensorParallelSize ?? 1;
  if (args.device !== "cpu") {
    const { detectCuda } = await import("./detect.js");
    const cuda = detectCuda();
    if (cuda.available) {
      if (tp > cuda.deviceCount)
        throw new ConfigError([
          `--tensor-parallel-size ${tp} needs ${tp} GPUs, but ${cuda.deviceCount} ${cuda.deviceCount === 1 ? "is" : "are"} present`,
        ]);
      const { CudaBackend } = await import("./cuda/cuda_backend.js");
      return new CudaBackend({ device: rank, ...sizes });
    }
    if (args.device === "cuda") throw new ConfigError([`--device cuda is not available: ${cuda.reason}`]);
  }
  const { CpuBackend } = await import("./cpu/cpu_backend.js");
  return new CpuBackend({ numThreads: args.cpuThreads ?? (tp > 1 ? 1 : undefined) });
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

/**
 * The communicator of one tensor-parallel rank on `backend`: CPU ranks exchange through the
 * rendezvous buffer (cpu/cpu_communicator.ts); CUDA ranks through NCCL (cuda/nccl_communicator.ts:
 * rank 0 makes the unique id and publishes it in the rendezvous, every rank joins with
 * ncclCommInitRank). Every rank must call it at about the same time (it blocks until all have).
 * @throws ConfigError when NCCL cannot be loaded (one sentence).
 */
export async function createCommunicator(
  backend: Backend,
  rv: CommunicatorRendezvous,
  rank: number,
): Promise<DeviceCommunicator> {
  const cpu = backendOfKind(backend, "cpu");
  if (cpu !== null) {
    const { CpuCommunicator } = await import("./cpu/cpu_communicator.js");
    return new CpuCommunicator(cpu, rv, rank);
  }
  const cuda = backendOfKind(backend, "cuda")!;
  const { NcclCommunicator } = await import("./cuda/nccl_communicator.js");
  return NcclCommunicator.create(cuda, rv, rank);
}
