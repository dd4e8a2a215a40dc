// The DSA indexer's causal top-k on CUDA (hsMlaTopk, mla.h), one CTA of 1024 threads per row,
// every pass over the row coalesced:
// 1. the row's finite minimum and maximum (a CTA reduction);
// 2. a 2048-bin histogram of bin(v) = floor((v - min) * 2047 / (max - min)) (-inf and NaN in bin
//    0, +inf in the last): monotone in v, so a bin holds every copy of its values and the bins
//    above the one with the k-th largest value hold only larger ones; spread over the row's range
//    (not the top bits of the float, which the logits of one binade share), its atomics rarely
//    collide; then that bin by a CTA scan over the bins, descending;
// 3. the bin's order-preserving 32-bit keys (at most kCandCap) into shared memory, where the
//    radix select of radix_select.cuh finds the threshold key and how many keys equal to it are
//    taken; a larger bin (a row of few distinct values) takes the radix select over the row;
// 4. an ordered output over contiguous per-warp runs (ballots give each lane its rank; two CTA
//    scans place the warps) writes the taken positions ascending: keys above the threshold and
//    the first `take` keys equal to it in position order (the CPU oracle's tie rule,
//    src/backends/cpu/kernels/dsa.ts).
#include <climits>
#include <cmath>

#include "hisparse_common.cuh"
#include "mla.h"
#include "radix_select.cuh"

namespace hs_mla {
namespace {

constexpr int kTopkThreads = 1024;
constexpr int kWarps = kTopkThreads / 32;
constexpr int kBins = 2048;
constexpr int kBinsPerThread = kBins / kTopkThreads;
/** Keys of the threshold bin kept in shared memory (32 KB). */
constexpr int kCandCap = 8192;
constexpr int kUnroll = 4;
/** Shared memory: histogram, candidates, scan sums, broadcast words (floats and ints). */
constexpr size_t kTopkSmemBytes = (kBins + kCandCap + 32 + 8) * sizeof(int);

/** Order-preserving key of a logit (larger logit, larger key); NaN as -inf, -0 as +0; never 0. */
__device__ __forceinline__ uint32_t orderKey32(float v) {
  if (v != v) v = -INFINITY;
  const uint32_t b = v == 0.f ? 0u : __float_as_uint(v);
  return (b >> 31) ? ~b : (b | 0x80000000u);
}

/** f(i, v) for every i in [0, n), strided over the CTA (coalesced), kUnroll loads issued before use. */
template <typename F>
__device__ __forceinline__ void forEach(const float* row, int n, F f) {
  const int stride = blockDim.x;
  for (int base = threadIdx.x; base < n; base += kUnroll * stride) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * stride;
      v[u] = i < n ? row[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) f(base + u * stride, v[u]);
  }
}

/** The monotone bin map of step 2 over [lo, lo + (kBins - 1) / scale]. */
struct BinMap {
  float lo;
  float scale;
  __device__ __forceinline__ int operator()(float v) const {
    if (!(v > -INFINITY)) return 0;  // -inf and NaN
    if (v == INFINITY) return kBins - 1;
    const float f = (v - lo) * scale;  // NaN when v - lo overflows and scale is 0: bin 0
    return !(f > 0.f) ? 0 : f >= static_cast<float>(kBins - 1) ? kBins - 1 : static_cast<int>(f);
  }
};

/** Step 1: the finite minimum and maximum of the row, as a BinMap (scale 0 when they do not span a range). */
__device__ BinMap binMapOf(const float* row, int n, float* red) {
  float lo = INFINITY;
  float hi = -INFINITY;
  forEach(row, n, [&](int, float v) {
    if (v > -INFINITY && v < INFINITY) {
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
  });
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    red[warp] = lo;
    red[kWarps + warp] = hi;
  }
  __syncthreads();
  lo = INFINITY;
  hi = -INFINITY;
  for (int w = 0; w < kWarps; ++w) {
    lo = fminf(lo, red[w]);
    hi = fmaxf(hi, red[kWarps + w]);
  }
  __syncthreads();  // red is reused by the caller
  const float span = hi - lo;
  const float scale = span > 0.f && span < INFINITY ? static_cast<float>(kBins - 1) / span : 0.f;
  return BinMap{lo < INFINITY ? lo : 0.f, scale < INFINITY ? scale : 0.f};
}

/** Step 2: bc[0] = the bin of the k-th largest value, bc[1] = how many of its keys are needed, bc[2] = its count. */
__device__ void thresholdBin(const float* row, int n, int k, BinMap bin, int* hist, int* warpSums, int* bc) {
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) hist[b] = 0;
  __syncthreads();
  forEach(row, n, [&](int, float v) { atomicAdd(&hist[bin(v)], 1); });
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

/** The smallest of cand[0, n) that is >= t (one exists), to every thread. */
__device__ uint32_t minKeyAtLeast(const uint32_t* cand, int n, uint32_t t, int* bc) {
  uint32_t m = ~0u;
  for (int j = threadIdx.x; j < n; j += blockDim.x)
    if (cand[j] >= t && cand[j] < m) m = cand[j];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t y = __shfl_xor_sync(0xffffffffu, m, o);
    m = y < m ? y : m;
  }
  uint32_t* slot = reinterpret_cast<uint32_t*>(bc + 4);
  if (threadIdx.x == 0) *slot = ~0u;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) atomicMin(slot, m);
  __syncthreads();
  const uint32_t r = *slot;
  __syncthreads();
  return r;
}

/** Steps 1-3: the threshold key and, in *take, how many keys equal to it are taken (n > k). */
__device__ uint32_t rowThreshold(const float* row, int n, int k, int* hist, uint32_t* cand, int* warpSums, int* bc,
                                 int* take) {
  const BinMap bin = binMapOf(row, n, reinterpret_cast<float*>(hist));
  thresholdBin(row, n, k, bin, hist, warpSums, bc);
  const int target = bc[0];
  const int need = bc[1];
  const int inBin = bc[2];
  if (inBin > kCandCap)
    return hs_sparse::radixSelect<uint32_t>([row](int i) { return orderKey32(row[i]); }, n, k, hist, bc, take);
  __syncthreads();  // every thread has read bc
  if (threadIdx.x == 0) bc[3] = 0;
  __syncthreads();
  forEach(row, n, [&](int, float v) {
    if (bin(v) == target) cand[atomicAdd(&bc[3], 1)] = orderKey32(v);
  });
  __syncthreads();
  const uint32_t t = hs_sparse::radixSelect<uint32_t>([cand](int j) { return cand[j]; }, inBin, need, hist, bc, take);
  // A bucket taken whole gives the lowest key its radix prefix allows, which keys of lower bins
  // (not candidates) may exceed: the threshold is then the bin's smallest key at or above it.
  return *take == INT_MAX ? minKeyAtLeast(cand, inBin, t, bc) : t;
}

__global__ void __launch_bounds__(kTopkThreads, 1)
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
  int take = 0;
  const uint32_t threshold = rowThreshold(row, n, k, hist, cand, warpSums, bc, &take);
  // Step 4: warp w owns positions [w * per, (w + 1) * per), read 32 at a time.
  const int lane = threadIdx.x & 31;
  const unsigned lower = (1u << lane) - 1u;
  const int per = (n + kWarps * 32 - 1) / (kWarps * 32) * 32;
  const int w0 = min(n, static_cast<int>(threadIdx.x >> 5) * per);
  const int w1 = min(n, w0 + per);
  int above = 0;
  int equal = 0;
  for (int base = w0; base < w1; base += 32) {
    const int i = base + lane;
    const uint32_t key = i < w1 ? orderKey32(row[i]) : 0u;
    above += __popc(__ballot_sync(0xffffffffu, key > threshold));  // threshold >= 1: key 0 never above
    equal += __popc(__ballot_sync(0xffffffffu, key == threshold));
  }
  int total = 0;
  const int eqBefore = hs_sparse::blockExclusiveScan(lane == 0 ? equal : 0, &total, warpSums);
  const int eqBase = __shfl_sync(0xffffffffu, eqBefore, 0);
  const int eqTaken = max(0, min(equal, take - eqBase));  // take <= INT_MAX, eqBase >= 0
  const int selBefore = hs_sparse::blockExclusiveScan(lane == 0 ? above + eqTaken : 0, &total, warpSums);
  int idx = __shfl_sync(0xffffffffu, selBefore, 0);
  int eqSeen = 0;
  for (int base = w0; base < w1; base += 32) {
    const int i = base + lane;
    const uint32_t key = i < w1 ? orderKey32(row[i]) : 0u;
    const bool isEq = key == threshold;
    const unsigned eqMask = __ballot_sync(0xffffffffu, isEq);
    const bool sel = key > threshold || (isEq && eqSeen + __popc(eqMask & lower) < eqTaken);
    const unsigned selMask = __ballot_sync(0xffffffffu, sel);
    const int at = idx + __popc(selMask & lower);
    if (sel && at < k) dst[at] = i;
    idx += __popc(selMask);
    eqSeen += __popc(eqMask);
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
