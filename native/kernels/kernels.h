// Launchers of the element-wise, normalisation, RoPE, copy and cast kernels of the CUDA backend.
// Plain C ABI so that the addon (native/addon/*.cc, compiled by the host C++ compiler) calls them
// without seeing CUDA C++ templates. The attention and sampling launchers live in attention.h and
// sampling.h with the same conventions.
//
// Conventions (every launcher):
// - Pointers are device pointers (or UVA host pointers); shapes are row-major, sizes in elements
//   unless a name ends in "Bytes".
// - Launches are asynchronous on `stream`; the return value is cudaGetLastError() after the
//   launch (cudaErrorInvalidValue for an unsupported dtype or an invalid size, without a launch).
// - The grid depends only on the sizes passed in (padded token counts, model dims), never on the
//   contents of device memory, so every launch can be captured in a CUDA graph and replayed.
// - Zero rows (numTokens == 0) launch nothing and return cudaSuccess.
// - Accumulation is fp32; bf16/f16 results are rounded to nearest even once per stored value,
//   at the points where HF transformers rounds (named per kernel).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Element type codes; must match DTYPE_CODE in src/backends/cuda/addon.ts. */
/** Element types; HS_DTYPE_FP8 (OCP e4m3, fp8.cuh) is a KV cache storage type only. */
enum HsDtype { HS_DTYPE_F32 = 0, HS_DTYPE_BF16 = 1, HS_DTYPE_F16 = 2, HS_DTYPE_I32 = 3, HS_DTYPE_FP8 = 4 };

/** Bytes per element of a dtype code, 0 for an unknown code. */
size_t hsDtypeBytes(int dtype);

/**
 * out[r] = src[indices[r] - firstIndex] for r < numRows, copying rowBytes bytes per row (embedding
 * lookup, gatherRows; firstIndex: the first vocabulary row of a vocab-parallel shard, else 0).
 * A source row outside [0, numSrcRows) yields a zero row (padded batch rows, other ranks' tokens).
 * out: [numRows, rowBytes]; src: [numSrcRows, rowBytes]; indices: i32 [numRows].
 */
cudaError_t hsGatherRows(void* out, const void* src, const int32_t* indices, int numRows, int numSrcRows,
                         size_t rowBytes, int firstIndex, cudaStream_t stream);

/**
 * RMSNorm per row (HF LlamaRMSNorm): inv = rsqrt(mean(x^2) + eps) in fp32;
 * out = T(w * T(x * inv)) (the two roundings of HF's `weight * hidden.to(input_dtype)`).
 * x, out: [numTokens, hidden] of xDtype (f32 | bf16 | f16); weight: [hidden] of wDtype.
 */
cudaError_t hsRmsNorm(void* out, const void* x, const void* weight, int numTokens, int hidden, float eps,
                      int xDtype, int wDtype, cudaStream_t stream);

/**
 * In place, vLLM fused_add_rms_norm: residual = T(x + residual); x = rmsNorm(residual) * weight
 * with the roundings of hsRmsNorm. x, residual: [numTokens, hidden] of xDtype; weight: [hidden].
 */
cudaError_t hsFusedAddRmsNorm(void* x, void* residual, const void* weight, int numTokens, int hidden, float eps,
                              int xDtype, int wDtype, cudaStream_t stream);

/**
 * In place, Qwen3 q_norm / k_norm: RMSNorm over headDim of each q head (with qWeight) and each k
 * head (with kWeight) of a fused qkv row. qkv: [numTokens, rowStride] (q heads, then k heads,
 * then v heads, each headDim wide); qWeight, kWeight: [headDim] of wDtype.
 */
cudaError_t hsQkNorm(void* qkv, const void* qWeight, const void* kWeight, int numTokens, int rowStride,
                     int numHeads, int numKvHeads, int headDim, float eps, int dtype, int wDtype,
                     cudaStream_t stream);

/**
 * hsQkNorm then hsRotaryEmbedding (numRotHeads = numHeads + numKvHeads) in one launch, equal bit
 * for bit to the two (qk_norm_rope.cu): Qwen3's attention prologue. Same arguments as the two;
 * headDim <= 512.
 */
cudaError_t hsQkNormRotaryEmbedding(void* qkv, const void* qWeight, const void* kWeight, const int32_t* positions,
                                    const float* cosSinCache, int numTokens, int rowStride, int numHeads,
                                    int numKvHeads, int headDim, int rotaryDim, int maxPositions, float eps,
                                    int dtype, int wDtype, cudaStream_t stream);

/**
 * In place NeoX ("rotate_half") rotary embedding of the first numRotHeads heads of each row
 * (q heads then k heads of a fused qkv row), over the first R = rotaryDim dims of each head
 * (R = headDim: full rotary; R < headDim: partial rotary, dims [R, headDim) untouched): for i < R/2,
 *   x_i' = x_i cos - x_{i+R/2} sin,  x_{i+R/2}' = x_{i+R/2} cos + x_i sin,
 * computed in fp32 from cosSinCache f32 [maxPositions, R] (cos in [:, :R/2], sin in [:, R/2:],
 * models/rope.ts) and rounded once. Rows whose position is outside [0, maxPositions) are left
 * unchanged. qkv: [numTokens, rowStride]; positions: i32 [numTokens]. R even, 2 <= R <= headDim.
 */
cudaError_t hsRotaryEmbedding(void* qkv, const int32_t* positions, const float* cosSinCache, int numTokens,
                              int rowStride, int numRotHeads, int headDim, int rotaryDim, int maxPositions,
                              int dtype, cudaStream_t stream);

/**
 * out = T(T(silu(x[:, :I])) * x[:, I:]) with silu(g) = g / (1 + exp(-g)) in fp32 (vLLM
 * silu_and_mul, HF `act_fn(gate) * up`). x: [numTokens, 2 * intermediate]; out: [numTokens, intermediate].
 */
cudaError_t hsSiluAndMul(void* out, const void* x, int numTokens, int intermediate, int dtype, cudaStream_t stream);

/**
 * vLLM reshape_and_cache: writes the k and v heads of each qkv row into the paged cache at its
 * slot (block = slot / blockSize, offset = slot % blockSize). Slots < 0 (PAD_SLOT_ID) or
 * >= numBlocks * blockSize are skipped. qkv: [numTokens, rowStride] with k at column
 * numHeads*headDim and v right after; kvCache: [numBlocks, 2, blockSize, numKvHeads, headDim] of
 * the same dtype; slotMapping: i32 [numTokens].
 */
cudaError_t hsReshapeAndCache(const void* qkv, void* kvCache, const int32_t* slotMapping, int numTokens,
                              int rowStride, int numHeads, int numKvHeads, int headDim, int blockSize,
                              int numBlocks, int dtype, cudaStream_t stream);

/**
 * reshape_and_cache into an fp8 (e4m3) cache (vLLM reshape_and_cache_flash with kv_cache_dtype
 * "fp8"): like hsReshapeAndCache, but qkv is bf16 and each K (V) element is stored as
 * e4m3(x / kScale) (e4m3(x / vScale)), rounded as fp8.cuh floatToE4m3. kvCache: uint8
 * [numBlocks, 2, blockSize, numKvHeads, headDim]. kScale, vScale > 0.
 */
cudaError_t hsReshapeAndCacheFp8(const void* qkv, void* kvCache, const int32_t* slotMapping, int numTokens,
                                 int rowStride, int numHeads, int numKvHeads, int headDim, int blockSize,
                                 int numBlocks, float kScale, float vScale, cudaStream_t stream);

/**
 * `--calculate-kv-scales` (vLLM calc_kv_scales): amax |k| and amax |v| over the K and V heads of
 * the bf16 qkv rows [numTokens, rowStride] whose slot is >= 0. out: 3 x u32 (zeroed here, then
 * written in stream order): out[0] / out[1] the f32 bits of amax |k| / |v| (NaN if any element
 * is NaN), out[2] 1 when some token has a slot, else 0 (amaxes 0).
 */
cudaError_t hsKvAmax(const void* qkv, const int32_t* slotMapping, int numTokens, int rowStride, int numHeads,
                     int numKvHeads, int headDim, void* out, cudaStream_t stream);

/** In place y[r, c] = T(y[r, c] + bias[c]). y: [rows, cols] of yDtype; bias: [cols] of biasDtype. */
cudaError_t hsBiasAdd(void* y, const void* bias, int rows, int cols, int yDtype, int biasDtype, cudaStream_t stream);

/**
 * dst[i] = convert(src[i]) for i < count between f32, bf16 and f16 (round to nearest even; NaN
 * stays NaN). Same dtype = plain copy. Used by weight upload (bf16/f16 bits or f32 -> bf16).
 */
cudaError_t hsCast(void* dst, int dstDtype, const void* src, int srcDtype, size_t count, cudaStream_t stream);

/**
 * Launch options of the decode-path kernels (bits of hsSetKernelLaunchOptions; native/kernels/pdl.cuh).
 * HS_LAUNCH_PDL: programmatic dependent launch of the skinny GEMM, the RMSNorms, reshape_and_cache
 * and the decode attention + merge (the next kernel starts while the previous one drains, and the
 * skinny GEMM streams its first weights before the previous kernel ends).
 * HS_LAUNCH_DEEP_DECODE: decode attention with head dim 128 for fewer (request, kv head) pairs
 * than SMs (batch 1 .. 16) keeps two 64-key tiles in flight per CTA instead of one.
 * Results are bit for bit the same with every setting.
 */
enum HsKernelLaunchOption {
  HS_LAUNCH_PDL = 1,
  HS_LAUNCH_DEEP_DECODE = 2,
  HS_LAUNCH_ALL = 3,
  HS_LAUNCH_DEFAULT = 3,
};

/**
 * Sets the launch options (HsKernelLaunchOption bits) of the launches made after the call, in
 * this process (a captured graph keeps those of its capture); options < 0 only reads them.
 * Returns the previous options. The initial value is HS_LAUNCH_DEFAULT, or the integer in the
 * environment variable HISPARSE_KERNEL_LAUNCH (e.g. 0: every kernel fully serialized).
 */
int hsSetKernelLaunchOptions(int options);

#ifdef __cplusplus
}
#endif
