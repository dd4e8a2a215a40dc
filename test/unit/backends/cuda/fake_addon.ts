/**
 * A host-memory test double of the native addon, so that the TS layer of the CUDA backend
 * (cuda_backend.ts, host_io.ts, step_workspace.ts, graphs.ts, the ops' argument marshalling) is
 * tested by `npm test` on machines without a GPU. "Device memory" is host memory at fake
 * addresses; copies, memsets, casts and row gathers really move bytes; a captured graph records
 * those operations and replays them. Launchers that have no host version here record their
 * arguments in `calls` (the tests check the marshalling) and touch no memory; those that take a
 * named parameter object check it against its field list (addon_params.ts) as the addon's
 * params.gen.h readers do: every field present, of its kind, and no other. The memory and the
 * element conversions are fake_device_memory.ts's, the resource classes fake_resources.ts's.
 */
import { readSync } from "node:fs";
import {
  ADDON_ABI_VERSION,
  asDevicePtr,
  type DevicePtr,
  type HisparseNative,
  MLA_ATTENTION_PARAMS,
  MLA_INDEXER_PARAMS,
  type NativeBlas,
  type NativeFileReader,
  PAGED_ATTENTION_PARAMS,
  type ParamStruct,
  QUEST_SELECT_PARAMS,
  RESOLVE_PARAMS,
  ROW_RESOLVE_PARAMS,
  ROW_SELECTION_OVERLAP_PARAMS,
  ROW_VIEW_MERGE_PARAMS,
  SPARSE_DECODE_PARAMS,
} from "../../../../src/backends/cuda/addon.js";
import {
  AddressSpace,
  BYTES,
  CODE_DTYPE,
  fakeFillWeight,
  readValue,
  writeValue,
} from "./fake_device_memory.js";
import { checkParams } from "./fake_params.js";
import { fakeExecutionClasses, fakeMemoryClasses } from "./fake_resources.js";

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

export function createFakeAddon(options: { hasAttention?: boolean; hasSampling?: boolean } = {}): FakeAddon {
  const mem = new AddressSpace();
  const calls: FakeCall[] = [];
  /** Stream handle -> the graph recording it (or null). */
  const recording = new Map<number, (() => void)[]>();
  let minSplitTokens = 256;
  let launchOptions = 3; // hsSetKernelLaunchOptions (HS_LAUNCH_DEFAULT)
  const run = (stream: number, op: () => void) => {
    const rec = recording.get(stream);
    if (rec) rec.push(op);
    else op();
  };
  const { DeviceAllocator, PinnedBuffer, Workspace } = fakeMemoryClasses(mem);
  const { Stream, Event, CudaGraph } = fakeExecutionClasses(recording);

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
