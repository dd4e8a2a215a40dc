// The DSA indexer's causal top-k on CUDA (hsMlaTopk, mla.h), one CTA of 1024 threads per row:
// 1. a 2048-bin histogram of the top 11 bits of each candidate's order-preserving 32-bit key
//    (warp-aggregated shared atomics; kUnroll independent loads in flight per thread), and the
//    bin that holds the k-th largest key (a CTA scan over the bins, descending);
// 2. when that bin is taken whole, its lowest key is the threshold; when it holds at most
//    kCandCap keys, a second pass copies them to shared memory and the radix select of
//    radix_select.cuh finds the threshold among them (no further passes over the row); else
//    the radix select runs over the row (the general path);
// 3. an ordered output over contiguous per-thread runs (two CTA scans) writes the taken
//    positions ascending: keys above the threshold and the first `take` keys equal to it in
//    position order (the CPU oracle's tie rule, src/backends/cpu/kernels/dsa.ts).
// Four passes over the row in the common case, against four radix passes plus the output before.
#include <climits>
#include <cmath>

#include "hisparse_common.cuh"
#include "mla.h"
#include "radix_select.cuh"

namespace hs_mla {
namespace {

constexpr int kTopkThreads = 1024;
constexpr int kBinBits = 11;
constexpr int kBins = 1 << kBinBits;
constexpr int kBinShift = 32 - kBinBits;
constexpr int kBinsPerThread = kBins / kTopkThreads;
/** Keys of the threshold bin kept in shared memory (32 KB). */
constexpr int kCandCap = 8192;
constexpr int kUnroll = 4;
/** Shared memory: histogram, candidates, scan sums, broadcast words. */
constexpr size_t kTopkSmemBytes = (kBins + kCandCap + 32 + 8) * sizeof(int);

/** Order-preserving key of a logit (larger logit, larger key); NaN as -inf, -0 as +0; never 0. */
__device__ __forceinline__ uint32_t orderKey32(float v) {
  if (v != v) v = -INFINITY;
  const uint32_t b = v == 0.f ? 0u : __float_as_uint(v);
  return (b >> 31) ? ~b : (b | 0x80000000u);
}

/**
 * f(i, ok, key) for i over [0, n) strided over the CTA, kUnroll loads issued before use. The trip
 * count is warp-uniform (f may use warp collectives): lanes past n call f with ok = false.
 */
template <typename F>
__device__ __forceinline__ void forEachKey(const float* row, int n, F f) {
  const int lane = threadIdx.x & 31;
  const int stride = blockDim.x;
  for (int base = static_cast<int>(threadIdx.x) - lane; base < n; base += kUnroll * stride) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * stride + lane;
      v[u] = i < n ? row[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * stride + lane;
      f(i, i < n, orderKey32(v[u]));
    }
  }
}

/** Step 1: the histogram of top bits; bc[0] = the k-th key's bin, bc[1] = keys it still needs, bc[2] = its count. */
__device__ void thresholdBin(const float* row, int n, int k, int* hist, int* warpSums, int* bc) {
  const int lane = threadIdx.x & 31;
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  forEachKey(row, n, [&](int, bool ok, uint32_t key) {
    const int bin = ok ? static_cast<int>(key >> kBinShift) : kBins + lane;
    const unsigned group = __match_any_sync(0xffffffffu, bin);
    if (ok && lane == __ffs(group) - 1) atomicAdd(&hist[bin], __popc(group));
  });
  __syncthreads();
  // Thread j owns bins kBins - 1 - kBinsPerThread * j - e: threads in order walk the bins descending.
  int c[kBinsPerThread];
  int sum = 0;
#pragma unroll
  for (int e = 0; e < kBinsPerThread; ++e) {
    c[e] = hist[kBins - 1 - kBinsPerThread * static_cast<int>(threadIdx.x) - e];
    sum += c[e];
  }
  int total = 0;
  const int before = hs_sparse::blockExclusiveScan(sum, &total, warpSums);
  if (before < k && before + sum >= k) {
    int cum = before;
    for (int e = 0; e < kBinsPerThread; ++e) {
      if (cum + c[e] >= k) {
        bc[0] = kBins - 1 - kBinsPerThread * static_cast<int>(threadIdx.x) - e;
        bc[1] = k - cum;
        bc[2] = c[e];
        break;
      }
      cum += c[e];
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kTopkThreads)
    topkKernel(const float* logits, const int32_t* positions, int32_t* out, int width, int k) {
  extern __shared__ __align__(16) unsigned char smem[];
  int* hist = reinterpret_cast<int*>(smem);
  uint32_t* cand = reinterpret_cast<uint32_t*>(hist + kBins);
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
  if (threadIdx.x == 0) bc[3] = 0;
  thresholdBin(row, n, k, hist, warpSums, bc);
  const int bin = bc[0];
  const int need = bc[1];
  const int inBin = bc[2];
  uint32_t threshold = static_cast<uint32_t>(bin) << kBinShift;
  int take = INT_MAX;  // the whole bin: every key >= its lowest key
  if (need < inBin && inBin <= kCandCap) {
    forEachKey(row, n, [&](int, bool ok, uint32_t key) {
      if (ok && static_cast<int>(key >> kBinShift) == bin) cand[atomicAdd(&bc[3], 1)] = key;
    });
    __syncthreads();
    threshold = hs_sparse::radixSelect<uint32_t>([cand](int j) { return cand[j]; }, inBin, need, hist, bc + 4, &take);
  } else if (need < inBin) {
    threshold =
        hs_sparse::radixSelect<uint32_t>([row](int i) { return orderKey32(row[i]); }, n, k, hist, bc + 4, &take);
  }
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
