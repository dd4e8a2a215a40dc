/**
 * A host-memory test double of the native addon, so that the TS layer of the CUDA backend
 * (cuda_backend.ts, host_io.ts, step_workspace.ts, graphs.ts, the ops' argument marshalling) is
 * tested by `npm test` on machines without a GPU. "Device memory" is host memory at fake
 * addresses; copies, memsets, casts and row gathers really move bytes; a captured graph records
 * those operations and replays them. Launchers that have no host version here record their
 * arguments in `calls` (the tests check the marshalling) and touch no memory; those that take a
 * named parameter object check it against its field list (addon_params.ts) as the addon's
 * params.gen.h readers do: every field present, of its kind, and no other.
 */
import { readSync } from "node:fs";
import type { DType } from "../../../../src/backends/backend.js";
import {
  ADDON_ABI_VERSION,
  type AllocatorStats,
  asDevicePtr,
  type DevicePtr,
  type HisparseNative,
  MLA_ATTENTION_PARAMS,
  MLA_INDEXER_PARAMS,
  type NativeBlas,
  type NativeCudaGraph,
  type NativeDeviceAllocator,
  type NativeEvent,
  type NativeFileReader,
  type NativePinnedBuffer,
  type NativeStream,
  type NativeWorkspace,
  PAGED_ATTENTION_PARAMS,
  type ParamStruct,
  QUEST_SELECT_PARAMS,
  RESOLVE_PARAMS,
  ROW_RESOLVE_PARAMS,
  ROW_SELECTION_OVERLAP_PARAMS,
  ROW_VIEW_MERGE_PARAMS,
  SPARSE_DECODE_PARAMS,
} from "../../../../src/backends/cuda/addon.js";
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits } from "../../../../src/backends/cuda/half.js";
import { checkParams } from "./fake_params.js";

const CODE_DTYPE: Record<number, DType> = { 0: "f32", 1: "bf16", 2: "f16", 3: "i32" };

/** Fake address space: allocations at 256-aligned addresses with gaps between them. */
export class AddressSpace {
  private next = 0x1_0000_0000;
  private readonly regions: { base: number; bytes: Uint8Array }[] = [];

  add(bytes: Uint8Array): DevicePtr {
    const base = asDevicePtr(this.next);
    this.regions.push({ base, bytes });
    this.next = Math.ceil((base + bytes.length + 4096) / 256) * 256;
    return base;
  }
  remove(base: number): void {
    const i = this.regions.findIndex((r) => r.base === base);
    if (i < 0) throw new Error(`fake: no allocation at ${base}`);
    this.regions.splice(i, 1);
  }
  /** n bytes at addr; throws (like memcheck) when the range leaves an allocation. */
  view(addr: number, n: number): Uint8Array {
    for (const r of this.regions) {
      if (addr >= r.base && addr + n <= r.base + r.bytes.length)
        return r.bytes.subarray(addr - r.base, addr - r.base + n);
    }
    throw new Error(`fake: invalid access of ${n} bytes at ${addr}`);
  }
}

/**
 * One recorded call of a launcher without a host implementation: its positional arguments
 * (stream first) and, for the launchers that take one, the named parameter object.
 */
export interface FakeCall {
  fn: string;
  args: number[];
  params?: Readonly<Record<string, number>>;
}

/** The fake addon plus its inspection hooks. */
export interface FakeAddon extends HisparseNative {
  readonly calls: FakeCall[];
  readonly memory: AddressSpace;
  /** ids returned by `sample` (set by the test; default 0s). */
  sampleResult: number[];
  /** What `kvAmax` writes to its out words: [amax |k|, amax |v|, any token] (default 0s: none). */
  kvAmaxResult: [number, number, number];
  /** Every FileReader read, in order: [buffer, fd, position, bytes]. */
  readonly reads: [number, number, number, number][];
  /** FileReaders created and not yet disposed. */
  liveReaders: number;
  /** The per-row arrays `sample` read from fake device memory at its last call. */
  lastSampleRows: {
    temperature: number[];
    topK: number[];
    topP: number[];
    minP: number[];
    uniform: number[];
  } | null;
}

function readValue(v: DataView, off: number, dtype: DType): number {
  switch (dtype) {
    case "f32":
      return v.getFloat32(off, true);
    case "bf16":
      return bf16BitsToF32(v.getUint16(off, true));
    case "f16":
      return f16BitsToF32(v.getUint16(off, true));
    default:
      return v.getInt32(off, true);
  }
}

function writeValue(v: DataView, off: number, dtype: DType, x: number): void {
  if (dtype === "f32") v.setFloat32(off, x, true);
  else if (dtype === "bf16") v.setUint16(off, f32ToBf16Bits(x), true);
  else if (dtype === "i32") v.setInt32(off, x, true);
  else throw new Error("fake: casts to f16 are not implemented");
}

const BYTES: Record<DType, number> = { f32: 4, bf16: 2, f16: 2, i32: 4, fp8: 1 };

export function createFakeAddon(options: { hasAttention?: boolean; hasSampling?: boolean } = {}): FakeAddon {
  const mem = new AddressSpace();
  const calls: FakeCall[] = [];
  /** Stream handle -> the graph recording it (or null). */
  const recording = new Map<number, (() => void)[]>();
  let nextStream = 0x100;
  let minSplitTokens = 256;
  let launchOptions = 3; // hsSetKernelLaunchOptions (HS_LAUNCH_DEFAULT)
  const run = (stream: number, op: () => void) => {
    const rec = recording.get(stream);
    if (rec) rec.push(op);
    else op();
  };

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

  const blas: NativeBlas = {
    mode: "lt",
    version: 130000,
    cublasPath: "fake",
    numPlans: 0,
    linear: (...args: number[]) => void calls.push({ fn: "linear", args }),
    gemmStridedBatched: (...args: (number | boolean)[]) =>
      void calls.push({ fn: "gemmStridedBatched", args: args.map(Number) }),
    dispose: () => {},
  };

  const record =
    (fn: string) =>
    (...args: number[]) =>
      void calls.push({ fn, args });
  /** A launcher taking (stream, params[, extra numbers]): checks params against its struct, records both. */
  const recordParams =
    (fn: string, spec: ParamStruct) =>
    (stream: number, params: object, ...rest: number[]) =>
      void calls.push({ fn, args: [stream, ...rest], params: checkParams(fn, spec, params) });

  /**
   * Reads happen at wait() (as the real reader's data is there only then); a buffer with a read
   * not yet waited for refuses another read and every copy out of it (memcheck would not see
   * that, but the data would be stale).
   */
  class FileReader implements NativeFileReader {
    readonly numBuffers: number;
    readonly bufferBytes: number;
    private readonly bases: number[] = [];
    private readonly pending: ([number, number, number] | null)[];
    private disposed = false;
    constructor(o: { buffers: number; bufferBytes: number; threads: number }) {
      if (!(o.buffers >= 1 && o.threads >= 1 && o.bufferBytes >= 1))
        throw new RangeError("FileReader: bad options");
      this.numBuffers = o.buffers;
      this.bufferBytes = o.bufferBytes;
      for (let i = 0; i < o.buffers; i++) this.bases.push(mem.add(new Uint8Array(o.bufferBytes)));
      this.pending = Array.from({ length: o.buffers }, () => null);
      fake.liveReaders++;
    }
    bufferPtr(i: number): DevicePtr {
      if (this.disposed) throw new Error("FileReader is disposed");
      return asDevicePtr(this.bases[i]!);
    }
    read(i: number, fd: number, position: number, bytes: number): void {
      if (this.pending[i] !== null) throw new Error(`FileReader.read: buffer ${i} is busy`);
      if (bytes > this.bufferBytes) throw new RangeError("FileReader.read: more bytes than a buffer holds");
      this.pending[i] = [fd, position, bytes];
      busyBuffers.set(this.bases[i]!, this.bufferBytes);
      fake.reads.push([i, fd, position, bytes]);
    }
    wait(i: number): void {
      const p = this.pending[i];
      if (p === null || p === undefined) throw new Error(`FileReader.wait: no read on buffer ${i}`);
      this.pending[i] = null;
      busyBuffers.delete(this.bases[i]!);
      const [fd, position, bytes] = p;
      const dst = mem.view(this.bases[i]!, this.bufferBytes);
      let got = 0;
      while (got < bytes) {
        const n = readSync(fd, dst, got, bytes - got, position + got);
        if (n === 0)
          throw new Error(
            `the file ended ${got} bytes into a read of ${bytes} bytes at offset ${position} (truncated file?)`,
          );
        got += n;
      }
    }
    dispose(): void {
      if (this.disposed) return;
      this.disposed = true;
      for (const b of this.bases) {
        busyBuffers.delete(b);
        mem.remove(b);
      }
      fake.liveReaders--;
    }
  }
  /** Base -> bytes of the FileReader buffers with a read not yet waited for. */
  const busyBuffers = new Map<number, number>();

  /** For launchers with boolean flags: recorded as 0 / 1. */
  const recordFlags =
    (fn: string) =>
    (...args: (number | boolean)[]) =>
      void calls.push({ fn, args: args.map(Number) });

  const fake: FakeAddon = {
    calls,
    reads: [],
    liveReaders: 0,
    memory: mem,
    sampleResult: [],
    kvAmaxResult: [0, 0, 0],
    lastSampleRows: null,
    abiVersion: ADDON_ABI_VERSION,
    // NCCL: a one-rank communicator whose collectives are recorded (nothing moves).
    ncclInfo: () => ({ version: 22803, path: "libnccl.so.2 (fake)" }),
    ncclGetUniqueId: () => new Uint8Array(128),
    ncclCommInitRank: () => 0x1000,
    ncclCommDestroy: record("ncclCommDestroy"),
    ncclAllReduce: record("ncclAllReduce"),
    ncclAllGather: record("ncclAllGather"),
    buildInfo: {
      cudaRuntimeVersion: 13000,
      hasAttention: options.hasAttention ?? true,
      hasSampling: options.hasSampling ?? true,
      hasHiSparse: true,
      debugSync: false,
      gencode: "fake",
    },
    probe: () => ({ ok: true, deviceCount: 1, driverVersion: 13000, runtimeVersion: 13000, error: "" }),
    deviceProperties: () => ({
      name: "Fake GPU",
      major: 9,
      minor: 0,
      totalGlobalMem: 2 ** 34,
      multiProcessorCount: 132,
      l2CacheSize: 50 * 2 ** 20,
      sharedMemPerBlockOptin: 232448,
      sharedMemPerMultiprocessor: 233472,
      memoryBusWidth: 6144,
      pciBusId: 1,
      canMapHostMemory: true,
      unifiedAddressing: true,
    }),
    setDevice: () => {},
    getDevice: () => 0,
    memGetInfo: () => ({ free: 2 ** 33, total: 2 ** 34 }),
    deviceSynchronize: () => {},
    memcpyAsync: (dst, src, bytes, stream) => {
      for (const [b, n] of busyBuffers)
        if (src >= b && src < b + n) throw new Error("fake: a copy out of a FileReader buffer before wait()");
      run(stream, () => mem.view(dst, bytes).set(mem.view(src, bytes)));
    },
    memsetAsync: (dst, value, bytes, stream) => run(stream, () => mem.view(dst, bytes).fill(value & 0xff)),
    DeviceAllocator,
    PinnedBuffer,
    Stream,
    Event,
    Workspace,
    Blas: function FakeBlas() {
      return blas;
    } as unknown as HisparseNative["Blas"],
    CudaGraph,
    FileReader,
    fillWeight: (stream, dst, dtype, count, first, table, constantBits, key0, key1) =>
      run(stream, () =>
        fakeFillWeight(mem, dst, BYTES[CODE_DTYPE[dtype]!], count, first, table, constantBits, key0, key1),
      ),
    gatherRows: (stream, out, src, indices, numRows, numSrcRows, rowBytes, firstIndex) =>
      run(stream, () => {
        const idx = new DataView(mem.view(indices, 4 * numRows).slice().buffer);
        for (let r = 0; r < numRows; r++) {
          const s = idx.getInt32(4 * r, true) - firstIndex;
          const o = mem.view(out + r * rowBytes, rowBytes);
          if (s < 0 || s >= numSrcRows) o.fill(0);
          else o.set(mem.view(src + s * rowBytes, rowBytes));
        }
      }),
    cast: (stream, dst, dstDtype, src, srcDtype, count) =>
      run(stream, () => {
        const [dt, st] = [CODE_DTYPE[dstDtype]!, CODE_DTYPE[srcDtype]!];
        const s = mem.view(src, count * BYTES[st]);
        const d = mem.view(dst, count * BYTES[dt]);
        const sv = new DataView(s.buffer, s.byteOffset, s.byteLength);
        const dv = new DataView(d.buffer, d.byteOffset, d.byteLength);
        for (let i = 0; i < count; i++) writeValue(dv, i * BYTES[dt], dt, readValue(sv, i * BYTES[st], st));
      }),
    rmsNorm: record("rmsNorm"),
    fusedAddRmsNorm: record("fusedAddRmsNorm"),
    qkNorm: record("qkNorm"),
    qkNormRotaryEmbedding: record("qkNormRotaryEmbedding"),
    rotaryEmbedding: record("rotaryEmbedding"),
    siluAndMul: record("siluAndMul"),
    denseGemv: record("denseGemv"),
    denseGemvRope: record("denseGemvRope"),
    reshapeAndCache: record("reshapeAndCache"),
    reshapeAndCacheFp8: record("reshapeAndCacheFp8"),
    kvAmax: (...args: number[]) => {
      calls.push({ fn: "kvAmax", args });
      const [k, v, any] = fake.kvAmaxResult;
      const words = new Uint8Array(12);
      new Float32Array(words.buffer, 0, 2).set([k, v]);
      new Uint32Array(words.buffer, 8, 1)[0] = any;
      fake.memory.view(args[8]!, 12).set(words);
    },
    biasAdd: record("biasAdd"),
    setDecodeMinSplitTokens: (tokens: number) => {
      const prev = minSplitTokens;
      if (tokens > 0) minSplitTokens = tokens;
      return prev;
    },
    setKernelLaunchOptions: (options: number) => {
      const prev = launchOptions;
      if (options >= 0) launchOptions = options & 3;
      return prev;
    },
    pagedAttentionWorkspaceBytes: (maxNumReqs, maxNumTokens, numHeads, headDim) =>
      maxNumReqs * numHeads * 4 * 2 + maxNumTokens * headDim,
    pagedDecodeAttention: recordParams("pagedDecodeAttention", PAGED_ATTENTION_PARAMS),
    pagedPrefillAttention: recordParams("pagedPrefillAttention", PAGED_ATTENTION_PARAMS),
    pagedPrefillWorkspaceBytes: () => 0,
    sampleWorkspaceBytes: (B, V) => B * V,
    swapInPages: record("swapInPages"),
    reshapeAndCacheDigest: record("reshapeAndCacheDigest"),
    questSelectScratchBytes: (numReqs, numKvHeads, tableStride) => numReqs * numKvHeads * tableStride * 8,
    questSelect: recordParams("questSelect", QUEST_SELECT_PARAMS),
    resolve: recordParams("resolve", RESOLVE_PARAMS),
    mirrorPages: record("mirrorPages"),
    rowResolve: recordParams("rowResolve", ROW_RESOLVE_PARAMS),
    rowCopy: record("rowCopy"),
    rowViewMerge: recordParams("rowViewMerge", ROW_VIEW_MERGE_PARAMS),
    rowSelectionOverlap: recordParams("rowSelectionOverlap", ROW_SELECTION_OVERLAP_PARAMS),
    loadPages: record("loadPages"),
    sparseDecodeAttention: recordParams("sparseDecodeAttention", SPARSE_DECODE_PARAMS),
    moeRoute: recordFlags("moeRoute"),
    moePermuteScratchBytes: (numTokens, topK, numExperts) =>
      numTokens * topK > 4096 ? numExperts * 4 * 64 : 0,
    moePermute: record("moePermute"),
    moeGroupedGemm: recordFlags("moeGroupedGemm"),
    moeUnpermute: record("moeUnpermute"),
    moeDecodeSyncInts: (hidden) => 32 + 16 * Math.ceil(hidden / 32),
    moeDecodePlanInts: (numTokens, topK, numExperts) =>
      2 * Math.min(numExperts, numTokens * topK) + 1 + numTokens * topK,
    moeDecodeRoute: recordFlags("moeDecodeRoute"),
    moeDecodeGateUp: record("moeDecodeGateUp"),
    moeDecodeDown: record("moeDecodeDown"),
    mlaSliceColumns: record("mlaSliceColumns"),
    mlaWriteRows: record("mlaWriteRows"),
    mlaRotaryStrided: recordFlags("mlaRotaryStrided"),
    mlaLayerNorm: record("mlaLayerNorm"),
    mlaAbsorbQuery: record("mlaAbsorbQuery"),
    mlaOutProject: record("mlaOutProject"),
    mlaAttentionWorkspaceBytes: (numTokens, numHeads, rank, maxEntries) =>
      maxEntries > 256 ? 4 * numTokens * numHeads * (rank + 2) * 4 : 0,
    mlaAttention: recordParams("mlaAttention", MLA_ATTENTION_PARAMS),
    mlaIndexerLogits: recordParams("mlaIndexerLogits", MLA_INDEXER_PARAMS),
    mlaTopk: record("mlaTopk"),
    mlaGatherLatent: record("mlaGatherLatent"),
    mlaPrefillSoftmax: record("mlaPrefillSoftmax"),
    sample: (
      stream,
      logits,
      B,
      V,
      temperature,
      topK,
      topP,
      minP,
      uniform,
      outIds,
      workspace,
      workspaceBytes,
    ) => {
      calls.push({
        fn: "sample",
        args: [
          stream,
          logits,
          B,
          V,
          temperature,
          topK,
          topP,
          minP,
          uniform,
          outIds,
          workspace,
          workspaceBytes,
        ],
      });
      const f32 = (addr: number) => Array.from(new Float32Array(mem.view(addr, 4 * B).slice().buffer));
      const i32 = (addr: number) => Array.from(new Int32Array(mem.view(addr, 4 * B).slice().buffer));
      fake.lastSampleRows = {
        temperature: f32(temperature),
        topK: i32(topK),
        topP: f32(topP),
        minP: f32(minP),
        uniform: f32(uniform),
      };
      const out = new DataView(mem.view(outIds, 4 * B).buffer, mem.view(outIds, 4 * B).byteOffset, 4 * B);
      for (let b = 0; b < B; b++) out.setInt32(4 * b, fake.sampleResult[b] ?? 0, true);
    },
  };
  return fake;
}

/** 32-bit product with BigInt (an implementation of the rule independent of weight_fill.ts's Math.imul). */
function mul32(a: number, b: number): number {
  return Number((BigInt(a >>> 0) * BigInt(b >>> 0)) & 0xffffffffn);
}

function lowbias32(x: number): number {
  let h = x >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  h = mul32(h, 0x21f0aaad);
  h = (h ^ (h >>> 15)) >>> 0;
  h = mul32(h, 0x735a2d97);
  return (h ^ (h >>> 15)) >>> 0;
}

/** The hsFillWeight contract (native/kernels/weight_fill.h), element by element. */
function fakeFillWeight(
  mem: AddressSpace,
  dst: number,
  elemBytes: number,
  count: number,
  first: number,
  table: number,
  constantBits: number,
  key0: number,
  key1: number,
): void {
  const out = mem.view(dst, count * elemBytes);
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const tab = table === 0 ? null : mem.view(table, 65536 * elemBytes);
  const tv = tab === null ? null : new DataView(tab.buffer, tab.byteOffset, tab.byteLength);
  for (let j = 0; j < count; j++) {
    const i = BigInt(first + j);
    const pair = i >> 1n;
    const lo = Number(pair & 0xffffffffn);
    const hi = Number(pair >> 32n);
    const r = lowbias32((lowbias32((lo ^ key0) >>> 0) ^ ((key1 + mul32(hi, 0x9e3779b9)) >>> 0)) >>> 0);
    const idx = (i & 1n) === 1n ? r >>> 16 : r & 0xffff;
    const bits =
      tv === null
        ? constantBits
        : elemBytes === 2
          ? tv.getUint16(idx * 2, true)
          : tv.getUint32(idx * 4, true);
    if (elemBytes === 2) dv.setUint16(j * 2, bits, true);
    else dv.setUint32(j * 4, bits, true);
  }
}
