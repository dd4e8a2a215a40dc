/**
 * The TS layer of the CUDA backend's MLA and DSA indexer ops (src/backends/cuda/mla_ops.ts) on the
 * host-memory double of the addon: which launchers run in which order with which sizes, the named
 * parameter objects (checked field by field against addon_params.ts), the split-KV workspace,
 * output shapes and the one-sentence errors. The kernels themselves are checked by
 * native/tests/mla_test.cu (emulator and GPU) and test/native/mla.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MlaDims } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { createFakeAddon } from "./fake_addon.js";

function setup() {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 8 << 20, stagingBytes: 1024 });
  return { be, fake, last: () => fake.calls.at(-1)! };
}

const DIMS: MlaDims = {
  numHeads: 4,
  qkNopeHeadDim: 32,
  qkRopeHeadDim: 16,
  vHeadDim: 32,
  kvLoraRank: 64,
  softmaxScale: 0.125,
};

/** Two decodes over 3-block tables (block size 16). */
function decodeMeta(be: CudaBackend) {
  return stageAttentionMetadata(be, {
    queryStartLoc: Int32Array.from([0, 1, 2]),
    seqLens: Int32Array.from([40, 7]),
    blockTables: Int32Array.from([0, 1, 2, 3, 4, 5]),
    maxBlocksPerReq: 3,
    slotMapping: Int32Array.from([39, 54]),
    positions: Int32Array.from([39, 6]),
    maxQueryLen: 1,
    maxSeqLen: 40,
  });
}

describe("CUDA Backend.mla marshalling (fake addon)", () => {
  it("attention: absorb, attention (named params), output projection, in that order", () => {
    const { be, fake } = setup();
    const meta = decodeMeta(be);
    const q = be.stage(new Float32Array(2 * 4 * 48), [2, 4 * 48], "bf16");
    const cache = be.mla.allocatePagedRows(6, 16, 80, "bf16");
    const kvB = be.uploadWeight({ data: new Float32Array(4 * 64 * 64), dtype: "f32", shape: [4 * 64, 64] });
    const sel = be.stage(new Int32Array(2 * 32), [2, 32], "i32");
    for (const topk of [null, sel]) {
      fake.calls.length = 0;
      const out = be.mla.attention(q, cache, kvB, meta, DIMS, 16, topk);
      assert.deepEqual([out.shape, out.dtype], [[2, 128], "bf16"]);
      assert.deepEqual(
        fake.calls.map((c) => c.fn),
        ["mlaAbsorbQuery", "mlaAttention", "mlaOutProject"],
      );
      const [absorb, attn, proj] = fake.calls;
      assert.deepEqual(absorb!.args.slice(5), [2, 4, 32, 16, 32, 64]);
      const p = attn!.params as Record<string, number>;
      assert.deepEqual(
        [p.numTokens, p.numReqs, p.numHeads, p.rank, p.ropeDim, p.blockSize, p.maxBlocksPerReq, p.maxContext],
        [2, 2, 4, 64, 16, 16, 3, 48],
      );
      assert.equal(p.topkStride, topk === null ? 0 : 32);
      assert.equal(p.topkIndices === 0, topk === null);
      assert.equal(p.qAbs, absorb!.args[4]);
      assert.equal(proj!.args[1], p.oLat);
      assert.deepEqual(proj!.args.slice(4), [1, 2, 4, 32, 32, 64]);
    }
  });

  it("attention refuses dims past the kernels' limits and a cache of another row width", () => {
    const { be } = setup();
    const meta = decodeMeta(be);
    const q = be.stage(new Float32Array(2 * 4 * 48), [2, 4 * 48], "bf16");
    const cache = be.mla.allocatePagedRows(6, 16, 80, "bf16");
    const kvB = be.uploadWeight({ data: new Float32Array(4 * 64 * 64), dtype: "f32", shape: [4 * 64, 64] });
    assert.throws(
      () => be.mla.attention(q, cache, kvB, meta, { ...DIMS, kvLoraRank: 1024 }, 16, null),
      /kv_lora_rank <= 512/,
    );
    const narrow = be.mla.allocatePagedRows(6, 16, 64, "bf16");
    assert.throws(() => be.mla.attention(q, narrow, kvB, meta, DIMS, 16, null), /latentCache/);
    assert.throws(() => be.mla.allocatePagedRows(6, 16, 80, "f16"), /bf16 or f32/);
  });

  it("indexer logits are f32 [T, width]; width below the longest context is refused; top-k is i32 [T, k]", () => {
    const { be, last } = setup();
    const meta = decodeMeta(be);
    const keys = be.mla.allocatePagedRows(6, 16, 32, "bf16");
    const q = be.stage(new Float32Array(2 * 4 * 32), [2, 128], "bf16");
    const w = be.stage(new Float32Array(2 * 4), [2, 4], "bf16");
    const scales = { softmaxScale: 0.17, headWeightScale: 0.5 };
    const logits = be.mla.indexerLogits(q, w, keys, meta, 16, scales, 48);
    assert.deepEqual([logits.shape, logits.dtype], [[2, 48], "f32"]);
    const p = last().params as Record<string, number>;
    assert.deepEqual([p.numHeads, p.headDim, p.width, p.numTokens, p.keyDtype], [4, 32, 48, 2, 1]);
    assert.throws(
      () => be.mla.indexerLogits(q, w, keys, meta, 16, scales, 39),
      /below the step's longest context/,
    );
    const pos = be.stage(Int32Array.from([39, 6]), [2], "i32");
    const sel = be.mla.topkIndices(logits, pos, 32);
    assert.deepEqual([sel.shape, sel.dtype], [[2, 32], "i32"]);
    assert.deepEqual([last().fn, ...last().args.slice(4)], ["mlaTopk", 2, 48, 32]);
  });

  it("rows: writeRows, rotaryStrided, layerNorm and sliceColumns pass their sizes", () => {
    const { be, last } = setup();
    const cache = be.mla.allocatePagedRows(6, 16, 80, "bf16");
    const src = be.stage(new Float32Array(2 * 16), [2, 16], "bf16");
    const slots = be.stage(Int32Array.from([39, -1]), [2], "i32");
    be.mla.writeRows(src, cache, 64, slots);
    assert.deepEqual([last().fn, ...last().args.slice(6)], ["mlaWriteRows", 2, 16, 80, 64, 96]);
    assert.throws(() => be.mla.writeRows(src, cache, 65, slots), /outside a row of 80/);
    const cs = be.stage(new Float32Array(64 * 16), [64, 16], "f32");
    const pos = be.stage(Int32Array.from([3, 4]), [2], "i32");
    const x = be.stage(new Float32Array(2 * 192), [2, 192], "bf16");
    be.mla.rotaryStrided(x, { offset: 32, stride: 48, count: 4 }, pos, cs, true);
    assert.deepEqual(
      [last().fn, ...last().args.slice(5)],
      ["mlaRotaryStrided", 2, 192, 32, 48, 4, 16, 64, 1],
    );
    assert.throws(
      () => be.mla.rotaryStrided(x, { offset: 40, stride: 48, count: 4 }, pos, cs, true),
      /do not fit/,
    );
    const n = be.stage(new Float32Array(2 * 32), [2, 32], "bf16");
    const wt = be.uploadWeight({ data: new Float32Array(32), dtype: "f32", shape: [32] });
    assert.deepEqual(be.mla.layerNorm(n, wt, wt, 1e-6).shape, [2, 32]);
    assert.equal(last().fn, "mlaLayerNorm");
    assert.deepEqual(be.mla.sliceColumns(x, 5, 7).shape, [2, 7]);
    assert.deepEqual([last().fn, ...last().args.slice(3)], ["mlaSliceColumns", 2, 192, 5, 7, 2]);
  });
});
