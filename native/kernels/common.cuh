// Device helpers shared by the element-wise kernels: dtype conversion, aligned vectors, warp and
// block reductions, and the dtype dispatch used by the launchers. Internal to native/kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

namespace hs {

template <typename T>
__device__ __forceinline__ float toFloat(T v);
template <>
__device__ __forceinline__ float toFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float toFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float toFloat<__half>(__half v) {
  return __half2float(v);
}

/** Rounds an fp32 value to T (round to nearest even). */
template <typename T>
__device__ __forceinline__ T fromFloat(float v);
template <>
__device__ __forceinline__ float fromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half fromFloat<__half>(float v) {
  return __float2half_rn(v);
}

/** Rounds v to T and back: the value a T-typed intermediate holds (HF's bf16 intermediates). */
template <typename T>
__device__ __forceinline__ float roundTo(float v) {
  return toFloat<T>(fromFloat<T>(v));
}

/** N contiguous elements loaded or stored with one aligned access (16 bytes for 8 x bf16). */
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> loadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void storeVec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

__device__ __forceinline__ float warpReduceSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/** Sum over the block, returned to every thread. blockDim.x must be a multiple of 32. */
__device__ __forceinline__ float blockReduceSum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warpReduceSum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.f;
    s = warpReduceSum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

/** True when p is aligned to `bytes` (a power of two). */
inline bool aligned(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

inline int ceilDiv(long long a, long long b) {
  return static_cast<int>((a + b - 1) / b);
}

/** Threads per block for `work` items per block: a multiple of 32 in [32, maxThreads]. */
inline int threadsFor(long long work, int maxThreads) {
  long long t = ((work + 31) / 32) * 32;
  if (t < 32) t = 32;
  if (t > maxThreads) t = maxThreads;
  return static_cast<int>(t);
}

/**
 * Calls f(T{}) with T the floating type of `dtype` (f32, bf16, f16); returns false for other
 * codes. f is a generic lambda.
 */
template <typename F>
inline bool dispatchFloat(int dtype, F&& f) {
  switch (dtype) {
    case HS_DTYPE_F32:
      f(float{});
      return true;
    case HS_DTYPE_BF16:
      f(__nv_bfloat16{});
      return true;
    case HS_DTYPE_F16:
      f(__half{});
      return true;
    default:
      return false;
  }
}

}  // namespace hs
