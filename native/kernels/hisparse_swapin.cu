// HiSparse swap-in: a GPU gather that reads KV pages straight from mapped pinned host memory
// (see hisparse.h). One CTA per copy in a grid-stride loop; each thread moves kUnroll 16-byte
// vectors per round, all loads issued before the stores so that many host reads are in flight
// (the host link's latency is microseconds: bandwidth needs concurrency, METHOD.md).
#include <cstdint>

#include "hisparse.h"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(kThreads) swapInKernel(uint4* __restrict__ dst, const uint4* __restrict__ src,
                                                          const int64_t* __restrict__ srcOffsets,
                                                          const int64_t* __restrict__ dstOffsets,
                                                          const int32_t* __restrict__ count, int maxCopies,
                                                          int64_t vecsPerCopy) {
  const int n = count != nullptr ? min(*count, maxCopies) : maxCopies;
  for (int c = blockIdx.x; c < n; c += gridDim.x) {
    const uint4* s = src + srcOffsets[c] / 16;
    uint4* d = dst + dstOffsets[c] / 16;
    for (int64_t base = 0; base < vecsPerCopy; base += int64_t(kThreads) * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
        if (i < vecsPerCopy) v[u] = __ldcs(s + i);  // streaming: host data is used once
      }
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t i = base + int64_t(u) * kThreads + threadIdx.x;
        if (i < vecsPerCopy) d[i] = v[u];
      }
    }
  }
}

}  // namespace

extern "C" cudaError_t hsSwapInPages(void* dst, const void* src, const int64_t* srcOffsets,
                                     const int64_t* dstOffsets, const int32_t* count, int maxCopies,
                                     size_t bytesPerCopy, cudaStream_t stream) {
  if (maxCopies <= 0) return cudaSuccess;
  if (bytesPerCopy == 0 || bytesPerCopy % 16 != 0 || (reinterpret_cast<uintptr_t>(dst) & 15) != 0 ||
      (reinterpret_cast<uintptr_t>(src) & 15) != 0)
    return cudaErrorInvalidValue;
  int device = 0;
  cudaGetDevice(&device);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  // Enough CTAs to keep every SM busy with host reads (8 per SM of 256 threads), no more than copies.
  const int grid = maxCopies < sms * 8 ? maxCopies : sms * 8;
  swapInKernel<<<grid, kThreads, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), srcOffsets,
                                             dstOffsets, count, maxCopies, int64_t(bytesPerCopy / 16));
  return cudaGetLastError();
}
