/**
 * How CudaBackend's ops marshal arguments to the launchers, on a host-memory double of the addon
 * (fake_addon.ts): paged attention's decode and prefill kernels and their shared scratch, the
 * device sampler's row upload, `linear` and its fused forms on the skinny GEMM or cuBLAS, and the
 * element-wise ops' shape checks. Runs without a GPU; the real kernels are tested by test/native
 * on the GPU machine. Transfers, the workspace and graphs: cuda_backend.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { AttentionMetadata, Tensor } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import type { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { setup } from "./cuda_backend_fixture.js";

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
