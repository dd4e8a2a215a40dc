/**
 * `linear` (cuBLASLt with fused bias, and the cublasGemmEx + bias-kernel path) against a float64
 * GEMM on random bf16 inputs. GPU machine only.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Tensor } from "../../src/backends/backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import {
  assertClose,
  assertSame,
  BF16_TOL,
  F32_TOL,
  gpuSkip,
  makeBackend,
  Rng,
  randBf16,
} from "./helpers.js";
import { linearRef } from "./reference.js";

const skip = gpuSkip();

for (const gemm of ["lt", "gemmex"] as const) {
  describe(`linear through ${gemm}`, { skip }, () => {
    let be: CudaBackend;
    const rng = new Rng(gemm === "lt" ? 7 : 8);
    before(() => {
      be = makeBackend({ gemm });
    });
    after(() => be?.dispose());

    it("reports the cuBLAS it loaded", () => {
      assert.equal(be.blas.mode, gemm);
      assert.ok(be.blas.version >= 120000, `cuBLASLt version ${be.blas.version}`);
      assert.match(be.blas.cublasPath, /libcublas\.so\.1[23]$/);
    });

    for (const [T, N, K] of [
      [1, 1024, 4096],
      [7, 512, 4096],
      [300, 384, 4096],
      [300, 6144, 128],
    ] as const) {
      for (const withBias of [false, true]) {
        for (const outDtype of ["bf16", "f32"] as const) {
          it(`T=${T} N=${N} K=${K} bias=${withBias} out=${outDtype}`, () => {
            be.resetWorkspace();
            be.fillUnusedWorkspace(0xff);
            const x = randBf16(rng, T * K);
            const w = randBf16(rng, N * K, 1 / Math.sqrt(K));
            const b = withBias ? randBf16(rng, N) : null;
            const wT = be.uploadWeight({ data: w, dtype: "f32", shape: [N, K] });
            const bT = b === null ? null : be.uploadWeight({ data: b, dtype: "f32", shape: [N] });
            const y = be.linear(be.stage(x, [T, K], "bf16"), wT, bT, outDtype);
            assert.deepEqual(y.shape, [T, N]);
            assert.equal(y.dtype, outDtype);
            const got = be.toHost(y) as Float32Array;
            // f32 output: only the fp32 accumulation order differs from float64 (bf16 products are exact).
            assertClose(
              got,
              linearRef(x, w, b, T, N, K),
              outDtype === "f32" ? 100 * F32_TOL : BF16_TOL,
              "linear",
            );
            be.free(wT);
            if (bT !== null) be.free(bT);
          });
        }
      }
    }

    it("rejects mismatched shapes with an Error", () => {
      be.resetWorkspace();
      const x = be.stage(new Float32Array(8 * 16), [8, 16], "bf16");
      const w = be.uploadWeight({ data: new Float32Array(4 * 32), dtype: "f32", shape: [4, 32] });
      assert.throws(() => be.linear(x, w, null), /linear weight: expected shape \[\*, 16\]/);
      be.free(w);
    });
  });
}

describe("the skinny GEMM (native/kernels/gemv.h) against cuBLAS and its fused epilogues", { skip }, () => {
  let be: CudaBackend;
  const rng = new Rng(20);
  before(() => {
    be = makeBackend({ denseGemvMaxTokens: 16 });
  });
  after(() => be?.dispose());

  /** Runs f with the skinny GEMM on (limit 16) or off (0), returning host values. */
  const run = (limit: number, f: () => Tensor): Float32Array => {
    be.denseGemvMaxTokens = limit;
    const out = be.toHost(f()) as Float32Array;
    be.denseGemvMaxTokens = 16;
    return out;
  };

  for (const [T, N, K] of [
    [1, 6144, 4096],
    [4, 4096, 14336],
    [16, 1000, 4096],
  ] as const) {
    it(`T=${T} N=${N} K=${K}: within 1e-3 (relative) of cuBLAS and of float64`, () => {
      be.resetWorkspace();
      const x = randBf16(rng, T * K);
      const w = randBf16(rng, N * K, 1 / Math.sqrt(K));
      const wT = be.uploadWeight({ data: w, dtype: "f32", shape: [N, K] });
      const xT = be.stage(x, [T, K], "bf16");
      const gemv = run(16, () => be.linear(xT, wT, null, "f32"));
      const cublas = run(0, () => be.linear(xT, wT, null, "f32"));
      assertClose(gemv, linearRef(x, w, null, T, N, K), 100 * F32_TOL, "gemv vs float64");
      assertClose(gemv, cublas, 100 * F32_TOL, "gemv vs cuBLAS");
      be.free(wT);
    });
  }

  it("linearSiluAndMul and linearRotaryEmbedding equal the unfused ops bit for bit", () => {
    be.resetWorkspace();
    const layout = { numHeads: 32, numKvHeads: 8, headDim: 128 };
    const [T, K, I, W] = [3, 512, 384, (32 + 16) * 128];
    const x = be.stage(randBf16(rng, T * K), [T, K], "bf16");
    const gateUp = be.uploadWeight({ data: randBf16(rng, 2 * I * K, 0.05), dtype: "f32", shape: [2 * I, K] });
    const qkvW = be.uploadWeight({ data: randBf16(rng, W * K, 0.05), dtype: "f32", shape: [W, K] });
    const bias = be.uploadWeight({ data: randBf16(rng, W), dtype: "f32", shape: [W] });
    const cos = new Float32Array(16 * 128);
    for (let p = 0; p < 16; p++)
      for (let i = 0; i < 64; i++) {
        const a = p * 10000 ** (-i / 64);
        cos[p * 128 + i] = Math.cos(a);
        cos[p * 128 + 64 + i] = Math.sin(a);
      }
    const cs = be.upload(cos, [16, 128], "f32");
    const pos = be.stage(Int32Array.from([5, -1, 15]), [T], "i32");
    const fusedSilu = be.toHost(be.linearSiluAndMul(x, gateUp, null)) as Float32Array;
    const refSilu = be.toHost(be.siluAndMul(be.linear(x, gateUp, null))) as Float32Array;
    assertSame(fusedSilu, refSilu, "gate_up + silu_and_mul");
    const fusedRope = be.toHost(be.linearRotaryEmbedding(x, qkvW, bias, layout, pos, cs)) as Float32Array;
    const qkv = be.linear(x, qkvW, bias);
    be.rotaryEmbedding(qkv, layout, pos, cs);
    assertSame(fusedRope, be.toHost(qkv) as Float32Array, "qkv + rope");
    for (const t of [gateUp, qkvW, bias, cs]) be.free(t);
  });
});
