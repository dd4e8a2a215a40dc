/**
 * CUDA element-wise ops against float64 references on random inputs (GPU machine only; skipped
 * elsewhere). Each op runs on a poisoned workspace (NaN bytes) so an unwritten output fails.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { QkvLayout, Tensor } from "../../src/backends/backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { roundBf16 } from "../../src/backends/cuda/half.js";
import type { CudaTensor } from "../../src/backends/cuda/tensor.js";
import { buildCosSinCache, computeInvFreq } from "../../src/models/rope.js";
import {
  assertClose,
  assertSame,
  BF16_TOL,
  F32_TOL,
  gpuSkip,
  makeBackend,
  Rng,
  randBf16,
  randF32,
} from "./helpers.js";
import { cacheIndex, gatherRowsRef, qkNormRef, rmsNormRef, ropeRef, siluAndMulRef } from "./reference.js";

const skip = gpuSkip();
const TOKENS = [1, 7, 300];

describe("CUDA element-wise ops", { skip }, () => {
  let be: CudaBackend;
  const rng = new Rng(1234);
  before(() => {
    be = makeBackend();
  });
  after(() => be?.dispose());

  /** Resets the workspace and poisons it. */
  function fresh(): void {
    be.resetWorkspace();
    be.fillUnusedWorkspace(0xff);
  }
  const host = (t: Tensor) => be.toHost(t) as Float32Array;

  it("embedding gathers rows, zero rows for out-of-range ids (T = 1, 7, 300; H = 4096)", () => {
    const V = 1000;
    const H = 4096;
    const tableData = randBf16(rng, V * H);
    const table = be.upload(tableData, [V, H], "bf16");
    for (const T of TOKENS) {
      fresh();
      const ids = Int32Array.from({ length: T }, () => rng.int(0, V));
      if (T > 1) ids[T - 1] = -1; // a padded row
      if (T > 2) ids[T - 2] = V; // out of range
      const out = be.embedding(be.stage(ids, [T], "i32"), table);
      assert.deepEqual(out.shape, [T, H]);
      assertSame(host(out), gatherRowsRef(tableData, H, V, ids), `embedding T=${T}`);
    }
    be.free(table);
  });

  it("gatherRows picks rows of bf16 and f32 tensors", () => {
    for (const dtype of ["bf16", "f32"] as const) {
      fresh();
      const T = 300;
      const H = 96;
      const data = dtype === "bf16" ? randBf16(rng, T * H) : randF32(rng, T * H);
      const x = be.stage(data, [T, H], dtype);
      const idx = Int32Array.from([299, 0, 17, 17, 150]);
      const out = be.gatherRows(x, be.stage(idx, [5], "i32"));
      assertSame(host(out), gatherRowsRef(data, H, T, idx), `gatherRows ${dtype}`);
    }
  });

  it("rmsNorm matches the float64 formula (bf16 and f32, H = 4096 and 96)", () => {
    for (const [dtype, tol] of [
      ["bf16", BF16_TOL],
      ["f32", F32_TOL],
    ] as const) {
      for (const H of [4096, 96]) {
        const wData = Float32Array.from(randBf16(rng, H, 0.1), (v) => roundBf16(1 + v));
        const w = be.upload(wData, [H], "bf16");
        for (const T of TOKENS) {
          fresh();
          const xData = dtype === "bf16" ? randBf16(rng, T * H, 2) : randF32(rng, T * H, 2);
          const out = be.rmsNorm(be.stage(xData, [T, H], dtype), w, 1e-5);
          // bf16 output also carries the intermediate rounding of HF's `weight * x.to(bf16)`.
          assertClose(host(out), rmsNormRef(xData, wData, T, H, 1e-5), tol, `rmsNorm ${dtype} T=${T} H=${H}`);
        }
        be.free(w);
      }
    }
  });

  it("fusedAddRmsNorm: residual = bf16(x + residual) exactly, x = rmsNorm(residual) * w", () => {
    const H = 4096;
    const wData = Float32Array.from(randBf16(rng, H, 0.1), (v) => roundBf16(1 + v));
    const w = be.upload(wData, [H], "bf16");
    for (const T of TOKENS) {
      fresh();
      const xData = randBf16(rng, T * H);
      const rData = randBf16(rng, T * H, 3);
      const x = be.stage(xData, [T, H], "bf16");
      const r = be.stage(rData, [T, H], "bf16");
      be.fusedAddRmsNorm(x, r, w, 1e-6);
      const sum = Float32Array.from(xData, (v, i) => roundBf16(Math.fround(v + rData[i]!)));
      assertSame(host(r), sum, `residual T=${T}`);
      assertClose(host(x), rmsNormRef(sum, wData, T, H, 1e-6), BF16_TOL, `fusedAddRmsNorm T=${T}`);
    }
    be.free(w);
  });

  it("siluAndMul matches silu(g) * u (bf16 and f32; I = 14336 and 100)", () => {
    for (const [dtype, tol] of [
      ["bf16", BF16_TOL],
      ["f32", F32_TOL],
    ] as const) {
      for (const I of [14336, 100]) {
        for (const T of [1, 7, 64]) {
          fresh();
          const xData = dtype === "bf16" ? randBf16(rng, T * 2 * I, 2) : randF32(rng, T * 2 * I, 2);
          const out = be.siluAndMul(be.stage(xData, [T, 2 * I], dtype));
          assert.deepEqual(out.shape, [T, I]);
          assertClose(host(out), siluAndMulRef(xData, T, I), tol, `siluAndMul ${dtype} T=${T} I=${I}`);
        }
      }
    }
  });

  it("rotaryEmbedding rotates q and k heads (NeoX), leaves v and padded rows untouched", () => {
    const rope = {
      type: "llama3",
      theta: 500000,
      factor: 8,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    } as const;
    // R < D: partial rotary (GLM-4.5: R = D / 2; dims [R, D) stay as they are).
    for (const [layout, R] of [
      [{ numHeads: 32, numKvHeads: 8, headDim: 128 }, 128],
      [{ numHeads: 4, numKvHeads: 2, headDim: 64 }, 64],
      [{ numHeads: 12, numKvHeads: 4, headDim: 128 }, 64],
      [{ numHeads: 4, numKvHeads: 2, headDim: 32 }, 16],
      [{ numHeads: 2, numKvHeads: 1, headDim: 64 }, 12],
    ] satisfies [QkvLayout, number][]) {
      const D = layout.headDim;
      const W = (layout.numHeads + 2 * layout.numKvHeads) * D;
      const maxPos = 4096;
      const cosSin = buildCosSinCache(computeInvFreq({ ...rope }, R), maxPos);
      const cs = be.upload(cosSin, [maxPos, R], "f32");
      for (const T of TOKENS) {
        for (const [dtype, tol] of [
          ["bf16", BF16_TOL],
          ["f32", F32_TOL],
        ] as const) {
          fresh();
          const qkvData = dtype === "bf16" ? randBf16(rng, T * W) : randF32(rng, T * W);
          const pos = Int32Array.from({ length: T }, () => rng.int(0, maxPos));
          if (T > 1) pos[0] = -1; // padded row
          const qkv = be.stage(qkvData, [T, W], dtype);
          be.rotaryEmbedding(qkv, layout, be.stage(pos, [T], "i32"), cs);
          const got = host(qkv);
          const ref = ropeRef(qkvData, T, layout, pos, cosSin, maxPos, R);
          assertClose(got, ref, tol, `rope ${dtype} D=${D} R=${R} T=${T}`);
          const qkEnd = (layout.numHeads + layout.numKvHeads) * D;
          for (let t = 0; t < T; t++) {
            const unchanged = pos[t] === -1 ? [0, W] : [qkEnd, W];
            assertSame(
              got.subarray(t * W + unchanged[0]!, t * W + unchanged[1]!),
              qkvData.subarray(t * W + unchanged[0]!, t * W + unchanged[1]!),
              `rope untouched part of row ${t}`,
            );
            if (pos[t] === -1) continue;
            for (let h = 0; h < layout.numHeads + layout.numKvHeads; h++) {
              const o = t * W + h * D;
              assertSame(
                got.subarray(o + R, o + D),
                qkvData.subarray(o + R, o + D),
                `rope dims [R, D) of row ${t}`,
              );
            }
          }
        }
      }
      be.free(cs);
    }
  });

  it("qkNorm normalises each q and k head, leaves v heads untouched", () => {
    const layout = { numHeads: 16, numKvHeads: 4, headDim: 128 };
    const D = layout.headDim;
    const W = (layout.numHeads + 2 * layout.numKvHeads) * D;
    const qw = Float32Array.from(randBf16(rng, D, 0.2), (v) => roundBf16(1 + v));
    const kw = Float32Array.from(randBf16(rng, D, 0.2), (v) => roundBf16(1 + v));
    const qwT = be.upload(qw, [D], "bf16");
    const kwT = be.upload(kw, [D], "bf16");
    for (const T of TOKENS) {
      fresh();
      const data = randBf16(rng, T * W, 3);
      const qkv = be.stage(data, [T, W], "bf16");
      be.qkNorm(qkv, layout, qwT, kwT, 1e-6);
      const got = host(qkv);
      assertClose(got, qkNormRef(data, T, layout, qw, kw, 1e-6), BF16_TOL, `qkNorm T=${T}`);
      const vStart = (layout.numHeads + layout.numKvHeads) * D;
      for (let t = 0; t < T; t++) {
        assertSame(
          got.subarray(t * W + vStart, (t + 1) * W),
          data.subarray(t * W + vStart, (t + 1) * W),
          "v heads",
        );
      }
    }
  });

  it("qkNormRotaryEmbedding equals qkNorm then rotaryEmbedding bit for bit (full and partial rotary, padded rows)", () => {
    const rope = {
      type: "default",
      theta: 1000000,
      factor: 1,
      lowFreqFactor: 1,
      highFreqFactor: 1,
      originalMaxPositionEmbeddings: 0,
    } as const;
    for (const [layout, R] of [
      [{ numHeads: 32, numKvHeads: 4, headDim: 128 }, 128],
      [{ numHeads: 4, numKvHeads: 2, headDim: 32 }, 16],
      [{ numHeads: 2, numKvHeads: 1, headDim: 64 }, 12],
    ] satisfies [QkvLayout, number][]) {
      const D = layout.headDim;
      const W = (layout.numHeads + 2 * layout.numKvHeads) * D;
      const maxPos = 1024;
      const cs = be.upload(buildCosSinCache(computeInvFreq({ ...rope }, R), maxPos), [maxPos, R], "f32");
      const qw = Float32Array.from(randBf16(rng, D, 0.2), (v) => roundBf16(1 + v));
      const kw = Float32Array.from(randBf16(rng, D, 0.2), (v) => roundBf16(1 + v));
      const [qwT, kwT] = [be.upload(qw, [D], "bf16"), be.upload(kw, [D], "bf16")];
      for (const T of TOKENS) {
        fresh();
        const data = randBf16(rng, T * W, 3);
        const pos = Int32Array.from({ length: T }, () => rng.int(0, maxPos));
        if (T > 1) pos[0] = -1; // padded row: normed, not rotated
        const posT = be.stage(pos, [T], "i32");
        const a = be.stage(data, [T, W], "bf16");
        be.qkNorm(a, layout, qwT, kwT, 1e-6);
        be.rotaryEmbedding(a, layout, posT, cs);
        const b = be.stage(data, [T, W], "bf16");
        be.qkNormRotaryEmbedding(b, layout, qwT, kwT, 1e-6, posT, cs);
        assertSame(host(b), host(a), `qkNormRotaryEmbedding D=${D} R=${R} T=${T}`);
      }
      for (const t of [cs, qwT, kwT]) be.free(t);
    }
  });

  it("reshapeAndCache writes K/V to their slots (block sizes 16/32/64), skips slot -1", () => {
    const layout = { numHeads: 8, numKvHeads: 2, headDim: 128 };
    const D = layout.headDim;
    const W = (layout.numHeads + 2 * layout.numKvHeads) * D;
    for (const blockSize of [16, 32, 64]) {
      const numBlocks = 24;
      const g = { numBlocks, blockSize, numKvHeads: layout.numKvHeads, headDim: D };
      const [cache] = be.allocateKvCache({ numLayers: 1, dtype: "bf16", ...g });
      const c = cache as CudaTensor;
      assert.ok(
        host(c).every((v) => v === 0),
        "allocateKvCache returns zeroed caches",
      );
      be.addon.memsetAsync(c.ptr, 0xff, c.bytes, be.stream); // poison: untouched slots stay NaN
      const T = 300;
      fresh();
      const data = randBf16(rng, T * W);
      const slots = Int32Array.from(rng.permutation(numBlocks * blockSize).slice(0, T));
      slots[5] = -1;
      be.reshapeAndCache(be.stage(data, [T, W], "bf16"), layout, c, be.stage(slots, [T], "i32"), blockSize);
      const got = host(c);
      const written = new Set<number>();
      for (let t = 0; t < T; t++) {
        const slot = slots[t]!;
        if (slot < 0) continue;
        written.add(slot);
        for (let h = 0; h < layout.numKvHeads; h++) {
          for (let d = 0; d < D; d++) {
            const k = data[t * W + (layout.numHeads + h) * D + d]!;
            const v = data[t * W + (layout.numHeads + layout.numKvHeads + h) * D + d]!;
            assert.equal(got[cacheIndex(g, slot, 0, h, d)], k);
            assert.equal(got[cacheIndex(g, slot, 1, h, d)], v);
          }
        }
      }
      let untouched = 0;
      for (let slot = 0; slot < numBlocks * blockSize; slot++) {
        if (written.has(slot)) continue;
        assert.ok(Number.isNaN(got[cacheIndex(g, slot, 0, 0, 0)]), `slot ${slot} must stay untouched`);
        untouched++;
      }
      assert.equal(untouched, numBlocks * blockSize - (T - 1));
      be.free(c);
    }
  });
});
