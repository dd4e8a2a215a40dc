/**
 * CudaBackend's construction options, the pinned host memory and memory statistics types it hands
 * out (re-exported from cuda_backend.ts), and the device and native resources it creates from
 * the options.
 */
import type {
  AllocatorStats,
  DeviceProperties,
  HisparseNative,
  NativeBlas,
  NativeDeviceAllocator,
  NativePinnedBuffer,
  NativeStream,
} from "./addon.js";
import { CudaGraphs } from "./graphs.js";
import { HostStaging, type UploadConversion } from "./host_io.js";
import { StepWorkspace } from "./step_workspace.js";
import type { WeightStreamOptions } from "./weight_stream.js";

const MiB = 2 ** 20;

/** Page-locked host memory mapped into the device address space (the addon's PinnedBuffer). */
export type PinnedHostMemory = NativePinnedBuffer;

/** Construction options of CudaBackend (sizes in bytes). */
export interface CudaBackendOptions {
  /** CUDA device ordinal (default 0). */
  device?: number;
  /** Step workspace: holds every op output of one step (default 2 GiB). */
  workspaceBytes?: number;
  /** Each of the pinned upload and readback buffers, and the device scratch of uploads (default 64 MiB). */
  stagingBytes?: number;
  /** cuBLAS / cuBLASLt workspace (default 32 MiB). */
  blasWorkspaceBytes?: number;
  /** GEMM path: cuBLASLt with fused bias (default) or cublasGemmEx + bias kernel. */
  gemm?: "lt" | "gemmex";
  /** Cache freed device blocks (default true); false helps compute-sanitizer find overruns. */
  cachingAllocator?: boolean;
  /** Addon file (default: see addon.ts defaultAddonPath). */
  addonPath?: string;
  /** An already loaded addon object (takes precedence over addonPath; tests inject doubles here). */
  addon?: HisparseNative;
  /**
   * Debug: give every workspace tensor its own exact-size allocation, freed at resetWorkspace(),
   * so that compute-sanitizer memcheck sees the bounds of each op output. Slow; graph capture
   * and workspaceScope's release are unavailable in this mode. Use with cachingAllocator: false.
   */
  exactWorkspace?: boolean;
  /**
   * Checkpoint streaming (Backend.loadWeightFiles, weight_stream.ts): pinned buffers in the ring
   * (default 8), bytes of each (default 32 MiB, at most stagingBytes) and reader threads (default 8).
   */
  weightStreaming?: Partial<WeightStreamOptions>;
  /**
   * MoE layers: fuse silu_and_mul into the gate_up grouped GEMM (default true; bitwise the same
   * result, one launch fewer per layer). false runs the pair unfused (benchmarks compare).
   */
  moeFusedActivation?: boolean;
  /**
   * MoE layers of up to this many tokens take the small-batch path (native/kernels/moe_decode.h;
   * default moe_ops.ts DEFAULT_SMALL_BATCH_MAX_TOKENS, at most 16; 0: always the grouped path).
   */
  moeSmallBatchMaxTokens?: number;
  /**
   * `linear` with at most this many rows runs the skinny GEMM of native/kernels/gemv.h instead
   * of cuBLAS (decode at small batch: full HBM bandwidth, no split-K reduce), and
   * `linearSiluAndMul` fuses the activation into it. 0 = always cuBLAS (the old path, for
   * comparison). Default: $HISPARSE_DENSE_GEMV_MAX_TOKENS when set, else
   * DEFAULT_DENSE_GEMV_MAX_TOKENS; at most GEMV_MAX_TOKENS (16).
   */
  denseGemvMaxTokens?: number;
}

/**
 * Default row limit of the skinny GEMM: at 8 rows it still reads the weights at close to full
 * bandwidth on the H200 (scripts/gpu/dense_b1_bench.sh, bench/gemv_bench.ts measure it).
 */
export const DEFAULT_DENSE_GEMV_MAX_TOKENS = 8;

/**
 * options.denseGemvMaxTokens, else $HISPARSE_DENSE_GEMV_MAX_TOKENS, else the default.
 * @throws Error when the value is not an integer in [0, 16].
 */
export function denseGemvMaxTokensOf(options: CudaBackendOptions): number {
  const env = process.env.HISPARSE_DENSE_GEMV_MAX_TOKENS;
  const v =
    options.denseGemvMaxTokens ??
    (env !== undefined && env !== "" ? Number(env) : DEFAULT_DENSE_GEMV_MAX_TOKENS);
  if (!Number.isInteger(v) || v < 0 || v > 16)
    throw new Error(`denseGemvMaxTokens must be an integer in [0, 16], got ${v}`);
  return v;
}

/** CudaBackend.memoryStats(): the caching allocator's counters plus the step workspace's (bytes). */
export type CudaMemoryStats = AllocatorStats & {
  workspaceCapacity: number;
  workspaceUsed: number;
  workspacePeak: number;
};

/** The device a CudaBackend runs on and the native resources it owns. */
export interface CudaResources {
  /** CUDA device ordinal, made current. */
  device: number;
  properties: DeviceProperties;
  blas: NativeBlas;
  allocator: NativeDeviceAllocator;
  /** The backend's one non-blocking stream. */
  stream: NativeStream;
  workspace: StepWorkspace;
  staging: HostStaging;
  /** Converting uploads through the staging buffers and a device scratch of stagingBytes. */
  upload: UploadConversion;
  /** Graph capture on the stream, over the step workspace. */
  graphs: CudaGraphs;
}

/**
 * Selects the device (options.device, default 0) and creates the backend's resources from the
 * options (defaults: staging 64 MiB, cuBLAS workspace 32 MiB, step workspace 2 GiB, GEMM "lt",
 * caching allocator on). cuBLAS comes first, so nothing is held when it cannot be loaded; on a
 * later failure everything made so far is freed.
 * @throws Error when no CUDA device is usable, the device does not exist, cuBLAS cannot be
 *   loaded or a buffer cannot be allocated.
 */
export function createCudaResources(addon: HisparseNative, options: CudaBackendOptions): CudaResources {
  const probe = addon.probe();
  if (!probe.ok) throw new Error(`no usable CUDA device: ${probe.error || "no device found"}`);
  const device = options.device ?? 0;
  if (device < 0 || device >= probe.deviceCount) {
    throw new Error(`CUDA device ${device} does not exist (${probe.deviceCount} present)`);
  }
  addon.setDevice(device);
  const properties = addon.deviceProperties(device);
  const stagingBytes = options.stagingBytes ?? 64 * MiB;
  // cuBLAS first (no memory held yet if it cannot be loaded); on a later failure, free what exists.
  const blas = new addon.Blas({
    workspaceBytes: options.blasWorkspaceBytes ?? 32 * MiB,
    mode: options.gemm ?? "lt",
  });
  const allocator = new addon.DeviceAllocator({ caching: options.cachingAllocator ?? true });
  const stream = new addon.Stream({ nonBlocking: true });
  let workspace: StepWorkspace | null = null;
  let staging: HostStaging | null = null;
  let upload: UploadConversion;
  try {
    workspace = new StepWorkspace(
      addon,
      options.workspaceBytes ?? 2048 * MiB,
      allocator,
      options.exactWorkspace ?? false,
      () => stream.synchronize(),
    );
    staging = new HostStaging(addon, stagingBytes, stream.handle);
    upload = {
      addon,
      staging,
      stream: stream.handle,
      scratchBytes: stagingBytes,
      scratch: allocator.malloc(stagingBytes),
    };
  } catch (err) {
    staging?.dispose();
    workspace?.dispose();
    blas.dispose();
    allocator.dispose();
    stream.dispose();
    throw err;
  }
  const ws = workspace; // narrowed: the closures below need a const
  const graphs = new CudaGraphs({
    addon,
    stream: stream.handle,
    workspaceUsed: () => ws.used,
    markWorkspaceUsed: (bytes) => ws.markUsed(bytes),
    workspaceGeneration: () => ws.generation,
    setCaptureLog: (log) => ws.setCaptureLog(log),
  });
  return { device, properties, blas, allocator, stream, workspace: ws, staging, upload, graphs };
}

/** Runs every release step even if one throws; rethrows the first error afterwards. */
export function releaseAll(steps: readonly (() => void)[]): void {
  let first: unknown = null;
  for (const step of steps) {
    try {
      step();
    } catch (err) {
      first ??= err;
    }
  }
  if (first !== null) throw first;
}
