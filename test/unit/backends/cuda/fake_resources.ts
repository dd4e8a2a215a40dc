/**
 * The fake addon's resource classes (fake_addon.ts), in two factories by what they share: the
 * memory classes (caching allocator, mapped pinned buffers, step workspace) over the fake's
 * {@link AddressSpace}, and the execution classes (streams, events, CUDA graphs). Streams do no
 * work of their own; a captured graph records the operations queued on its stream (through
 * `recording`, which the fake's launchers consult) and replays them on launch.
 */
import {
  type AllocatorStats,
  asDevicePtr,
  type DevicePtr,
  type HisparseNative,
  type NativeCudaGraph,
  type NativeDeviceAllocator,
  type NativeEvent,
  type NativePinnedBuffer,
  type NativeStream,
  type NativeWorkspace,
} from "../../../../src/backends/cuda/addon.js";
import type { AddressSpace } from "./fake_device_memory.js";

/** The memory classes one fake addon exposes (allocator, pinned buffers, workspace), over its memory. */
export function fakeMemoryClasses(
  mem: AddressSpace,
): Pick<HisparseNative, "DeviceAllocator" | "PinnedBuffer" | "Workspace"> {
  class DeviceAllocator implements NativeDeviceAllocator {
    private live = new Map<number, number>();
    private s = { numAllocs: 0, numFrees: 0, peak: 0 };
    malloc(bytes: number): DevicePtr {
      const p = mem.add(new Uint8Array(Math.max(1, bytes)));
      this.live.set(p, bytes);
      this.s.numAllocs++;
      this.s.peak = Math.max(this.s.peak, this.inUse());
      return p;
    }
    free(ptr: DevicePtr): void {
      if (!this.live.delete(ptr)) throw new Error("DeviceAllocator.free: the address was not allocated here");
      mem.remove(ptr);
      this.s.numFrees++;
    }
    emptyCache(): void {}
    stats(): AllocatorStats {
      const u = this.inUse();
      return {
        bytesInUse: u,
        bytesRequested: u,
        bytesReserved: u,
        bytesCached: 0,
        peakBytesInUse: this.s.peak,
        peakBytesReserved: this.s.peak,
        numAllocs: this.s.numAllocs,
        numFrees: this.s.numFrees,
        numCacheHits: 0,
        numCudaMallocs: this.s.numAllocs,
        numCudaFrees: this.s.numFrees,
        numOomRetries: 0,
        caching: false,
      };
    }
    dispose(): void {
      for (const p of this.live.keys()) mem.remove(p);
      this.live.clear();
    }
    private inUse(): number {
      let n = 0;
      for (const b of this.live.values()) n += b;
      return n;
    }
  }

  class PinnedBuffer implements NativePinnedBuffer {
    buffer: ArrayBuffer;
    ptr: DevicePtr;
    constructor(readonly byteLength: number) {
      this.buffer = new ArrayBuffer(byteLength);
      this.ptr = mem.add(new Uint8Array(this.buffer));
    }
    dispose(): void {
      mem.remove(this.ptr);
      this.ptr = asDevicePtr(0);
    }
  }
  class Workspace implements NativeWorkspace {
    readonly base: DevicePtr;
    used = 0;
    peak = 0;
    constructor(readonly capacity: number) {
      this.base = mem.add(new Uint8Array(capacity));
    }
    alloc(bytes: number, align = 256): DevicePtr {
      const start = Math.ceil(this.used / align) * align;
      if (start + bytes > this.capacity)
        throw new RangeError("step workspace exhausted: raise the backend's workspaceBytes option");
      this.used = start + bytes;
      this.peak = Math.max(this.peak, this.used);
      return asDevicePtr(this.base + start);
    }
    reset(): void {
      this.used = 0;
    }
    setUsed(bytes: number): void {
      this.used = bytes;
      this.peak = Math.max(this.peak, this.used);
    }
    dispose(): void {}
  }

  return { DeviceAllocator, PinnedBuffer, Workspace };
}

/**
 * The execution classes one fake addon exposes (streams, events, CUDA graphs).
 * @param recording stream handle -> the operations of the graph capturing it (absent: not capturing)
 */
export function fakeExecutionClasses(
  recording: Map<number, (() => void)[]>,
): Pick<HisparseNative, "Stream" | "Event" | "CudaGraph"> {
  let nextStream = 0x100;

  class Stream implements NativeStream {
    readonly handle = nextStream++;
    synchronize(): void {}
    query(): boolean {
      return true;
    }
    waitEvent(): void {}
    dispose(): void {}
  }

  class Event implements NativeEvent {
    readonly handle = 1;
    record(): void {}
    synchronize(): void {}
    query(): boolean {
      return true;
    }
    elapsedMs(): number {
      return 0;
    }
    dispose(): void {}
  }
  class CudaGraph implements NativeCudaGraph {
    private ops: (() => void)[] | null = null;
    private stream = 0;
    captureBegin(stream: number): void {
      this.ops = [];
      this.stream = stream;
      recording.set(stream, this.ops);
    }
    captureEnd(): void {
      recording.delete(this.stream);
    }
    captureAbort(): void {
      recording.delete(this.stream);
      this.ops = null;
    }
    launch(): void {
      if (this.ops === null) throw new Error("CudaGraph.launch: the graph is not instantiated");
      for (const op of this.ops) op();
    }
    get numNodes(): number {
      return this.ops?.length ?? 0;
    }
    dispose(): void {
      this.ops = null;
    }
  }

  return { Stream, Event, CudaGraph };
}
