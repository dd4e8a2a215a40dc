/** Tensors, the step workspace, persistent memory and the dtype rules of the CPU backend. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";

describe("CpuBackend memory", () => {
  it("toHost returns a copy that survives resetWorkspace", () => {
    const b = new CpuBackend({ numThreads: 1 });
    const t = b.stage(Float32Array.from([1, 2, 3]), [3], "f32");
    const h = b.toHost(t);
    b.resetWorkspace();
    b.stage(Float32Array.from([7, 7, 7]), [3], "f32"); // reuses the same workspace bytes
    assert.deepEqual([...h], [1, 2, 3]);
    assert.ok(b.toHost(b.stage(Int32Array.from([4, -5]), [2], "i32")) instanceof Int32Array);
    b.dispose();
  });

  it("rejects a workspace tensor after resetWorkspace, and a freed tensor", () => {
    const b = new CpuBackend({ numThreads: 1 });
    const ws = b.stage(Float32Array.from([1, 2]), [1, 2], "f32");
    const w = b.upload(Float32Array.from([1, 1]), [2], "f32");
    b.resetWorkspace();
    assert.throws(() => b.rmsNorm(ws, w, 1e-6), /workspace tensor used after resetWorkspace\(\)/);
    b.free(w);
    b.free(w); // a second free is a no-op
    assert.throws(() => b.rmsNorm(b.stage(Float32Array.from([1, 2]), [1, 2], "f32"), w, 1e-6), /was freed/);
    assert.throws(
      () => b.free(b.stage(Float32Array.from([1]), [1], "f32")),
      /free\(\) takes persistent tensors/,
    );
    b.dispose();
  });

  it("keeps step results valid while the workspace grows past its first chunk", () => {
    const b = new CpuBackend({ numThreads: 1 });
    const small = b.stage(Float32Array.from([5, 6]), [2], "f32");
    const big = b.stage(new Float32Array(3 << 20).fill(2), [3 << 20], "f32"); // 12 MiB: a new chunk
    assert.deepEqual([...b.toHost(small)], [5, 6]);
    assert.equal(b.toHost(big)[(3 << 20) - 1], 2);
    b.resetWorkspace();
    const again = b.stage(new Float32Array(3 << 20).fill(3), [3 << 20], "f32");
    assert.equal(b.toHost(again)[0], 3);
    b.dispose();
  });

  it("allocates zeroed f32 KV caches of shape [numBlocks, 2, blockSize, numKvHeads, headDim]", () => {
    const b = new CpuBackend({ numThreads: 1 });
    const caches = b.allocateKvCache({
      numLayers: 3,
      numBlocks: 5,
      blockSize: 4,
      numKvHeads: 2,
      headDim: 8,
      dtype: "f32",
    });
    assert.equal(caches.length, 3);
    assert.deepEqual(caches[0]!.shape, [5, 2, 4, 2, 8]);
    assert.ok(b.toHost(caches[2]!).every((v) => v === 0));
    assert.throws(
      () =>
        b.allocateKvCache({
          numLayers: 1,
          numBlocks: 1,
          blockSize: 1,
          numKvHeads: 1,
          headDim: 1,
          dtype: "bf16",
        }),
      /keeps its KV cache in f32 \(or emulated fp8\), got bf16/,
    );
    b.dispose();
  });

  it("stores f32 and i32 only, and checks lengths and array types", () => {
    const b = new CpuBackend({ numThreads: 1 });
    assert.throws(
      () => b.upload(new Float32Array(2), [2], "bf16"),
      /stores f32 and i32 tensors only, got bf16/,
    );
    assert.throws(() => b.stage(new Float32Array(3), [2], "f32"), /3 values for shape \[2\]/);
    assert.throws(() => b.stage(new Float32Array(2), [2], "i32"), /a Float32Array cannot fill a i32 tensor/);
    assert.throws(
      () =>
        b.linear(
          b.stage(new Float32Array(2), [1, 2], "f32"),
          b.upload(new Float32Array(2), [1, 2], "f32"),
          null,
          "bf16",
        ),
      /outputs f32/,
    );
    const m = b.memoryInfo();
    assert.ok(m.total > 0 && m.free > 0 && m.free <= m.total);
    b.dispose();
  });
});
