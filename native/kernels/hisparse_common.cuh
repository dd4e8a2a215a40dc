// Device helpers shared by the HiSparse kernels (hisparse_*.cu): bf16 and packed e4m3 access,
// CTA-wide scans, the one-time shared-memory limit. Internal header: not part of the C ABI.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include <atomic>

#include "fp8.cuh"

namespace hs_sparse {

/** CTA size of the selection and resolver kernels (8 warps). */
constexpr int kThreads = 256;

/** bf16 bits -> float (exact). */
__device__ __forceinline__ float bf16Bits(uint32_t bits16) { return __uint_as_float((bits16 & 0xffffu) << 16); }

/** Element e (0..7) of 8 packed bf16 values, as its 16 bits. */
__device__ __forceinline__ uint32_t lane16(const uint4& v, int e) {
  const uint32_t w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
  return (e & 1) ? (w >> 16) : (w & 0xffffu);
}

/** 8 packed e4m3 codes (byte e of c = element e) as floats, exactly (fp8.cuh e4m3ToFloat). */
__device__ __forceinline__ void e4m3x8ToFloat(const uint2& c, float (&v)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e)
    v[e] = hs_fp8::e4m3ToFloat(static_cast<uint8_t>(((e < 4 ? c.x : c.y) >> (8 * (e & 3))) & 0xffu));
}

/** Packs 8 bf16 bit patterns into one 16-byte vector. */
__device__ __forceinline__ uint4 pack16(const uint32_t (&b)[8]) {
  return make_uint4(b[0] | (b[1] << 16), b[2] | (b[3] << 16), b[4] | (b[5] << 16), b[6] | (b[7] << 16));
}

/**
 * Exclusive prefix sum of v over the CTA in threadIdx order; *total receives the sum. warpSums:
 * shared int[32]. Every thread of the CTA must call it (it synchronises); blockDim.x a multiple
 * of 32.
 */
__device__ __forceinline__ int blockExclusiveScan(int v, int* total, int* warpSums) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int numWarps = blockDim.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warpSums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < numWarps ? warpSums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    if (lane < numWarps) warpSums[lane] = w;  // inclusive sums per warp
  }
  __syncthreads();
  const int before = warp > 0 ? warpSums[warp - 1] : 0;
  *total = warpSums[numWarps - 1];
  __syncthreads();  // warpSums may be reused at once
  return before + x - v;
}

/** Sum of v over the CTA, returned to every thread (see blockExclusiveScan). */
__device__ __forceinline__ int blockSum(int v, int* warpSums) {
  int total = 0;
  (void)blockExclusiveScan(v, &total, warpSums);
  return total;
}

/** First index i in [0, n) with a[i] >= x (a ascending), n when none. */
__device__ __forceinline__ int lowerBound(const int32_t* a, int n, int x) {
  int lo = 0;
  int hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (a[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/**
 * When `bytes` exceeds the default 48 KiB of dynamic shared memory, raises `kernel`'s limit to the
 * device's opt-in maximum, once per device (`doneMask`: one bit per device id < 64); later calls
 * make no CUDA call (safe during graph capture once a warm-up call was made). Returns
 * cudaErrorInvalidValue when `bytes` exceeds that maximum.
 */
template <typename Kernel>
inline cudaError_t ensureSmem(Kernel kernel, size_t bytes, std::atomic<unsigned long long>& doneMask) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const unsigned long long bit = 1ull << (dev & 63);
  if (doneMask.load(std::memory_order_acquire) & bit) return cudaSuccess;  // raised already (bounds checked then)
  int optin = 0;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess) return err;
  if (bytes > static_cast<size_t>(optin)) return cudaErrorInvalidValue;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  if (err == cudaSuccess) doneMask.fetch_or(bit, std::memory_order_acq_rel);
  return err;
}

/** True when p is 16-byte aligned. */
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace hs_sparse
