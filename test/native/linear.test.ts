/**
 * `linear` (cuBLASLt with fused bias, and the cublasGemmEx + bias-kernel path) against a float64
 * GEMM on random bf16 inputs. GPU machine only.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { assertClose, BF16_TOL, F32_TOL, gpuSkip, makeBackend, Rng, randBf16 } from "./helpers.js";
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
