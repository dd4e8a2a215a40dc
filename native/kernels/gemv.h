// Launcher of the memory-bound skinny GEMM ("GEMV") used by `linear` for small token counts
// (decode at batch 1 .. 16), where cuBLAS's split-K tiles leave HBM bandwidth unused and add a
// reduce kernel. Conventions as kernels.h (C ABI, asynchronous on `stream`, graph-capturable,
// fp32 accumulation, deterministic: each output is summed in a fixed order that depends only on
// the sizes, never on the grid's scheduling).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest numTokens hsDenseGemv accepts. */
#define HS_GEMV_MAX_TOKENS 16

/** What hsDenseGemv does with the fp32 sums (the "epilogue"). */
enum HsGemvEpilogue {
  /** y[m, n] = O(acc[m, n] + bias[n]) (the rounding of cuBLASLt's BIAS epilogue). */
  HS_GEMV_PLAIN = 0,
  /**
   * Gated MLP: w holds gate rows [0, n/2) then up rows [n/2, n); y [numTokens, n/2] of inDtype:
   * g = T(acc_g + bias_g), u = T(acc_u + bias_u), y = T(T(silu(g)) * u): bit for bit
   * hsSiluAndMul applied to the PLAIN output.
   */
  HS_GEMV_SILU_AND_MUL = 1,
};

/**
 * y = x @ w^T (+ bias) for numTokens <= HS_GEMV_MAX_TOKENS rows, reading w once with 16-byte
 * streaming loads (each CTA owns a few rows of w and splits K over its 8 warps).
 * x: [numTokens, k] of inDtype (bf16 | f16); w: [n, k] of inDtype, row-major (as loaded);
 * bias: [n] of biasDtype (f32 | bf16 | f16) or null; y: [numTokens, n] of outDtype (inDtype or
 * f32) for HS_GEMV_PLAIN, [numTokens, n/2] of inDtype for HS_GEMV_SILU_AND_MUL (n even).
 * k % 8 == 0 and x, w 16-byte aligned (cudaErrorInvalidValue otherwise, without a launch).
 */
cudaError_t hsDenseGemv(void* y, const void* x, const void* w, const void* bias, int numTokens, int n, int k,
                        int inDtype, int outDtype, int biasDtype, int epilogue, cudaStream_t stream);

/**
 * The fused q/k/v projection with NeoX RoPE (full rotary): qkv = x @ w^T (+ bias) rounded to T
 * as hsDenseGemv's plain epilogue, then the q and k heads (the first numRotHeads heads of
 * headDim columns) rotated exactly as hsRotaryEmbedding with rotaryDim = headDim (fp32 from the
 * T-rounded values, rounded once; rows with a position outside [0, maxPositions) unrotated).
 * x: [numTokens, k] of dtype (bf16 | f16); w: [n, k]; bias: [n] of biasDtype or null;
 * positions: i32 [numTokens]; cosSinCache: f32 [maxPositions, headDim]; y: [numTokens, n] of
 * dtype. n % headDim == 0, headDim even, k % 8 == 0, x and w 16-byte aligned.
 */
cudaError_t hsDenseGemvRope(void* y, const void* x, const void* w, const void* bias, const int32_t* positions,
                            const float* cosSinCache, int numTokens, int n, int k, int headDim, int numRotHeads,
                            int maxPositions, int dtype, int biasDtype, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
