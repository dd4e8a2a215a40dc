/**
 * `CudaDevice`, the base of {@link CudaBackend} (cuda_backend.ts): the native resources one CUDA
 * backend owns (device, non-blocking stream, caching allocator, step workspace, pinned staging,
 * converting upload path, cuBLAS, graphs, the weight-write context) with their lifecycle
 * (synchronize, side streams, dispose, memory figures), and the checked access the op modules
 * launch through (`dev`, `out`, `scratch`, `sharedScratch`, `uploadBytes`, `downloadBytes`: the
 * plumbing half of CudaOpsContext / CudaAttentionContext). The Backend contract itself (tensor
 * and weight transfers, KV caches, ops) is CudaBackend's.
 */
import { DTYPE_BYTES, type DType, type MemoryInfo, type Tensor } from "../backend.js";
import {
  type DeviceProperties,
  type DevicePtr,
  type HisparseNative,
  loadAddon,
  type NativeBlas,
  type NativeDeviceAllocator,
  type NativeStream,
} from "./addon.js";
import {
  type CudaBackendOptions,
  type CudaMemoryStats,
  createCudaResources,
  releaseAll,
} from "./cuda_backend_setup.js";
import type { CudaGraphs } from "./graphs.js";
import { type HostStaging, type UploadConversion, writeConverted } from "./host_io.js";
import { SideStream } from "./side_stream.js";
import type { StepWorkspace } from "./step_workspace.js";
import { CudaTensor, numelOf } from "./tensor.js";
import * as weights from "./weights.js";

/**
 * The resources and op-context plumbing of a CUDA backend; only {@link CudaBackend} extends it.
 * Members its subclass uses are protected; the rest stay private.
 */
export abstract class CudaDevice {
  readonly addon: HisparseNative;
  readonly device: number;
  readonly properties: DeviceProperties;
  /** Human-readable device name (from cudaGetDeviceProperties). */
  get deviceName(): string {
    return this.properties.name;
  }
  readonly graphs: CudaGraphs;
  readonly blas: NativeBlas;
  protected readonly allocator: NativeDeviceAllocator;
  private readonly streamObj: NativeStream;
  protected readonly workspace: StepWorkspace;
  protected readonly staging: HostStaging;
  /** Converting uploads: staging buffers, stream, device scratch of stagingBytes. */
  private readonly uploadPath: UploadConversion;
  /** allocateWeight / writeWeight / fillWeight / loadWeightFiles (weights.ts). */
  protected readonly weightCtx: weights.WeightWriteContext;
  protected readonly fillTables: weights.DeviceFillTables;
  protected disposed = false;

  /** @throws Error when the addon is missing, no CUDA device is usable, or cuBLAS cannot be loaded. */
  constructor(options: CudaBackendOptions = {}) {
    this.addon = options.addon ?? loadAddon(options.addonPath);
    const r = createCudaResources(this.addon, options);
    this.device = r.device;
    this.properties = r.properties;
    this.blas = r.blas;
    this.allocator = r.allocator;
    this.streamObj = r.stream;
    this.workspace = r.workspace;
    this.staging = r.staging;
    this.uploadPath = r.upload;
    this.graphs = r.graphs;
    this.weightCtx = weights.weightWriteContext(
      this.addon,
      this.stream,
      r.allocator,
      r.upload,
      (dst, data, srcDtype, count) => this.writeConverted(dst, "bf16", data, srcDtype, count),
      options.weightStreaming,
    );
    this.fillTables = new weights.DeviceFillTables(this.weightCtx);
  }

  /** Handle of the backend's stream (for the ops modules and for KV transfer code). */
  get stream(): number {
    return this.streamObj.handle;
  }

  // ---- resources and lifecycle --------------------------------------------------------------------

  memoryInfo(): MemoryInfo {
    return this.addon.memGetInfo();
  }

  /** Counters of the caching allocator and the workspace (bytes). */
  memoryStats(): CudaMemoryStats {
    return {
      ...this.allocator.stats(),
      workspaceCapacity: this.workspace.capacity,
      workspaceUsed: this.workspace.used,
      workspacePeak: this.workspace.peak,
    };
  }

  /**
   * Debug aid: fills the free part of the step workspace with `byteValue` (0xff makes every f32,
   * bf16 and f16 element a NaN), so that a test catches an op that leaves part of its output
   * unwritten.
   */
  fillUnusedWorkspace(byteValue: number): void {
    this.workspace.fillUnused(byteValue, this.stream);
  }

  /** Waits for all work queued on the backend's stream. */
  synchronize(): void {
    this.streamObj.synchronize();
  }

  /** A second stream ordered against this backend's stream by events (eager copies; `numMarks` join points). */
  createSideStream(numMarks = 1): SideStream {
    return new SideStream(this.addon, this.stream, (e) => this.waitEvent(e), numMarks);
  }

  /** Work queued on this backend's stream from now on waits for the event (no host wait). */
  waitEvent(eventHandle: number): void {
    this.streamObj.waitEvent(eventHandle);
  }

  /** Releases everything; every step is attempted even if one fails (the first error is rethrown). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    releaseAll([
      () => this.streamObj.synchronize(),
      () => this.graphs.disposeAll(),
      () => this.blas.dispose(),
      () => this.staging.dispose(),
      () => this.workspace.dispose(),
      () => this.allocator.dispose(),
      () => this.streamObj.dispose(),
    ]);
  }

  // ---- CudaOpsContext / CudaAttentionContext ---------------------------------------------------------

  /** Validates that t is a live tensor of this backend. @throws Error naming `what` otherwise. */
  dev(t: Tensor, what: string): CudaTensor {
    if (!(t instanceof CudaTensor)) throw new Error(`${what}: not a tensor of the CUDA backend`);
    if (this.disposed) throw new Error(`${what}: the CUDA backend is disposed`);
    if (t.released) throw new Error(`${what}: the tensor was freed`);
    if (t.kind === "workspace" && t.generation !== this.workspace.generation) {
      throw new Error(`${what}: a workspace tensor from before the last resetWorkspace() was used`);
    }
    return t;
  }

  /** A new workspace tensor (valid until resetWorkspace()). */
  out(shape: readonly number[], dtype: DType): CudaTensor {
    if (this.workspace.exact) this.notCapturing("exactWorkspace mode");
    return this.workspace.tensor(shape, dtype);
  }

  /** Raw workspace bytes (256-byte aligned address), valid until resetWorkspace(). */
  scratch(bytes: number): DevicePtr {
    if (this.workspace.exact) this.notCapturing("exactWorkspace mode");
    return this.workspace.scratch(bytes);
  }

  /** Scratch shared by the launches of one step (CudaAttentionContext; StepWorkspace.sharedScratch). */
  sharedScratch(bytes: number): DevicePtr {
    if (this.workspace.exact) this.notCapturing("exactWorkspace mode");
    return this.workspace.sharedScratch(bytes);
  }

  /** Queues an async copy of host bytes to a device address (CudaAttentionContext). */
  uploadBytes(dst: DevicePtr, data: ArrayBufferView): void {
    this.notCapturing("a host upload");
    this.staging.toDevice(dst, data);
  }

  /** Copies device bytes into dst; returns when done (CudaAttentionContext). */
  downloadBytes(dst: ArrayBufferView, src: DevicePtr): void {
    this.notCapturing("a device read");
    this.staging.toHost(dst, src);
  }

  // ---- internals ------------------------------------------------------------------------------------

  protected allocPersistent(shape: readonly number[], dtype: DType): CudaTensor {
    this.notCapturing("allocating a persistent tensor");
    if (this.disposed) throw new Error("the CUDA backend is disposed");
    const bytes = numelOf(shape) * DTYPE_BYTES[dtype];
    return new CudaTensor([...shape], dtype, this.allocator.malloc(bytes), "persistent", -1);
  }

  /** Writes host values to the device, converted (host_io.ts writeConverted); not during capture. */
  protected writeConverted(
    dst: DevicePtr,
    dstDtype: DType,
    data: ArrayBufferView,
    srcDtype: DType,
    count: number,
  ): void {
    this.notCapturing("writing host data");
    writeConverted(this.uploadPath, dst, dstDtype, data, srcDtype, count);
  }

  protected notCapturing(what: string): void {
    if (this.graphs.isCapturing) throw new Error(`${what} is not allowed during CUDA graph capture`);
  }
}
