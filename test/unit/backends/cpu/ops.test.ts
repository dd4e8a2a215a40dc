/**
 * Every row-wise op and the matmul of the CPU backend against a naive float64 formula on random
 * inputs (relative 1e-5, or exact where the op only moves data).
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import type { QkvLayout } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { assertClose, makeRand, randF32 } from "./helpers.js";

const backend = new CpuBackend({ numThreads: 1 });
after(() => backend.dispose());
const rand = makeRand(1234);

/** Naive HF LlamaRMSNorm of one row in float64. */
function naiveRmsNorm(x: ArrayLike<number>, w: ArrayLike<number>, eps: number): number[] {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i]! * x[i]!;
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  return Array.from(x, (v, i) => v * inv * w[i]!);
}

describe("embedding and gatherRows", () => {
  it("copies the rows named by the ids exactly", () => {
    const table = randF32(rand, 10 * 6);
    const ids = Int32Array.from([3, 0, 9, 3]);
    const out = backend.toHost(
      backend.embedding(backend.stage(ids, [4], "i32"), backend.upload(table, [10, 6], "f32")),
    );
    assert.deepEqual(out.length, 24);
    for (const [t, id] of ids.entries()) {
      assert.deepEqual([...out.subarray(t * 6, t * 6 + 6)], [...table.subarray(id * 6, id * 6 + 6)]);
    }
    const g = backend.toHost(
      backend.gatherRows(
        backend.stage(table, [10, 6], "f32"),
        backend.stage(Int32Array.from([9, 1]), [2], "i32"),
      ),
    );
    assert.deepEqual([...g], [...table.subarray(54, 60), ...table.subarray(6, 12)]);
    backend.resetWorkspace();
  });

  it("throws on an id outside the vocabulary", () => {
    const table = backend.upload(randF32(rand, 12), [4, 3], "f32");
    assert.throws(
      () => backend.embedding(backend.stage(Int32Array.from([4]), [1], "i32"), table),
      /index 4 .* outside \[0, 4\)/,
    );
    assert.throws(
      () => backend.embedding(backend.stage(Int32Array.from([-1]), [1], "i32"), table),
      /outside/,
    );
    backend.resetWorkspace();
  });
});

describe("rmsNorm and fusedAddRmsNorm", () => {
  it("rmsNorm equals x / sqrt(mean(x^2) + eps) * w per row", () => {
    const T = 5;
    const H = 37;
    const x = randF32(rand, T * H, 3);
    const w = randF32(rand, H);
    const out = backend.toHost(
      backend.rmsNorm(backend.stage(x, [T, H], "f32"), backend.upload(w, [H], "f32"), 1e-5),
    );
    for (let t = 0; t < T; t++) {
      assertClose(
        out.subarray(t * H, (t + 1) * H),
        naiveRmsNorm(x.subarray(t * H, (t + 1) * H), w, 1e-5),
        1e-5,
        1e-7,
        "rmsNorm",
      );
    }
    backend.resetWorkspace();
  });

  it("fusedAddRmsNorm: residual += x exactly in f32, then x = rmsNorm(residual) * w", () => {
    const T = 3;
    const H = 16;
    const x = randF32(rand, T * H);
    const r = randF32(rand, T * H);
    const w = randF32(rand, H);
    const xt = backend.stage(x, [T, H], "f32");
    const rt = backend.stage(r, [T, H], "f32");
    backend.fusedAddRmsNorm(xt, rt, backend.upload(w, [H], "f32"), 1e-6);
    const sum = Float32Array.from(r, (v, i) => v + x[i]!); // f32 rounding of the add
    assert.deepEqual([...backend.toHost(rt)], [...sum]);
    const xo = backend.toHost(xt);
    for (let t = 0; t < T; t++) {
      assertClose(
        xo.subarray(t * H, (t + 1) * H),
        naiveRmsNorm(sum.subarray(t * H, (t + 1) * H), w, 1e-6),
        1e-5,
        1e-7,
        "fused",
      );
    }
    backend.resetWorkspace();
  });

  it("rejects a weight of the wrong length", () => {
    assert.throws(
      () =>
        backend.rmsNorm(
          backend.stage(new Float32Array(8), [2, 4], "f32"),
          backend.upload(new Float32Array(3), [3], "f32"),
          1e-6,
        ),
      /rmsNorm weight: expected \[4\], got f32\[3\]/,
    );
    backend.resetWorkspace();
  });
});

describe("linear", () => {
  for (const [T, N, K, withBias] of [
    [1, 7, 5, false],
    [1, 64, 256, true],
    [2, 9, 33, true],
    [5, 13, 17, false],
    [8, 30, 64, true],
  ] as const) {
    it(`[${T}, ${K}] x [${N}, ${K}]^T${withBias ? " + bias" : ""} equals the float64 dot products`, () => {
      const x = randF32(rand, T * K);
      const w = randF32(rand, N * K);
      const b = randF32(rand, N);
      const bias = withBias ? backend.upload(b, [N], "f32") : null;
      const y = backend.toHost(
        backend.linear(backend.stage(x, [T, K], "f32"), backend.upload(w, [N, K], "f32"), bias),
      );
      const ref: number[] = [];
      for (let t = 0; t < T; t++) {
        for (let n = 0; n < N; n++) {
          let s = withBias ? b[n]! : 0;
          for (let k = 0; k < K; k++) s += x[t * K + k]! * w[n * K + k]!;
          ref.push(s);
        }
      }
      assertClose(y, ref, 1e-5, 1e-6, "linear");
      backend.resetWorkspace();
    });
  }

  it("gives each token the same bits whatever its row and the batch size (batch invariance)", () => {
    const K = 24;
    const N = 11;
    const x = randF32(rand, 5 * K);
    const w = backend.upload(randF32(rand, N * K), [N, K], "f32");
    const all = backend.toHost(backend.linear(backend.stage(x, [5, K], "f32"), w, null));
    for (let t = 0; t < 5; t++) {
      const one = backend.toHost(
        backend.linear(backend.stage(x.slice(t * K, (t + 1) * K), [1, K], "f32"), w, null),
      );
      assert.deepEqual([...one], [...all.subarray(t * N, (t + 1) * N)]);
    }
    backend.resetWorkspace();
  });

  it("throws when K differs between x and the weight", () => {
    assert.throws(
      () =>
        backend.linear(
          backend.stage(new Float32Array(6), [2, 3], "f32"),
          backend.upload(new Float32Array(8), [2, 4], "f32"),
          null,
        ),
      /linear weight: expected \[\*, 3\], got f32\[2, 4\]/,
    );
    backend.resetWorkspace();
  });
});

describe("qkNorm, rotaryEmbedding, siluAndMul", () => {
  const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 8 };
  const W = (4 + 2 * 2) * 8;

  it("qkNorm normalises every q and k head over headDim and leaves v untouched", () => {
    const T = 3;
    const x = randF32(rand, T * W, 2);
    const qw = randF32(rand, 8);
    const kw = randF32(rand, 8);
    const t = backend.stage(x, [T, W], "f32");
    backend.qkNorm(t, layout, backend.upload(qw, [8], "f32"), backend.upload(kw, [8], "f32"), 1e-6);
    const out = backend.toHost(t);
    for (let tok = 0; tok < T; tok++) {
      for (let h = 0; h < 8; h++) {
        const o = tok * W + h * 8;
        const seg = x.subarray(o, o + 8);
        const got = out.subarray(o, o + 8);
        if (h < 4) assertClose(got, naiveRmsNorm(seg, qw, 1e-6), 1e-5, 1e-7, "q head");
        else if (h < 6) assertClose(got, naiveRmsNorm(seg, kw, 1e-6), 1e-5, 1e-7, "k head");
        else assert.deepEqual([...got], [...seg]); // v heads unchanged
      }
    }
    backend.resetWorkspace();
  });

  it("rotaryEmbedding rotates (x_i, x_{i+D/2}) of q and k heads by pos * invFreq_i (direct formula)", () => {
    const T = 4;
    const D = 8;
    const maxPos = 50;
    const invFreq = [1, 0.1, 0.01, 0.001];
    const table = new Float32Array(maxPos * D);
    for (let p = 0; p < maxPos; p++) {
      for (let i = 0; i < 4; i++) {
        table[p * D + i] = Math.cos(p * invFreq[i]!);
        table[p * D + 4 + i] = Math.sin(p * invFreq[i]!);
      }
    }
    const pos = Int32Array.from([0, 7, 49, 13]);
    const x = randF32(rand, T * W);
    const t = backend.stage(x, [T, W], "f32");
    backend.rotaryEmbedding(
      t,
      layout,
      backend.stage(pos, [T], "i32"),
      backend.upload(table, [maxPos, D], "f32"),
    );
    const out = backend.toHost(t);
    for (let tok = 0; tok < T; tok++) {
      for (let h = 0; h < 8; h++) {
        const o = tok * W + h * D;
        const ref: number[] = [...x.subarray(o, o + D)];
        if (h < 6) {
          for (let i = 0; i < 4; i++) {
            const a = pos[tok]! * invFreq[i]!;
            ref[i] = x[o + i]! * Math.cos(a) - x[o + 4 + i]! * Math.sin(a);
            ref[4 + i] = x[o + 4 + i]! * Math.cos(a) + x[o + i]! * Math.sin(a);
          }
        }
        assertClose(out.subarray(o, o + D), ref, 1e-5, 1e-6, `token ${tok} head ${h}`);
      }
    }
    assert.throws(
      () =>
        backend.rotaryEmbedding(
          t,
          layout,
          backend.stage(Int32Array.from([0, 0, 50, 0]), [T], "i32"),
          backend.upload(table, [maxPos, D], "f32"),
        ),
      /position 50 of token 2 is outside the table's 50 positions/,
    );
    backend.resetWorkspace();
  });

  it("siluAndMul equals g / (1 + exp(-g)) * u", () => {
    const T = 3;
    const I = 10;
    const x = randF32(rand, T * 2 * I, 6);
    const out = backend.toHost(backend.siluAndMul(backend.stage(x, [T, 2 * I], "f32")));
    const ref: number[] = [];
    for (let t = 0; t < T; t++) {
      for (let i = 0; i < I; i++) {
        const g = x[t * 2 * I + i]!;
        ref.push((g / (1 + Math.exp(-g))) * x[t * 2 * I + I + i]!);
      }
    }
    assertClose(out, ref, 1e-5, 1e-7, "siluAndMul");
    backend.resetWorkspace();
  });
});
