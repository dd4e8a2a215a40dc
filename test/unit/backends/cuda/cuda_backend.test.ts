/**
 * The TS layer of CudaBackend on a host-memory double of the addon (fake_addon.ts): staging and
 * chunking of uploads, dtype conversion, read-backs, the step workspace and its scopes, and CUDA
 * graph bookkeeping. Runs without a GPU; the real kernels are tested by test/native on the GPU
 * machine. How ops marshal arguments to the launchers: cuda_backend_ops.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Tensor } from "../../../../src/backends/backend.js";
import { f32ToBf16Bits, roundBf16 } from "../../../../src/backends/cuda/half.js";
import type { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import { setup } from "./cuda_backend_fixture.js";

function seq(n: number, f: (i: number) => number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => f(i));
}

describe("CudaBackend host transfers (fake addon)", () => {
  it("f32 and i32 tensors round-trip exactly through a staging buffer smaller than the data", () => {
    const { be } = setup();
    const f = seq(3000, (i) => i * 0.37 - 100); // 12000 bytes through 1024-byte staging
    assert.deepEqual(be.toHost(be.upload(f, [3000], "f32")), f);
    const ids = Int32Array.from({ length: 777 }, (_, i) => i * 7 - 50);
    assert.deepEqual(be.toHost(be.stage(ids, [777], "i32")), ids);
  });

  it("bf16 tensors store f32 data rounded to nearest even (uploaded in scratch-sized chunks)", () => {
    const { be } = setup();
    const f = seq(1500, (i) => Math.sin(i) * 1000 + 1 / (i + 1));
    const t = be.upload(f, [30, 50], "bf16");
    assert.deepEqual(t.shape, [30, 50]);
    assert.deepEqual(be.toHost(t), f.map(roundBf16));
  });

  it("uploadWeight takes f32 values or bf16/f16 bits and stores bf16", () => {
    const { be } = setup();
    const f = seq(600, (i) => (i - 300) / 7);
    const bits = Uint16Array.from(f, f32ToBf16Bits);
    assert.deepEqual(be.toHost(be.uploadWeight({ data: f, dtype: "f32", shape: [600] })), f.map(roundBf16));
    assert.deepEqual(
      be.toHost(be.uploadWeight({ data: bits, dtype: "bf16", shape: [20, 30] })),
      f.map(roundBf16),
    );
    // f16 bits: 0x3c00 = 1, 0xc000 = -2, 0x3555 ~ 0.33325 (-> bf16 0.333984375), 0x0001 = 2^-24
    const half = Uint16Array.from([0x3c00, 0xc000, 0x3555, 0x0001]);
    const got = be.toHost(be.uploadWeight({ data: half, dtype: "f16", shape: [4] }));
    assert.deepEqual(Array.from(got), [1, -2, 0.333984375, 2 ** -24]);
    assert.throws(
      () => be.uploadWeight({ data: f, dtype: "bf16", shape: [600] }),
      /bf16 data must be a Uint16Array/,
    );
    assert.throws(
      () => be.uploadWeight({ data: f, dtype: "f32", shape: [601] }),
      /600 values for shape \[601\]/,
    );
  });

  it("writeTensor overwrites in place and checks count and array type", () => {
    const { be } = setup();
    const t = be.upload(new Int32Array([1, 2, 3]), [3], "i32");
    be.writeTensor(t, new Int32Array([4, 5, 6]));
    assert.deepEqual(be.toHost(t), new Int32Array([4, 5, 6]));
    assert.throws(() => be.writeTensor(t, new Int32Array(2)), /2 values for i32\[3\]/);
    assert.throws(() => be.writeTensor(t, new Float32Array(3)), /Int32Array/);
  });

  it("allocateKvCache zero-fills one bf16 tensor per layer and refuses other dtypes", () => {
    const { be } = setup();
    const spec = {
      numLayers: 3,
      numBlocks: 4,
      blockSize: 16,
      numKvHeads: 2,
      headDim: 8,
      dtype: "bf16" as const,
    };
    const caches = be.allocateKvCache(spec);
    assert.equal(caches.length, 3);
    assert.deepEqual(caches[2]!.shape, [4, 2, 16, 2, 8]);
    assert.ok((be.toHost(caches[0]!) as Float32Array).every((v) => v === 0));
    assert.throws(() => be.allocateKvCache({ ...spec, dtype: "f16" }), /stores the KV cache in bf16/);
  });
});

describe("CudaBackend step workspace (fake addon)", () => {
  it("resetWorkspace invalidates workspace tensors but not persistent ones", () => {
    const { be } = setup();
    const p = be.upload(new Float32Array([1]), [1], "f32");
    const w = be.stage(new Float32Array([2]), [1], "f32");
    be.resetWorkspace();
    assert.throws(() => be.toHost(w), /before the last resetWorkspace/);
    assert.deepEqual(be.toHost(p), new Float32Array([1]));
    assert.throws(
      () => be.free(be.stage(new Float32Array(1), [1], "f32")),
      /free\(\) takes a persistent tensor/,
    );
    be.free(p);
    assert.throws(() => be.toHost(p), /was freed/);
  });

  it("workspaceScope releases the scope's tensors and moves the result to the scope start", () => {
    const { be } = setup();
    const outer = be.stage(new Float32Array([9]), [1], "f32");
    const mark = be.memoryStats().workspaceUsed; // 4 bytes
    let inner: Tensor | null = null;
    const data = seq(100, (i) => i + 0.5);
    const kept = be.workspaceScope(() => {
      inner = be.stage(
        seq(1000, () => 3),
        [1000],
        "f32",
      );
      return be.stage(data, [100], "f32");
    }) as CudaTensor;
    assert.equal(kept.ptr, (outer as CudaTensor).ptr + 256, "moved to the first aligned byte after the mark");
    assert.deepEqual(be.toHost(kept), data);
    assert.deepEqual(be.toHost(outer), new Float32Array([9]));
    assert.throws(() => be.toHost(inner!), /was freed/);
    assert.equal(be.memoryStats().workspaceUsed, Math.ceil(mark / 256) * 256 + 400);
  });

  it("workspaceScope handles a result that overlaps its destination", () => {
    const { be } = setup();
    const data = seq(2000, (i) => -i);
    const kept = be.workspaceScope(() => {
      be.stage(new Float32Array(8), [8], "f32"); // 32 bytes of garbage, then an 8000-byte result
      return be.stage(data, [2000], "f32");
    }) as CudaTensor;
    assert.deepEqual(be.toHost(kept), data);
    assert.equal(be.memoryStats().workspaceUsed, 8000);
  });

  it("workspaceScope reclaims the consumed previous result: a chain of scopes holds one output", () => {
    const { be } = setup();
    const layer = (prev: Tensor | null, i: number): Tensor =>
      be.workspaceScope!(() => {
        if (prev !== null)
          assert.deepEqual(
            be.toHost(prev),
            seq(500, () => i - 1),
            "the input is intact inside",
          );
        be.stage(
          seq(3000, () => -1),
          [3000],
          "f32",
        ); // an intermediate
        return be.stage(
          seq(500, () => i),
          [500],
          "f32",
        );
      }, prev ?? undefined);
    let h: Tensor | null = null;
    for (let i = 0; i < 8; i++) h = layer(h, i);
    assert.deepEqual(
      be.toHost(h!),
      seq(500, () => 7),
    );
    assert.equal(be.memoryStats().workspaceUsed, 2000, "one layer output, not eight");
    // A consumed tensor that is not the newest (something lies above it) is not reclaimed.
    const a = be.stage(
      seq(10, () => 1),
      [10],
      "f32",
    );
    const b = be.stage(
      seq(10, () => 2),
      [10],
      "f32",
    );
    const before = be.memoryStats().workspaceUsed;
    be.workspaceScope!(
      () =>
        be.stage(
          seq(10, () => 3),
          [10],
          "f32",
        ),
      a,
    );
    assert.deepEqual(
      be.toHost(a),
      seq(10, () => 1),
    );
    assert.deepEqual(
      be.toHost(b),
      seq(10, () => 2),
    );
    assert.ok(be.memoryStats().workspaceUsed > before);
  });

  it("an exhausted workspace throws a RangeError naming the option", () => {
    const { be } = setup();
    assert.throws(() => be.stage(new Float32Array(1 << 19), [1 << 19], "f32"), /workspaceBytes/);
  });
});

describe("CudaBackend graphs (fake addon)", () => {
  /** A persistent id tensor feeding embedding -> gatherRows, captured once. */
  function graphSetup() {
    const { be, fake } = setup();
    const table = be.upload(
      seq(40, (i) => i),
      [10, 4],
      "f32",
    );
    const ids = be.upload(new Int32Array([0, 1, 2]), [3], "i32");
    const pick = be.upload(new Int32Array([2, 0]), [2], "i32");
    const forward = () => be.gatherRows(be.embedding(ids, table), pick);
    return { be, fake, ids, forward };
  }

  it("replay recomputes the captured ops from the current inputs", () => {
    const { be, ids, forward } = graphSetup();
    be.resetWorkspace();
    let out: Tensor | null = null;
    const g = be.graphs.capture(() => {
      out = forward();
    });
    assert.equal(be.graphs.numNodes(g), 2);
    for (const [input, rows] of [
      [
        [3, 4, 5],
        [5, 3],
      ],
      [
        [9, 8, 7],
        [7, 9],
      ],
    ] as const) {
      be.resetWorkspace();
      be.writeTensor(ids, Int32Array.from(input));
      be.graphs.replay(g);
      const expected = rows.flatMap((r) => [4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3]);
      assert.deepEqual(Array.from(be.toHost(out!)), expected);
    }
  });

  it("ops after a replay do not overwrite the graph's outputs; a busy workspace blocks replay", () => {
    const { be, ids, forward } = graphSetup();
    be.resetWorkspace();
    let out: Tensor | null = null;
    const g = be.graphs.capture(() => {
      out = forward();
    });
    be.resetWorkspace();
    be.writeTensor(ids, new Int32Array([1, 1, 1]));
    be.graphs.replay(g);
    const after = be.stage(
      seq(64, () => -1),
      [64],
      "f32",
    );
    assert.ok((after as CudaTensor).ptr >= (out! as CudaTensor).ptr + 32);
    assert.deepEqual(Array.from(be.toHost(out!)), [4, 5, 6, 7, 4, 5, 6, 7]);
    assert.throws(() => be.graphs.replay(g), /call resetWorkspace\(\) before replay/);
  });

  it("capture refuses host work, nesting and persistent allocation, and leaves no graph behind", () => {
    const { be, forward } = graphSetup();
    be.resetWorkspace();
    assert.throws(
      () => be.graphs.capture(() => void be.toHost(forward())),
      /toHost is not allowed during CUDA graph capture/,
    );
    assert.throws(
      () => be.graphs.capture(() => void be.upload(new Float32Array(1), [1], "f32")),
      /during CUDA graph capture/,
    );
    assert.throws(() => be.graphs.capture(() => void be.graphs.capture(() => {})), /cannot be nested/);
    assert.equal(be.graphs.size, 0);
    const g = be.graphs.capture(() => void forward());
    be.graphs.dispose(g);
    assert.throws(() => be.graphs.replay(g), /unknown or disposed graph/);
  });
});
