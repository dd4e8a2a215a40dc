/**
 * `--calculate-kv-scales` in CudaBackend's TS layer (fake addon, fake_addon.ts): the first
 * reshapeAndCache of an fp8 layer launches hsKvAmax and reads its three words back, the scales
 * (amax / 200, amax / 100) then reach hsReshapeAndCacheFp8 and the attention params by value;
 * later batches launch no amax; an all-PAD batch leaves the layer waiting; a read-back during
 * graph capture is refused. The kernel itself: native/tests/attention_test_fp8.h fp8AmaxCase.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { QkvLayout } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { createFakeAddon } from "./fake_addon.js";

const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 8 };
const W = (4 + 2 * 2) * 8;

function setup(calculateScales: boolean) {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 1 << 20, stagingBytes: 1024 });
  const spec = { numLayers: 2, numBlocks: 4, blockSize: 16, numKvHeads: 2, headDim: 8 };
  const caches = be.allocateKvCache({ ...spec, dtype: "fp8", calculateScales });
  const write = (layer: number, slots: number[]) =>
    be.reshapeAndCache(
      be.stage(new Float32Array(slots.length * W), [slots.length, W], "bf16"),
      layout,
      caches[layer]!,
      be.stage(Int32Array.from(slots), [slots.length], "i32"),
      16,
    );
  const fns = () => fake.calls.map((c) => c.fn).filter((f) => f === "kvAmax" || f === "reshapeAndCacheFp8");
  /** The (kScale, vScale) arguments of the last hsReshapeAndCacheFp8. */
  const lastScales = () =>
    fake.calls
      .filter((c) => c.fn === "reshapeAndCacheFp8")
      .at(-1)!
      .args.slice(-2);
  return { be, fake, caches, write, fns, lastScales };
}

describe("CudaBackend --calculate-kv-scales (fake addon)", () => {
  it("step 1: the first batch measures amax once per layer; step 2: later batches reuse the scales", () => {
    const { be, fake, caches, write, fns, lastScales } = setup(true);
    fake.kvAmaxResult = [8, 3, 1];
    write(0, [0, -1, 5]);
    assert.deepEqual(fns(), ["kvAmax", "reshapeAndCacheFp8"]);
    const amax = fake.calls.find((c) => c.fn === "kvAmax")!;
    // (stream, qkv, slots, T, rowStride, Hq, Hkv, D, out)
    assert.deepEqual(amax.args.slice(3, 8), [3, W, 4, 2, 8]);
    assert.deepEqual(lastScales(), [Math.fround(0.04), Math.fround(0.03)]);
    fake.kvAmaxResult = [100, 100, 1];
    write(0, [6]);
    assert.deepEqual(lastScales(), [Math.fround(0.04), Math.fround(0.03)], "fixed after the first batch");
    write(1, [6]); // layer 1's first batch: its own amax
    assert.deepEqual(fns(), [
      "kvAmax",
      "reshapeAndCacheFp8",
      "reshapeAndCacheFp8",
      "kvAmax",
      "reshapeAndCacheFp8",
    ]);
    assert.deepEqual(lastScales(), [Math.fround(0.5), Math.fround(1)]);
    assert.deepEqual({ ...be.kvCacheScales(caches[1]!) }, { kScale: 0.5, vScale: 1, pending: false });
    // Attention reads layer 0 with its scales.
    const meta = stageAttentionMetadata(be, {
      queryStartLoc: Int32Array.from([0, 1]),
      seqLens: Int32Array.from([7]),
      blockTables: new Int32Array(4),
      maxBlocksPerReq: 4,
      slotMapping: new Int32Array(1),
      positions: new Int32Array(1),
      maxQueryLen: 1,
      maxSeqLen: 7,
    });
    be.pagedAttention(be.stage(new Float32Array(W), [1, W], "bf16"), layout, caches[0]!, meta, 16);
    const p = fake.calls.at(-1)!.params!;
    assert.deepEqual([p.kvCacheFp8, p.kScale, p.vScale], [1, Math.fround(0.04), Math.fround(0.03)]);
  });

  it("an all-PAD batch (no token flagged) leaves the layer at 1.0, waiting for a real batch", () => {
    const { be, fake, caches, write, lastScales } = setup(true);
    write(0, [-1, -1]);
    assert.deepEqual(lastScales(), [1, 1]);
    assert.equal(be.kvCacheScales(caches[0]!)!.pending, true);
    fake.kvAmaxResult = [2, 1, 1];
    write(0, [3]);
    assert.deepEqual(lastScales(), [Math.fround(0.01), Math.fround(0.01)]);
  });

  it("without the flag no amax is launched and the scales stay 1.0", () => {
    const { fake, write, fns, lastScales } = setup(false);
    fake.kvAmaxResult = [8, 3, 1];
    write(0, [0]);
    assert.deepEqual(fns(), ["reshapeAndCacheFp8"]);
    assert.deepEqual(lastScales(), [1, 1]);
  });

  it("a layer still waiting when a graph is captured is refused (the read-back cannot be captured)", () => {
    const { be, caches } = setup(true);
    const qkv = be.upload(new Float32Array(W), [1, W], "bf16");
    const slots = be.upload(Int32Array.from([0]), [1], "i32");
    assert.throws(
      () => be.graphs.capture(() => be.reshapeAndCache(qkv, layout, caches[0]!, slots, 16)),
      /a device read is not allowed during CUDA graph capture/,
    );
  });
});
