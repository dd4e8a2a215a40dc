// Qwen3's attention prologue in one kernel: per-head q/k RMSNorm (hsQkNorm, norm.cu) followed by
// NeoX RoPE (hsRotaryEmbedding, rope.cu), in place on a fused qkv row, with the two kernels'
// arithmetic and rounding points: the sum of squares accumulated per lane over elements lane,
// lane + 32, ... then the warp butterfly, x' = T(T(x * inv) * w), then the rotation of (x'_i,
// x'_{i+R/2}) from the T values. One warp per (token, head) of the q and k heads; the normed head
// goes through the warp's shared row so that any R (partial rotary) pairs its elements.
#include "common.cuh"
#include "kernels.h"

namespace hs {
namespace {

constexpr int kWarpsPerCta = 8;
/** Largest headDim (the per-warp shared row). */
constexpr int kMaxHeadDim = 512;

template <typename T, typename W>
__global__ void __launch_bounds__(kWarpsPerCta * 32)
    qkNormRopeKernel(T* qkv, const W* __restrict__ qw, const W* __restrict__ kw, const int32_t* __restrict__ positions,
                     const float* __restrict__ cosSin, int numTokens, int rowStride, int numHeads, int numKvHeads,
                     int headDim, int rotaryDim, int maxPositions, float eps) {
  __shared__ float rowsBuf[kWarpsPerCta * kMaxHeadDim];
  const int headsPerToken = numHeads + numKvHeads;
  const int warp = threadIdx.x >> 5;
  const long long item = static_cast<long long>(blockIdx.x) * kWarpsPerCta + warp;
  if (item >= static_cast<long long>(numTokens) * headsPerToken) return;  // whole warps exit together
  const int lane = threadIdx.x & 31;
  const int t = static_cast<int>(item / headsPerToken);
  const int h = static_cast<int>(item % headsPerToken);
  T* p = qkv + static_cast<size_t>(t) * rowStride + static_cast<size_t>(h) * headDim;
  const W* w = h < numHeads ? qw : kw;
  float* buf = rowsBuf + warp * kMaxHeadDim;
  float ss = 0.f;
  for (int i = lane; i < headDim; i += 32) {
    const float f = toFloat(p[i]);
    buf[i] = f;
    ss += f * f;
  }
  const float inv = rsqrtf(warpReduceSum(ss) / headDim + eps);
  for (int i = lane; i < headDim; i += 32) buf[i] = roundTo<T>(roundTo<T>(buf[i] * inv) * toFloat(w[i]));
  __syncwarp();
  const int pos = positions[t];
  const bool rotate = pos >= 0 && pos < maxPositions;  // rope leaves rows outside the table as they are
  const int half = rotaryDim / 2;
  const float* c = cosSin + static_cast<size_t>(rotate ? pos : 0) * rotaryDim;
  const float* s = c + half;
  for (int i = lane; i < headDim; i += 32) {
    if (!rotate || i >= rotaryDim) {
      p[i] = fromFloat<T>(buf[i]);
    } else if (i < half) {
      const float x1 = buf[i];
      const float x2 = buf[i + half];
      p[i] = fromFloat<T>(x1 * c[i] - x2 * s[i]);
    } else {
      const float x1 = buf[i - half];
      const float x2 = buf[i];
      p[i] = fromFloat<T>(x2 * c[i - half] + x1 * s[i - half]);
    }
  }
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsQkNormRotaryEmbedding(void* qkv, const void* qWeight, const void* kWeight,
                                               const int32_t* positions, const float* cosSinCache, int numTokens,
                                               int rowStride, int numHeads, int numKvHeads, int headDim,
                                               int rotaryDim, int maxPositions, float eps, int dtype, int wDtype,
                                               cudaStream_t stream) {
  if (numTokens < 0 || headDim <= 0 || headDim > hs::kMaxHeadDim || numHeads <= 0 || numKvHeads <= 0)
    return cudaErrorInvalidValue;
  if (rowStride < (numHeads + 2 * numKvHeads) * headDim) return cudaErrorInvalidValue;
  if (rotaryDim < 2 || rotaryDim % 2 != 0 || rotaryDim > headDim || maxPositions < 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const long long items = static_cast<long long>(numTokens) * (numHeads + numKvHeads);
  const int blocks = hs::ceilDiv(items, hs::kWarpsPerCta);
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchFloat(dtype, [&](auto xt) {
    hs::dispatchFloat(wDtype, [&](auto wt) {
      using T = decltype(xt);
      using W = decltype(wt);
      hs::qkNormRopeKernel<T, W><<<blocks, hs::kWarpsPerCta * 32, 0, stream>>>(
          static_cast<T*>(qkv), static_cast<const W*>(qWeight), static_cast<const W*>(kWeight), positions,
          cosSinCache, numTokens, rowStride, numHeads, numKvHeads, headDim, rotaryDim, maxPositions, eps);
      err = cudaGetLastError();
    });
  });
  return err;
}
