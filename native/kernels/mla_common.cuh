// Device helpers of the MLA kernels (mla_*.cu): element loads and stores of the two storage
// dtypes (f32, bf16 as raw bits, so the emulator needs no bf16 intrinsics) and warp reductions.
// Internal header: not part of the C ABI.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

namespace hs_mla {

/** bf16 storage as its bits. */
struct Bf16 {
  uint16_t bits;
};

__device__ __forceinline__ float toFloat(float v) { return v; }
__device__ __forceinline__ float toFloat(Bf16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }

/** float -> bf16, round to nearest even (NaN stays NaN). */
__device__ __forceinline__ Bf16 toBf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{0x7fc0};
  u += 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<uint16_t>(u >> 16)};
}

template <typename T>
__device__ __forceinline__ T fromFloat(float f);
template <>
__device__ __forceinline__ float fromFloat<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ Bf16 fromFloat<Bf16>(float f) {
  return toBf16(f);
}

/** Sum over the warp, the result in every lane. */
__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/** Maximum over the warp, the result in every lane. */
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/** True for the two storage dtypes the MLA kernels take. */
inline bool storageDtype(int d) { return d == HS_DTYPE_F32 || d == HS_DTYPE_BF16; }

/** Calls f(float{}) or f(Bf16{}) for dtype d (a storage dtype). */
template <typename F>
inline cudaError_t withDtype(int d, F f) {
  if (d == HS_DTYPE_F32) return f(float{});
  if (d == HS_DTYPE_BF16) return f(Bf16{});
  return cudaErrorInvalidValue;
}

}  // namespace hs_mla
