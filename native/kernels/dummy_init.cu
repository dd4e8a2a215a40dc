// Generated weights (`--load-format dummy`) written on the device: a counter-based table lookup,
// so every element is computed on its own and the result equals the TypeScript rule
// (src/backends/weight_fill.ts, the CPU backend's oracle) bit for bit: only integer operations
// and a copy of a table entry, no floating-point arithmetic at all.
#include "common.cuh"
#include "weight_fill.h"

namespace hs {
namespace {

/** Elements per thread and loop step: 8 x 2-byte elements = one 16-byte store. */
constexpr int kFillPerThread = 8;
constexpr int kFillThreads = 256;

/** lowbias32 (https://github.com/skeeto/hash-prospector), as weight_fill.ts mix32. */
__device__ __forceinline__ uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

/** The 32 random bits of element pair `pair` (weight_fill.ts fillBits). */
__device__ __forceinline__ uint32_t fillBits(uint32_t key0, uint32_t key1, unsigned long long pair) {
  const uint32_t lo = static_cast<uint32_t>(pair);
  const uint32_t hi = static_cast<uint32_t>(pair >> 32);
  return mix32(mix32(lo ^ key0) ^ (key1 + hi * 0x9e3779b9u));
}

/**
 * Grid-stride over runs of kFillPerThread output elements. One hash per element pair (a run that
 * starts on an odd element recomputes its first pair). A run is stored with 16-byte vector stores
 * when it is whole and dst is 16-byte aligned (`vec`; runs are 16 or 32 bytes, so every run is
 * then aligned), else element by element.
 * E: uint16_t (bf16/f16 bits) or uint32_t (f32 bits).
 */
template <typename E>
__global__ void __launch_bounds__(kFillThreads)
    fillWeightKernel(E* __restrict__ dst, size_t count, unsigned long long first, const E* __restrict__ table,
                     E constant, uint32_t key0, uint32_t key1, bool vec) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * kFillPerThread;
  for (size_t j0 = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kFillPerThread; j0 < count;
       j0 += stride) {
    E v[kFillPerThread];
    uint32_t r = 0;
#pragma unroll
    for (int k = 0; k < kFillPerThread; ++k) {
      const unsigned long long i = first + j0 + k;
      if (table == nullptr) {
        v[k] = constant;
        continue;
      }
      if (k == 0 || (i & 1ull) == 0) r = fillBits(key0, key1, i >> 1);
      v[k] = __ldg(table + ((i & 1ull) ? (r >> 16) : (r & 0xffffu)));
    }
    E* out = dst + j0;
    if (vec && j0 + kFillPerThread <= count) {
#pragma unroll
      for (int q = 0; q < static_cast<int>(sizeof(E) * kFillPerThread / 16); ++q) {
        uint4 w;
        memcpy(&w, reinterpret_cast<const char*>(v) + 16 * q, 16);
        reinterpret_cast<uint4*>(out)[q] = w;
      }
    } else {
      for (int k = 0; k < kFillPerThread && j0 + k < count; ++k) out[k] = v[k];
    }
  }
}

template <typename E>
cudaError_t launchFill(void* dst, size_t count, unsigned long long first, const void* table, uint32_t constantBits,
                       uint32_t key0, uint32_t key1, cudaStream_t stream) {
  const unsigned long long runs = (count + kFillPerThread - 1) / kFillPerThread;
  const unsigned long long wanted = (runs + kFillThreads - 1) / kFillThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);  // grid-stride beyond 128M elements
  fillWeightKernel<E><<<blocks, kFillThreads, 0, stream>>>(static_cast<E*>(dst), count, first,
                                                           static_cast<const E*>(table), static_cast<E>(constantBits),
                                                           key0, key1, hs::aligned(dst, 16));
  return cudaGetLastError();
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsFillWeight(void* dst, int dtype, size_t count, unsigned long long first, const void* table,
                                    uint32_t constantBits, uint32_t key0, uint32_t key1, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr) return cudaErrorInvalidValue;
  switch (dtype) {
    case HS_DTYPE_F32:
      return hs::launchFill<uint32_t>(dst, count, first, table, constantBits, key0, key1, stream);
    case HS_DTYPE_BF16:
    case HS_DTYPE_F16:
      return hs::launchFill<uint16_t>(dst, count, first, table, constantBits, key0, key1, stream);
    default:
      return cudaErrorInvalidValue;
  }
}
