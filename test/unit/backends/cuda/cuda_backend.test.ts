/**
 * The TS layer of CudaBackend on a host-memory double of the addon (fake_addon.ts): staging and
 * chunking of uploads, dtype conversion, read-backs, the step workspace and its scopes, CUDA
 * graph bookkeeping, and how ops marshal arguments to the launchers. Runs without a GPU; the real
 * kernels are tested by test/native on the GPU machine.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { AttentionMetadata, Tensor } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits, roundBf16 } from "../../../../src/backends/cuda/half.js";
import type { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { createFakeAddon, type FakeAddon } from "./fake_addon.js";

/** A backend over a fresh fake addon; 1 KiB staging so that uploads are chunked. */
function setup(opts: { hasSampling?: boolean } = {}): { be: CudaBackend; fake: FakeAddon } {
  const fake = createFakeAddon(opts);
  const be = new CudaBackend({ addon: fake, workspaceBytes: 1 << 20, stagingBytes: 1024 });
  return { be, fake };
}

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

describe("CudaBackend op marshalling (fake addon)", () => {
  const layout = { numHeads: 4, numKvHeads: 2, headDim: 8 };
  const W = (4 + 2 * 2) * 8;

  function meta(
    be: CudaBackend,
    queryLens: number[],
    seqLens: number[],
    maxBlocksPerReq: number,
  ): AttentionMetadata {
    const n = seqLens.length;
    const qsl = new Int32Array(n + 1);
    queryLens.forEach((q, r) => {
      qsl[r + 1] = qsl[r]! + q;
    });
    const T = qsl[n]!;
    return stageAttentionMetadata(be, {
      queryStartLoc: qsl,
      seqLens: Int32Array.from(seqLens),
      blockTables: new Int32Array(n * maxBlocksPerReq),
      maxBlocksPerReq,
      slotMapping: new Int32Array(T),
      positions: new Int32Array(T),
      maxQueryLen: Math.max(...queryLens),
      maxSeqLen: Math.max(...seqLens),
    });
  }

  it("pagedAttention takes the decode kernel for one token per request, the prefill kernel otherwise", () => {
    const { be, fake } = setup();
    const cache = be.allocateKvCache({
      numLayers: 1,
      numBlocks: 6,
      blockSize: 16,
      numKvHeads: 2,
      headDim: 8,
      dtype: "bf16",
    })[0]!;
    const m = meta(be, [1, 1, 1], [5, 17, 0], 4);
    const qkv = be.stage(new Float32Array(3 * W), [3, W], "bf16");
    const out = be.pagedAttention(qkv, layout, cache, m, 16) as CudaTensor;
    assert.deepEqual(out.shape, [3, 32]);
    const d = fake.calls.at(-1)!;
    assert.equal(d.fn, "pagedDecodeAttention");
    const c = (t: Tensor) => (t as CudaTensor).ptr;
    // The stream, then HsPagedAttentionParams by name (addon_params.ts).
    assert.deepEqual(d.args, [be.stream]);
    const { workspace, ...fields } = d.params!;
    assert.ok(workspace! > 0, "the decode split scratch");
    assert.deepEqual(fields, {
      qkv: c(qkv),
      qkvRowStride: W,
      kvCache: c(cache),
      out: out.ptr,
      queryStartLoc: c(m.queryStartLoc),
      seqLens: c(m.seqLens),
      blockTables: c(m.blockTables),
      maxBlocksPerReq: 4,
      numReqs: 3,
      numTokens: 3,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 8,
      blockSize: 16,
      scale: 1 / Math.sqrt(8),
      maxModelLen: 64,
      workspaceBytes: 3 * 4 * 4 * 2 + 3 * 8, // from pagedAttentionWorkspaceBytes
      kvCacheFp8: 0, // a bf16 cache (fp8: 1, with the per-tensor scales)
      kScale: 1,
      vScale: 1,
    });

    const p = meta(be, [5, 1], [9, 30], 4);
    const qkv2 = be.stage(new Float32Array(6 * W), [6, W], "bf16");
    be.pagedAttention(qkv2, layout, cache, p, 16);
    const pre = fake.calls.at(-1)!;
    assert.equal(pre.fn, "pagedPrefillAttention");
    assert.deepEqual(pre.args, [be.stream, 5], "maxQueryLen 5 after the params");
    assert.deepEqual(
      [pre.params!.workspace, pre.params!.workspaceBytes, pre.params!.numTokens],
      [0, 0, 6],
      "no workspace for prefill",
    );
    assert.throws(() => be.pagedAttention(qkv2, layout, cache, m, 16), /expected shape \[3, 64\]/);
  });

  it("every layer's decode attention of a step shares one scratch region; a scope or a reset drops it", () => {
    const { be, fake } = setup();
    const cache = be.allocateKvCache({
      numLayers: 1,
      numBlocks: 6,
      blockSize: 16,
      numKvHeads: 2,
      headDim: 8,
      dtype: "bf16",
    })[0]!;
    const m = () => meta(be, [1, 1], [5, 17], 4);
    const qkv = () => be.stage(new Float32Array(2 * W), [2, W], "bf16");
    const decode = () => {
      be.pagedAttention(qkv(), layout, cache, m(), 16);
      return fake.calls.at(-1)!.params!.workspace!;
    };
    const first = decode();
    assert.equal(decode(), first, "a second layer reuses the region");
    be.resetWorkspace();
    // step 2: the region is created inside a scope, so the scope's end releases it
    be.workspaceScope(() => {
      be.stage(new Float32Array(4096), [4096], "f32");
      decode();
      return be.stage(new Float32Array(1), [1], "f32");
    });
    const big = be.stage(new Float32Array(1 << 16), [1 << 16], "f32") as CudaTensor; // covers the released region
    const after = decode();
    assert.ok(after >= big.ptr + big.bytes, "a fresh region, not one inside a live tensor");
  });

  it("sampleOnDevice packs the five row arrays into one upload and returns the kernel's ids", () => {
    const { be, fake } = setup();
    fake.sampleResult = [17, 3];
    const logits = be.stage(new Float32Array(2 * 50), [2, 50], "f32");
    const rows = {
      temperature: Float32Array.from([0, 0.5]),
      topK: Int32Array.from([0, 40]),
      topP: Float32Array.from([1, 0.75]),
      minP: Float32Array.from([0, 0.125]),
      uniform: Float32Array.from([0.25, 0.5]),
    };
    assert.deepEqual(be.sampleOnDevice(logits, rows), Int32Array.from([17, 3]));
    assert.deepEqual(fake.lastSampleRows, {
      temperature: [0, 0.5],
      topK: [0, 40],
      topP: [1, 0.75],
      minP: [0, 0.125],
      uniform: [0.25, 0.5],
    });
    assert.throws(
      () => be.sampleOnDevice(logits, { ...rows, topK: new Int32Array(3) }),
      /rows.topK has 3 entries for 2 rows/,
    );
    assert.equal(setup({ hasSampling: false }).be.sampleOnDevice(logits, rows), null);
  });

  it("linear passes T, N, K, dtype codes and the bias pointer to the skinny GEMM (T <= 8) or cuBLAS", () => {
    const { be, fake } = setup();
    const x = be.stage(new Float32Array(7 * 16), [7, 16], "bf16");
    const w = be.uploadWeight({ data: new Float32Array(24 * 16), dtype: "f32", shape: [24, 16] });
    const b = be.uploadWeight({ data: new Float32Array(24), dtype: "f32", shape: [24] });
    const ptrs = (y: Tensor) => [y, x, w, b].map((t) => (t as CudaTensor).ptr);
    // step 1: 7 rows <= the default limit 8: the skinny GEMM, plain epilogue (0)
    let y = be.linear(x, w, b, "f32");
    assert.deepEqual(y.shape, [7, 24]);
    assert.equal(fake.calls.at(-1)!.fn, "denseGemv");
    assert.deepEqual(fake.calls.at(-1)!.args.slice(1), [...ptrs(y), 7, 24, 16, 1, 0, 1, 0]);
    // step 2: the limit set to 0 (the old path): cuBLAS with the same operands
    be.denseGemvMaxTokens = 0;
    y = be.linear(x, w, b, "f32");
    assert.equal(fake.calls.at(-1)!.fn, "linear");
    assert.deepEqual(fake.calls.at(-1)!.args.slice(1), [...ptrs(y), 7, 24, 16, 1, 0, 1]);
    // step 3: gate_up + silu_and_mul: fused at 7 rows with a limit of 8 ([7, 12] out), else two ops
    be.denseGemvMaxTokens = 8;
    y = be.linearSiluAndMul(x, w, b);
    assert.deepEqual(y.shape, [7, 12]);
    assert.deepEqual(fake.calls.at(-1)!.args.slice(1), [...ptrs(y), 7, 24, 16, 1, 1, 1, 1]);
    be.denseGemvMaxTokens = 4;
    be.linearSiluAndMul(x, w, b);
    assert.deepEqual(
      fake.calls.slice(-2).map((c) => c.fn),
      ["linear", "siluAndMul"],
    );
    assert.throws(() => be.linear(x, w, null, "f16"), /output dtype must be bf16 or f32/);
    assert.throws(() => new CudaBackend({ addon: fake, denseGemvMaxTokens: 17 }), /integer in \[0, 16\]/);
  });

  it("linearRotaryEmbedding: one skinny GEMM with RoPE at full rotary and few rows, else linear + rotaryEmbedding", () => {
    const { be, fake } = setup();
    const layout = { numHeads: 2, numKvHeads: 1, headDim: 8 }; // qkv width (2 + 2) * 8 = 32
    const x = be.stage(new Float32Array(3 * 16), [3, 16], "bf16");
    const w = be.uploadWeight({ data: new Float32Array(32 * 16), dtype: "f32", shape: [32, 16] });
    const pos = be.stage(Int32Array.from([0, 1, 2]), [3], "i32");
    const full = be.upload(new Float32Array(10 * 8), [10, 8], "f32");
    const partial = be.upload(new Float32Array(10 * 4), [10, 4], "f32");
    // step 1: full rotary, 3 rows: denseGemvRope(y, x, w, bias, positions, cosSin, T, N, K, D, Hq + Hkv, maxPos, dtype, biasDtype)
    const y = be.linearRotaryEmbedding(x, w, null, layout, pos, full);
    assert.deepEqual(y.shape, [3, 32]);
    const call = fake.calls.at(-1)!;
    assert.equal(call.fn, "denseGemvRope");
    assert.deepEqual(call.args.slice(1), [
      ...[y, x, w].map((t) => (t as CudaTensor).ptr),
      0,
      ...[pos, full].map((t) => (t as CudaTensor).ptr),
      3,
      32,
      16,
      8,
      3,
      10,
      1,
      0,
    ]);
    // step 2: partial rotary (table width 4 < headDim 8): the two ops
    be.linearRotaryEmbedding(x, w, null, layout, pos, partial);
    assert.deepEqual(
      fake.calls.slice(-2).map((c) => c.fn),
      ["denseGemv", "rotaryEmbedding"],
    );
    // step 3: the old path (limit 0): cuBLAS + rotaryEmbedding
    be.denseGemvMaxTokens = 0;
    be.linearRotaryEmbedding(x, w, null, layout, pos, full);
    assert.deepEqual(
      fake.calls.slice(-2).map((c) => c.fn),
      ["linear", "rotaryEmbedding"],
    );
  });

  it("element-wise ops validate shapes and pass the layout", () => {
    const { be, fake } = setup();
    const qkv = be.stage(new Float32Array(3 * W), [3, W], "bf16");
    const pos = be.stage(new Int32Array(3), [3], "i32");
    const cs = be.upload(new Float32Array(10 * 8), [10, 8], "f32");
    be.rotaryEmbedding(qkv, layout, pos, cs);
    assert.deepEqual(fake.calls.at(-1)!.args.slice(4), [3, W, 6, 8, 8, 10, 1]);
    // Partial rotary: a table narrower than headDim rotates its width (R = 4 of 8 here).
    be.rotaryEmbedding(qkv, layout, pos, be.upload(new Float32Array(10 * 4), [10, 4], "f32"));
    assert.deepEqual(fake.calls.at(-1)!.args.slice(4), [3, W, 6, 8, 4, 10, 1]);
    assert.throws(
      () => be.rotaryEmbedding(qkv, layout, pos, be.upload(new Float32Array(10 * 16), [10, 16], "f32")),
      /cosSinCache width 16 must be even and in \[2, headDim 8\]/,
    );
    const x = be.stage(new Float32Array(3 * 10), [3, 10], "bf16");
    const out = be.siluAndMul(x);
    assert.deepEqual(out.shape, [3, 5]);
    assert.throws(() => be.siluAndMul(be.stage(new Float32Array(3), [1, 3], "bf16")), /must be even/);
  });
});
