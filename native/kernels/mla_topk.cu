// The DSA indexer's causal top-k on CUDA (hsMlaTopk, mla.h), one CTA of 1024 threads per row:
// 1. two 8-bit digit passes over each candidate's order-preserving 32-bit key fix its top 16
//    bits (per-warp histograms of 16-bit counts: the logits of one binade share a few digits, so
//    a histogram shared by the CTA serialises on them; kUnroll loads in flight per thread);
// 2. when the bucket of keys sharing those bits is taken whole, its lowest key is the threshold;
//    when it holds at most kCandCap keys, a third pass copies them to shared memory and the radix
//    select of radix_select.cuh finds the threshold among them; else the radix select runs over
//    the row (the general path);
// 3. an ordered output over contiguous per-thread runs (two CTA scans) writes the taken
//    positions ascending: keys above the threshold and the first `take` keys equal to it in
//    position order (the CPU oracle's tie rule, src/backends/cpu/kernels/dsa.ts).
// Five passes over the row in the common case, each free of CTA-wide atomic contention.
#include <climits>
#include <cmath>

#include "hisparse_common.cuh"
#include "mla.h"
#include "radix_select.cuh"

namespace hs_mla {
namespace {

constexpr int kTopkThreads = 1024;
constexpr int kWarps = kTopkThreads / 32;
/** Keys of the threshold bucket kept in shared memory (16 KB). */
constexpr int kCandCap = 4096;
constexpr int kUnroll = 4;
/** Per-warp histograms: 256 16-bit counts per warp, two to a word (16 KB). */
constexpr int kWarpHistWords = 128;
/** A warp's counts stay below 2^16 while each warp sees fewer keys: rows up to 2M positions. */
constexpr int kMaxPrivateRow = kWarps * 65535;
/** Shared memory: per-warp histograms, merged histogram, candidates, scan sums, broadcast words. */
constexpr size_t kTopkSmemBytes = (kWarps * kWarpHistWords + 256 + kCandCap + 32 + 8) * sizeof(int);

/** Order-preserving key of a logit (larger logit, larger key); NaN as -inf, -0 as +0; never 0. */
__device__ __forceinline__ uint32_t orderKey32(float v) {
  if (v != v) v = -INFINITY;
  const uint32_t b = v == 0.f ? 0u : __float_as_uint(v);
  return (b >> 31) ? ~b : (b | 0x80000000u);
}

/** f(i, key) for every i in [0, n), strided over the CTA, kUnroll loads issued before use. */
template <typename F>
__device__ __forceinline__ void forEachKey(const float* row, int n, F f) {
  const int stride = blockDim.x;
  for (int base = threadIdx.x; base < n; base += kUnroll * stride) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * stride;
      v[u] = i < n ? row[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * stride;
      if (i < n) f(i, orderKey32(v[u]));
    }
  }
}

/**
 * One 8-bit digit (bits shift + 7 .. shift) over the keys whose bits above it equal `prefix`:
 * each warp counts into its own histogram (no atomics shared across warps: the keys of one
 * logit binade crowd a few digits), then thread j < 256 sums digit 255 - j over the warps and a
 * CTA scan in that order finds the digit of the need-th largest. Writes bc[0] = that digit,
 * bc[1] = how many of its keys are still needed, bc[2] = its count. Every thread must call it.
 */
__device__ void digitPass(const float* row, int n, int shift, uint32_t prefix, int need, uint32_t* warpHist,
                          int* warpSums, int* bc) {
  for (int w = threadIdx.x; w < kWarps * kWarpHistWords; w += blockDim.x) warpHist[w] = 0;
  __syncthreads();
  uint32_t* mine = warpHist + (threadIdx.x >> 5) * kWarpHistWords;
  const uint32_t above = shift + 8 >= 32 ? 0u : ~0u << (shift + 8);
  forEachKey(row, n, [&](int, uint32_t key) {
    if ((key & above) != prefix) return;
    const uint32_t d = (key >> shift) & 255u;
    atomicAdd(&mine[d >> 1], 1u << (16 * (d & 1u)));
  });
  __syncthreads();
  int c = 0;
  if (threadIdx.x < 256) {
    const uint32_t d = 255u - threadIdx.x;
    for (int w = 0; w < kWarps; ++w) c += static_cast<int>((warpHist[w * kWarpHistWords + (d >> 1)] >> (16 * (d & 1u))) & 0xffffu);
  }
  int total = 0;
  const int before = hs_sparse::blockExclusiveScan(c, &total, warpSums);
  if (threadIdx.x < 256 && before < need && before + c >= need) {
    bc[0] = 255 - static_cast<int>(threadIdx.x);
    bc[1] = need - before;
    bc[2] = c;
  }
  __syncthreads();
}

/**
 * The threshold and how many keys equal to it are taken (radixSelect's contract) for the row's
 * top k (n > k): two digit passes fix the top 16 bits; the bucket of keys sharing them is taken
 * whole, or copied to shared memory (<= kCandCap keys) for the radix select, or (more keys, or a
 * row too long for 16-bit warp counts) the radix select runs over the row.
 */
__device__ uint32_t rowThreshold(const float* row, int n, int k, uint32_t* warpHist, int* hist, uint32_t* cand,
                                 int* warpSums, int* bc, int* take) {
  if (n > kMaxPrivateRow)
    return hs_sparse::radixSelect<uint32_t>([row](int i) { return orderKey32(row[i]); }, n, k, hist, bc, take);
  digitPass(row, n, 24, 0u, k, warpHist, warpSums, bc);
  const uint32_t hi = static_cast<uint32_t>(bc[0]) << 24;
  digitPass(row, n, 16, hi, bc[1], warpHist, warpSums, bc);
  const uint32_t prefix = hi | (static_cast<uint32_t>(bc[0]) << 16);
  const int need = bc[1];
  const int inBucket = bc[2];
  if (need == inBucket) {  // the whole bucket: every key >= its lowest key
    *take = INT_MAX;
    return prefix;
  }
  if (inBucket > kCandCap)
    return hs_sparse::radixSelect<uint32_t>([row](int i) { return orderKey32(row[i]); }, n, k, hist, bc, take);
  __syncthreads();  // bc is read by every thread above before it is reused as the counter
  if (threadIdx.x == 0) bc[3] = 0;
  __syncthreads();
  forEachKey(row, n, [&](int, uint32_t key) {
    if ((key & 0xffff0000u) == prefix) cand[atomicAdd(&bc[3], 1)] = key;
  });
  __syncthreads();
  return hs_sparse::radixSelect<uint32_t>([cand](int j) { return cand[j]; }, inBucket, need, hist, bc, take);
}

__global__ void __launch_bounds__(kTopkThreads)
    topkKernel(const float* logits, const int32_t* positions, int32_t* out, int width, int k) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint32_t* warpHist = reinterpret_cast<uint32_t*>(smem);
  int* hist = reinterpret_cast<int*>(warpHist + kWarps * kWarpHistWords);
  uint32_t* cand = reinterpret_cast<uint32_t*>(hist + 256);
  int* warpSums = reinterpret_cast<int*>(cand + kCandCap);
  int* bc = warpSums + 32;
  const int t = blockIdx.x;
  const float* row = logits + static_cast<size_t>(t) * width;
  int32_t* dst = out + static_cast<size_t>(t) * k;
  const int n = min(max(positions[t], -1), width - 1) + 1;  // candidates [0, n)
  if (n <= k) {
    for (int j = threadIdx.x; j < k; j += blockDim.x) dst[j] = j < n ? j : -1;
    return;
  }
  int take = 0;
  const uint32_t threshold = rowThreshold(row, n, k, warpHist, hist, cand, warpSums, bc, &take);
  // Ordered output: each thread owns a contiguous run of positions, so two CTA scans (keys equal
  // to the threshold, then taken keys) place every thread's output; the runs are read twice.
  const int per = (n + blockDim.x - 1) / blockDim.x;
  const int c0 = min(n, static_cast<int>(threadIdx.x) * per);
  const int c1 = min(n, c0 + per);
  int above = 0;
  int equal = 0;
  for (int i = c0; i < c1; ++i) {
    const uint32_t key = orderKey32(row[i]);
    above += key > threshold ? 1 : 0;  // threshold >= 1: key 0 is never above it
    equal += key == threshold ? 1 : 0;
  }
  int total = 0;
  const int eqBefore = hs_sparse::blockExclusiveScan(equal, &total, warpSums);
  const int eqTaken = max(0, min(equal, take - eqBefore));  // take <= INT_MAX, eqBefore >= 0
  int idx = hs_sparse::blockExclusiveScan(above + eqTaken, &total, warpSums);
  int eqSeen = 0;
  for (int i = c0; i < c1; ++i) {
    const uint32_t key = orderKey32(row[i]);
    bool sel = key > threshold;
    if (key == threshold) sel = eqSeen++ < eqTaken;
    if (sel && idx < k) dst[idx] = i;
    idx += sel ? 1 : 0;
  }
  for (int j = total + threadIdx.x; j < k; j += blockDim.x) dst[j] = -1;  // never, with n > k
}

}  // namespace
}  // namespace hs_mla

using namespace hs_mla;

extern "C" cudaError_t hsMlaTopk(const float* logits, const int32_t* positions, int32_t* out, int numTokens, int width,
                                 int k, cudaStream_t stream) {
  if (numTokens < 0 || width <= 0 || k <= 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  topkKernel<<<numTokens, kTopkThreads, kTopkSmemBytes, stream>>>(logits, positions, out, width, k);
  return cudaGetLastError();
}
