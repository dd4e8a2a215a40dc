import { DTYPE_BYTES, type DType } from "../backend.js";
import type { HisparseNative, NativeDeviceAllocator, NativeWorkspace } from "./addon.js";
import { type DevicePtr, NULL_PTR, offsetPtr } from "./device_ptr.js";
import { CudaTensor, numelOf } from "./tensor.js";

/** Alignment of every workspace tensor (bytes; cudaMalloc's, what cuBLASLt wants). */
const ALIGN = 256;

/**
 * The step workspace of the CUDA backend: op outputs are carved from one device buffer by a bump
 * pointer (native Workspace) and all recycled at reset(). Each reset starts a new generation;
 * a tensor of an older generation is stale. In exact mode (debugging with compute-sanitizer)
 * every tensor gets its own allocation instead, freed at reset().
 */
export class StepWorkspace {
  /** Incremented by reset(); CudaTensor.generation of live workspace tensors equals it. */
  generation = 0;
  private readonly native: NativeWorkspace;
  /** Tensors made since the last reset (for scope()). */
  private tensors: CudaTensor[] = [];
  /** When set, every new tensor is also appended here (graph capture). */
  private captureLog: CudaTensor[] | null = null;
  private exactBlocks: DevicePtr[] = [];
  /** The step's shared scratch (see sharedScratch); NULL_PTR = none. */
  private shared = { ptr: NULL_PTR, bytes: 0 };

  /**
   * @param bytes capacity of the bump buffer (unused in exact mode beyond a minimal buffer)
   * @param exact one allocation per tensor (see CudaBackendOptions.exactWorkspace)
   * @param synchronize waits for the stream (exact mode frees blocks only once work is done)
   */
  constructor(
    private readonly addon: HisparseNative,
    bytes: number,
    private readonly allocator: NativeDeviceAllocator,
    readonly exact: boolean,
    private readonly synchronize: () => void,
  ) {
    this.native = new addon.Workspace(exact ? ALIGN : bytes);
  }

  get used(): number {
    return this.native.used;
  }
  get capacity(): number {
    return this.native.capacity;
  }
  get peak(): number {
    return this.native.peak;
  }

  /** A new tensor of this generation. @throws RangeError when the workspace is full. */
  tensor(shape: readonly number[], dtype: DType): CudaTensor {
    const t = new CudaTensor(
      [...shape],
      dtype,
      this.scratch(numelOf(shape) * DTYPE_BYTES[dtype]),
      "workspace",
      this.generation,
    );
    this.tensors.push(t);
    this.captureLog?.push(t);
    return t;
  }

  /** Raw bytes (256-byte aligned address) valid until reset(). */
  scratch(bytes: number): DevicePtr {
    if (!this.exact) return this.native.alloc(bytes, ALIGN);
    const p = this.allocator.malloc(bytes);
    this.exactBlocks.push(p);
    return p;
  }

  /**
   * Scratch that successive launches of one step share (e.g. the decode attention partials of
   * every layer): launches on one stream run one after another, so one region serves them all.
   * Grows (a new region) when a launch needs more. Valid until reset(), the end of a scope that
   * created it, or the start of a graph capture (which gets its own, inside the graph's region).
   */
  sharedScratch(bytes: number): DevicePtr {
    if (this.exact) return this.scratch(bytes);
    if (this.shared.ptr === NULL_PTR || this.shared.bytes < bytes)
      this.shared = { ptr: this.scratch(bytes), bytes };
    return this.shared.ptr;
  }

  /** Recycles everything: the bump pointer returns to 0 and a new generation starts. */
  reset(): void {
    this.shared = { ptr: NULL_PTR, bytes: 0 };
    this.native.reset();
    this.generation++;
    this.tensors = [];
    if (this.exactBlocks.length > 0) {
      this.synchronize();
      for (const p of this.exactBlocks) this.allocator.free(p);
      this.exactBlocks = [];
    }
  }

  /** Marks [0, bytes) as in use when that is more than what is in use now (graph replay). */
  markUsed(bytes: number): void {
    if (bytes > this.native.used) this.native.setUsed(bytes);
  }

  setCaptureLog(log: CudaTensor[] | null): void {
    if (log !== null) this.shared = { ptr: NULL_PTR, bytes: 0 }; // a graph allocates its own scratch
    this.captureLog = log;
  }

  /**
   * Runs fn, then releases every workspace tensor it created except its result, which is moved
   * down to where the scope started (Backend.workspaceScope). Stream-ordered device copies; the
   * moved tensor is a new handle.
   * @param consumed a workspace tensor that fn reads for the last time (e.g. the previous decoder
   *   layer's output): when it is the newest live tensor and ends where the scope starts, it is released with the
   *   scope and the result moves down over it, so a chain of scopes holds one layer's output, not
   *   one per layer (a 32-layer prefill of T tokens would otherwise keep 32 x [T, hidden]).
   */
  scope<T extends CudaTensor>(fn: () => T, stream: number, consumed?: CudaTensor): T {
    if (this.exact) return fn(); // exact mode: every tensor lives until reset()
    const mark = this.native.used;
    const first = this.tensors.length;
    // Reclaimable only when nothing (tracked or raw scratch) lies between it and the scope's start.
    const reclaim =
      consumed !== undefined &&
      first > 0 &&
      this.tensors[first - 1] === consumed &&
      consumed.ptr - this.native.base + consumed.bytes === mark
        ? consumed
        : null;
    const r = fn();
    for (const t of this.tensors.slice(first)) if (t !== r) t.released = true;
    this.tensors.length = first;
    const base = this.native.base;
    // The scope's floor: its start, or the start of the consumed tensor it may reclaim.
    const floor = reclaim !== null && r !== reclaim ? reclaim.ptr - base : mark;
    if (this.shared.ptr >= base + floor) this.shared = { ptr: NULL_PTR, bytes: 0 }; // released with the scope
    if (r.kind !== "workspace" || r.ptr < base + mark) {
      if (floor < mark) this.reclaimed(reclaim!);
      this.native.setUsed(floor); // the result predates the scope: everything inside goes
      return r;
    }
    if (floor < mark) this.reclaimed(reclaim!);
    const dst = offsetPtr(base, Math.ceil(floor / ALIGN) * ALIGN);
    if (dst === r.ptr) {
      this.native.setUsed(r.ptr - base + r.bytes);
      this.tensors.push(r);
      return r;
    }
    // Move the result down (through a temporary above it when source and target overlap).
    let src = r.ptr;
    if (dst + r.bytes > r.ptr) {
      src = this.native.alloc(r.bytes, ALIGN);
      this.addon.memcpyAsync(src, r.ptr, r.bytes, stream);
    }
    this.addon.memcpyAsync(dst, src, r.bytes, stream);
    r.released = true;
    this.native.setUsed(dst - base);
    const moved = this.tensor(r.shape, r.dtype);
    if (moved.ptr !== dst) throw new Error("workspaceScope: internal error (misplaced result)");
    return moved as T;
  }

  /** Marks the scope's consumed tensor released and drops it from the live list (it is the newest). */
  private reclaimed(t: CudaTensor): void {
    t.released = true;
    this.tensors.pop();
  }

  /** Fills the unused part of the buffer with a byte (tests: 0xff = NaN poison). */
  fillUnused(byteValue: number, stream: number): void {
    if (this.exact) return;
    const used = Math.ceil(this.native.used / ALIGN) * ALIGN;
    const free = this.native.capacity - used;
    if (free > 0) this.addon.memsetAsync(offsetPtr(this.native.base, used), byteValue, free, stream);
  }

  dispose(): void {
    for (const p of this.exactBlocks) this.allocator.free(p);
    this.exactBlocks = [];
    this.native.dispose();
  }
}
