/**
 * Device memory plumbing: the caching allocator's statistics, pinned buffers, the step
 * workspace, uploads with dtype conversion and read-backs. GPU machine only.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { asDevicePtr, loadAddon } from "../../src/backends/cuda/addon.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f16BitsToF32, f32ArrayToBf16, roundBf16 } from "../../src/backends/cuda/half.js";
import type { CudaTensor } from "../../src/backends/cuda/tensor.js";
import { assertSame, gpuSkip, makeBackend, Rng, randF32 } from "./helpers.js";

const skip = gpuSkip();
const MiB = 2 ** 20;

describe("DeviceAllocator", { skip }, () => {
  it("caches freed blocks by size class and counts every event", () => {
    const a = new (loadAddon().DeviceAllocator)({ caching: true });
    // step 1: 1000 B rounds to 1024 (512-byte classes below 1 MiB), 3 MiB + 1 to 4 MiB (2 MiB classes)
    const p1 = a.malloc(1000);
    const p2 = a.malloc(3 * MiB + 1);
    let s = a.stats();
    assert.equal(s.bytesInUse, 1024 + 4 * MiB);
    assert.equal(s.bytesRequested, 1000 + 3 * MiB + 1);
    assert.equal(s.bytesReserved, 1024 + 4 * MiB);
    assert.equal(s.numCudaMallocs, 2);
    assert.equal(p1 % 256, 0);
    assert.equal(p2 % 256, 0);
    // step 2: free the 4 MiB block; it stays reserved in the cache
    a.free(p2);
    s = a.stats();
    assert.equal(s.bytesInUse, 1024);
    assert.equal(s.bytesCached, 4 * MiB);
    // step 3: a 3.5 MiB request (class 4 MiB) reuses it: same address, no cudaMalloc
    const p3 = a.malloc(3.5 * MiB);
    s = a.stats();
    assert.equal(p3, p2);
    assert.equal(s.numCacheHits, 1);
    assert.equal(s.numCudaMallocs, 2);
    // step 4: a 1 MiB request does not take a cached 4 MiB block (more than 25% waste)
    a.free(p3);
    const p4 = a.malloc(MiB);
    s = a.stats();
    assert.notEqual(p4, p2);
    assert.equal(s.numCudaMallocs, 3);
    assert.equal(s.peakBytesInUse, 1024 + 4 * MiB);
    // step 5: emptyCache returns the cached 4 MiB block to the device
    a.emptyCache();
    s = a.stats();
    assert.equal(s.bytesReserved, 1024 + 2 * MiB);
    assert.equal(s.numCudaFrees, 1);
    assert.throws(() => a.free(asDevicePtr(12345 * 256)), /was not allocated here/);
    a.free(p1);
    a.free(p4);
    assert.equal(a.stats().numFrees, 4);
    a.dispose();
    assert.throws(() => a.stats(), /disposed/);
  });

  it("without caching, sizes are exact and free returns memory at once", () => {
    const a = new (loadAddon().DeviceAllocator)({ caching: false });
    const p = a.malloc(1000);
    assert.equal(a.stats().bytesInUse, 1000);
    a.free(p);
    const s = a.stats();
    assert.equal(s.bytesReserved, 0);
    assert.equal(s.numCudaFrees, 1);
    a.dispose();
  });
});

describe("pinned buffers, streams and copies", { skip }, () => {
  it("round-trips bytes host -> device -> pinned host and detaches on dispose", () => {
    const addon = loadAddon();
    const stream = new addon.Stream();
    const pin = new addon.PinnedBuffer(4096);
    const back = new addon.PinnedBuffer(4096);
    assert.equal(pin.byteLength, 4096);
    const src = new Uint32Array(pin.buffer);
    for (let i = 0; i < src.length; i++) src[i] = (i * 2654435761) >>> 0;
    const alloc = new addon.DeviceAllocator();
    const dev = alloc.malloc(4096);
    addon.memcpyAsync(dev, pin.ptr, 4096, stream.handle);
    addon.memcpyAsync(back.ptr, dev, 4096, stream.handle);
    const done = new addon.Event();
    done.record(stream.handle);
    stream.synchronize();
    assert.equal(done.query(), true);
    assert.deepEqual(new Uint32Array(back.buffer), src);
    const view = new Uint8Array(pin.buffer);
    pin.dispose();
    assert.equal(view.byteLength, 0, "views of a disposed pinned buffer are detached");
    assert.equal(pin.ptr, 0);
    for (const h of [back, done, stream, alloc]) h.dispose();
  });
});

describe("CudaBackend memory", { skip }, () => {
  let be: CudaBackend;
  const rng = new Rng(99);
  before(() => {
    be = makeBackend();
  });
  after(() => be?.dispose());

  it("uploadWeight stores bf16: bf16 bits verbatim, f32 and f16 rounded to nearest even", () => {
    const n = 5000;
    const f32 = randF32(rng, n, 10);
    const asBf16 = be.uploadWeight({ data: f32, dtype: "f32", shape: [n] });
    assertSame(be.toHost(asBf16), Float32Array.from(f32, roundBf16), "f32 -> bf16");
    const bits = f32ArrayToBf16(f32);
    const fromBits = be.uploadWeight({ data: bits, dtype: "bf16", shape: [50, 100] });
    assertSame(be.toHost(fromBits), Float32Array.from(f32, roundBf16), "bf16 bits");
    const half = Uint16Array.from({ length: n }, () => rng.int(0, 0x7c00) | (rng.int(0, 2) << 15));
    const fromHalf = be.uploadWeight({ data: half, dtype: "f16", shape: [n] });
    assertSame(
      be.toHost(fromHalf),
      Float32Array.from(half, (h) => roundBf16(f16BitsToF32(h))),
      "f16 -> bf16",
    );
    for (const t of [asBf16, fromBits, fromHalf]) be.free(t);
  });

  it("uploads larger than the staging buffer arrive whole (chunked through pinned memory)", () => {
    const n = 10 * MiB; // 40 MiB of f32 through a 16 MiB staging buffer
    const data = randF32(rng, n);
    const t = be.upload(data, [n], "f32");
    assertSame(be.toHost(t), data, "40 MiB f32 upload");
    const w = be.uploadWeight({ data, dtype: "f32", shape: [n] });
    const got = be.toHost(w);
    for (let i = 0; i < n; i += 4099) assert.equal(got[i], roundBf16(data[i]!), `element ${i}`);
    be.free(t);
    be.free(w);
  });

  it("writeTensor updates a persistent tensor in place; i32 and f32 round-trip exactly", () => {
    const ids = be.upload(new Int32Array([1, 2, 3]), [3], "i32");
    be.writeTensor(ids, new Int32Array([7, -1, 9]));
    assertSame(be.toHost(ids), new Int32Array([7, -1, 9]), "i32 write");
    assert.throws(() => be.writeTensor(ids, new Int32Array(4)), /4 values for i32\[3\]/);
    assert.throws(() => be.writeTensor(ids, new Float32Array(3)), /Int32Array/);
    be.free(ids);
  });

  it("the workspace recycles at resetWorkspace and reports stale tensors", () => {
    be.resetWorkspace();
    const a = be.stage(new Float32Array([1, 2]), [2], "f32");
    const before = be.memoryStats().workspaceUsed;
    assert.ok(before >= 8);
    be.resetWorkspace();
    assert.equal(be.memoryStats().workspaceUsed, 0);
    assert.throws(() => be.toHost(a), /before the last resetWorkspace/);
    assert.throws(() => be.scratch(300 * MiB), /step workspace exhausted/);
  });

  it("workspaceScope keeps only the returned tensor, moved to the scope start", () => {
    be.resetWorkspace();
    const keepBefore = be.stage(new Float32Array([5]), [1], "f32");
    const mark = be.memoryStats().workspaceUsed;
    const data = randF32(rng, 1000);
    const kept = be.workspaceScope(() => {
      be.stage(randF32(rng, 100000), [100000], "f32"); // garbage of the scope
      return be.stage(data, [1000], "f32");
    });
    assertSame(be.toHost(kept), data, "scope result");
    assertSame(be.toHost(keepBefore), new Float32Array([5]), "tensor from before the scope");
    assert.ok(be.memoryStats().workspaceUsed <= Math.ceil(mark / 256) * 256 + 4000);
    assert.equal((kept as CudaTensor).ptr, (keepBefore as CudaTensor).ptr + 256);
  });

  it("allocateKvCache zeroes, free releases, double free and foreign tensors are errors", () => {
    const before = be.memoryStats().bytesInUse;
    const caches = be.allocateKvCache({
      numLayers: 2,
      numBlocks: 8,
      blockSize: 16,
      numKvHeads: 2,
      headDim: 64,
      dtype: "bf16",
    });
    assert.equal(caches.length, 2);
    assert.deepEqual(caches[0]!.shape, [8, 2, 16, 2, 64]);
    assert.ok((be.toHost(caches[1]!) as Float32Array).every((v) => v === 0));
    assert.ok(be.memoryStats().bytesInUse > before);
    for (const c of caches) be.free(c);
    assert.equal(be.memoryStats().bytesInUse, before);
    assert.throws(() => be.free(caches[0]!), /was freed/);
    assert.throws(() => be.free({ shape: [1], dtype: "f32" }), /not a tensor of the CUDA backend/);
    assert.throws(
      () =>
        be.allocateKvCache({
          numLayers: 1,
          numBlocks: 1,
          blockSize: 16,
          numKvHeads: 1,
          headDim: 64,
          dtype: "f16",
        }),
      /bf16/,
    );
  });

  it("memoryInfo reports the device", () => {
    const m = be.memoryInfo();
    assert.ok(m.total > 0 && m.free > 0 && m.free <= m.total);
    assert.equal(m.total, be.properties.totalGlobalMem);
  });
});
