// GPU sampler: one CTA of 1024 threads per row, block-wide reductions over the vocabulary.
//
// Passes over a row of V logits (each recomputes p from the logits; nothing of size V is stored):
//  1. max and argmax (lowest id on ties). Greedy rows stop here.
//  2. Z = sum exp((x - max) / T), fixed summation order (deterministic).
//  3. Only with top-k / top-p: radix select over the bit patterns of p (non-negative floats
//     order like their bits), 4 levels of 8 bits, most significant first. Top-k weighs each
//     token 1 and finds the k-th largest p exactly; top-p weighs each token by its mass in
//     64-bit fixed point (p * 2^62) and finds the largest p value t with mass(p >= t) >=
//     topP * total mass. Both walk the histogram from the top bin down, carrying the weight of
//     everything above the current prefix. Histograms are replicated 8 ways (by lane % 8) so
//     lanes falling into one bin rarely hit one shared-memory address at once.
//  4. kept mass K = sum of fixed-point p over p >= max(tK, tP, minP * max p), and the last kept id.
//  5. inverse CDF in ascending id order: tiles of 1024 x 8 ids, block scan of kept mass per tile,
//     first id whose running sum exceeds floor(u * K) (exactly u * K compared in integers).
// Precision: fixed-point masses are exact sums of the truncated fp32 p values (truncation error
// < 2^-62 per token, < 2^-44 for V <= 2^18), so thresholds and the final pick depend only on the
// fp32 p values, never on summation order.
#include <stdint.h>

#include "sampling.h"

namespace hs_sample {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kReplicas = 8;
/** Consecutive ids per thread in the inverse-CDF scan. */
constexpr int kVec = 8;
/** Fixed-point scale of probability masses: 2^62 (sums of p <= ~1.02 stay below 2^64). */
constexpr float kFixScale = 4611686018427387904.0f;
constexpr float kNegInf = -__builtin_huge_valf();

/** Shared state of one row. */
struct Smem {
  unsigned int cnt[kBins * kReplicas];  // top-k histogram (token counts)
  u64 mass[kBins * kReplicas];          // top-p histogram (fixed-point mass)
  u64 redU[kWarps];
  float redF[kWarps];
  int redI[kWarps];
  unsigned int kPrefix;  // top-k radix state: threshold bits fixed so far
  unsigned int pPrefix;  // top-p radix state
  u64 kAbove;            // weight of tokens above the current prefix range
  u64 pAbove;
  u64 pTarget;  // ceil(topP * total mass), >= 1
  int kFound;   // 0 once a select has no answer (top-p: keep everything)
  int pFound;
  int answer;
};

/** Fixed-point mass of probability p (truncated; p * 2^62 is exact in fp32). */
__device__ __forceinline__ u64 toFixed(float p) { return __float2ull_rz(p * kFixScale); }

/** p of token i: expf((x_i - m) * invT) * invZ, never NaN. The same expression in every pass. */
__device__ __forceinline__ float prob(const float* __restrict__ x, int i, float m, float invT, float invZ) {
  return fmaxf(expf((__ldg(x + i) - m) * invT) * invZ, 0.f);
}

template <typename T>
__device__ __forceinline__ T warpSum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/** Block sum with a fixed reduction tree (deterministic for floats); every thread gets it. */
template <typename T>
__device__ T blockSum(T v, T* red) {
  v = warpSum(v);
  __syncthreads();  // earlier readers of red are done
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = red[0];
#pragma unroll 8
  for (int w = 1; w < kWarps; ++w) r += red[w];
  return r;
}

/** Block max of an int; every thread gets it. */
__device__ int blockMaxInt(int v, int* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  int r = red[0];
  for (int w = 1; w < kWarps; ++w) r = max(r, red[w]);
  return r;
}

/** Block argmax: largest value, lowest index among equals. Every thread gets both. */
__device__ void blockArgmax(float& v, int& idx, Smem& sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, off);
    if (ov > v || (ov == v && oi < idx)) {
      v = ov;
      idx = oi;
    }
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    sh.redF[threadIdx.x >> 5] = v;
    sh.redI[threadIdx.x >> 5] = idx;
  }
  __syncthreads();
  v = sh.redF[0];
  idx = sh.redI[0];
  for (int w = 1; w < kWarps; ++w) {
    if (sh.redF[w] > v || (sh.redF[w] == v && sh.redI[w] < idx)) {
      v = sh.redF[w];
      idx = sh.redI[w];
    }
  }
}

/** Inclusive block scan of u64; `total` receives the block total. */
__device__ u64 blockInclusiveScan(u64 v, u64* red, u64& total) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const u64 y = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += y;
  }
  __syncthreads();
  if (lane == 31) red[threadIdx.x >> 5] = v;
  __syncthreads();
  u64 prefix = 0;
  total = 0;
  for (int w = 0; w < kWarps; ++w) {
    const u64 t = red[w];
    if (w < static_cast<int>(threadIdx.x >> 5)) prefix += t;
    total += t;
  }
  return prefix + v;
}

/**
 * One warp: picks the digit of this radix level. Bins are scanned from 255 down (lane l holds
 * bins 255-8l .. 248-8l); the chosen digit d is the first whose cumulative weight
 * (above + bins >= d) reaches target. Updates prefix/above, or clears found when the total falls
 * short of target.
 */
template <typename W>
__device__ void resolveDigit(const W* hist, u64 target, int shift, unsigned int& prefix, u64& above, int& found) {
  const int lane = threadIdx.x & 31;
  u64 b[8];
  u64 laneSum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int d = 255 - 8 * lane - j;
    u64 s = 0;
#pragma unroll
    for (int r = 0; r < kReplicas; ++r) s += hist[d * kReplicas + r];
    b[j] = s;
    laneSum += s;
  }
  u64 incl = laneSum;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const u64 y = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += y;
  }
  const u64 ab = above;
  const unsigned int hit = __ballot_sync(0xffffffffu, ab + incl >= target);
  if (hit == 0) {
    if (lane == 0) found = 0;
    return;
  }
  if (lane == __ffs(hit) - 1) {
    u64 cum = ab + incl - laneSum;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (cum + b[j] >= target) {
        prefix |= static_cast<unsigned int>(255 - 8 * lane - j) << shift;
        above = cum;
        break;
      }
      cum += b[j];
    }
  }
}

/** Row inputs shared by the passes. */
struct Row {
  const float* x;
  int V;
  float m;
  float invT;
  float invZ;
};

/**
 * Radix select of the top-k threshold tK (k-th largest p) and the top-p threshold tP; a
 * disabled filter returns 0. All threads call it (uniform flags).
 */
__device__ void radixThresholds(const Row& r, bool useK, int k, bool useP, float topP, Smem& sh, float& tK,
                                float& tP) {
  if (threadIdx.x == 0) {
    sh.kPrefix = sh.pPrefix = 0u;
    sh.kAbove = sh.pAbove = 0ull;
    sh.kFound = useK ? 1 : 0;
    sh.pFound = useP ? 1 : 0;
  }
  const int rep = threadIdx.x & (kReplicas - 1);
  for (int level = 0; level < 4; ++level) {
    const int shift = 24 - 8 * level;
    for (int i = threadIdx.x; i < kBins * kReplicas; i += kThreads) {
      sh.cnt[i] = 0u;
      sh.mass[i] = 0ull;
    }
    __syncthreads();
    const bool kOn = sh.kFound != 0;
    const bool pOn = sh.pFound != 0;
    const unsigned int kHigh = level == 0 ? 0u : sh.kPrefix >> (shift + 8);
    const unsigned int pHigh = level == 0 ? 0u : sh.pPrefix >> (shift + 8);
    u64 total = 0;
    for (int i = threadIdx.x; i < r.V; i += kThreads) {
      const float p = prob(r.x, i, r.m, r.invT, r.invZ);
      const unsigned int bits = __float_as_uint(p);
      const unsigned int high = level == 0 ? 0u : bits >> (shift + 8);
      const int digit = (bits >> shift) & 0xff;
      if (kOn && high == kHigh) atomicAdd(&sh.cnt[digit * kReplicas + rep], 1u);
      if (pOn) {
        const u64 q = toFixed(p);
        total += q;
        if (high == pHigh) atomicAdd(&sh.mass[digit * kReplicas + rep], q);
      }
    }
    if (level == 0 && pOn) {
      const u64 qTotal = blockSum<u64>(total, sh.redU);
      if (threadIdx.x == 0) {
        // ceil(topP * qTotal) exactly: topP < 1 as a 64-bit binary fraction times qTotal.
        const u64 frac = __float2ull_rz(fmaxf(topP, 0.f) * 18446744073709551616.0f);
        const u64 hi = __umul64hi(frac, qTotal);
        const u64 lo = frac * qTotal;
        const u64 target = hi + (lo != 0 ? 1 : 0);
        sh.pTarget = target > 0 ? target : 1;
      }
    }
    __syncthreads();
    const int warp = threadIdx.x >> 5;
    if (warp == 0 && kOn) resolveDigit(sh.cnt, static_cast<u64>(k), shift, sh.kPrefix, sh.kAbove, sh.kFound);
    if (warp == 1 && pOn) resolveDigit(sh.mass, sh.pTarget, shift, sh.pPrefix, sh.pAbove, sh.pFound);
    __syncthreads();
  }
  tK = sh.kFound ? __uint_as_float(sh.kPrefix) : 0.f;
  tP = sh.pFound ? __uint_as_float(sh.pPrefix) : 0.f;
}

/** Inverse CDF over kept tokens (p >= thr) in ascending id order; returns the sampled id. */
__device__ int inverseCdf(const Row& r, float thr, u64 target, int lastKept, Smem& sh) {
  u64 base = 0;
  for (int tileBase = 0; tileBase < r.V; tileBase += kThreads * kVec) {
    const int i0 = tileBase + static_cast<int>(threadIdx.x) * kVec;
    u64 q[kVec];
    u64 local = 0;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = i0 + k;
      q[k] = 0;
      if (i < r.V) {
        const float p = prob(r.x, i, r.m, r.invT, r.invZ);
        if (p >= thr) q[k] = toFixed(p);
      }
      local += q[k];
    }
    u64 tileTotal;
    const u64 incl = blockInclusiveScan(local, sh.redU, tileTotal);
    if (base + tileTotal > target) {  // uniform: the answer is in this tile
      const u64 excl = incl - local;
      if (base + excl <= target && base + incl > target) {
        u64 run = base + excl;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          run += q[k];
          if (run > target) {
            sh.answer = i0 + k;
            break;
          }
        }
      }
      __syncthreads();
      return sh.answer;
    }
    base += tileTotal;
  }
  return lastKept;  // unreachable with exact integer sums (target < K); the rule's fallback
}

__global__ void __launch_bounds__(kThreads) sampleKernel(const float* __restrict__ logits, int V,
                                                         const float* __restrict__ temperature,
                                                         const int* __restrict__ topK, const float* __restrict__ topP,
                                                         const float* __restrict__ minP,
                                                         const float* __restrict__ uniform, int* __restrict__ outIds) {
  __shared__ Smem sh;
  const int row = blockIdx.x;
  Row r;
  r.x = logits + static_cast<size_t>(row) * V;
  r.V = V;
  float best = kNegInf;
  int bestIdx = V;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float v = __ldg(r.x + i);
    if (v > best || (v == best && i < bestIdx)) {
      best = v;
      bestIdx = i;
    }
  }
  blockArgmax(best, bestIdx, sh);
  if (bestIdx >= V) bestIdx = 0;  // only for rows of NaN logits (outside the contract)
  const float temp = __ldg(temperature + row);
  if (!(temp > 0.f)) {
    if (threadIdx.x == 0) outIds[row] = bestIdx;
    return;
  }
  r.m = best;
  r.invT = 1.f / temp;
  r.invZ = 1.f;
  float z = 0.f;
  for (int i = threadIdx.x; i < V; i += kThreads) z += prob(r.x, i, r.m, r.invT, 1.f);
  r.invZ = 1.f / blockSum<float>(z, sh.redF);

  const int k = __ldg(topK + row);
  const float tp = __ldg(topP + row);
  const float mp = __ldg(minP + row);
  float thr = 0.f;
  if (mp > 0.f) thr = mp * prob(r.x, bestIdx, r.m, r.invT, r.invZ);
  const bool useK = k > 0 && k < V;
  const bool useP = tp < 1.f;
  if (useK || useP) {
    float tK, tP;
    radixThresholds(r, useK, k, useP, tp, sh, tK, tP);
    thr = fmaxf(thr, fmaxf(tK, tP));
  }

  u64 kept = 0;
  int last = -1;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float p = prob(r.x, i, r.m, r.invT, r.invZ);
    if (p >= thr) {
      kept += toFixed(p);
      last = i;
    }
  }
  const u64 keptTotal = blockSum<u64>(kept, sh.redU);
  const int lastKept = blockMaxInt(last, sh.redI);
  // floor(u * K) exactly: u in [0, 1) as a 64-bit binary fraction times K.
  const float u = fminf(fmaxf(__ldg(uniform + row), 0.f), 0.99999994f);
  const u64 target = __umul64hi(__float2ull_rz(u * 18446744073709551616.0f), keptTotal);
  const int id = inverseCdf(r, thr, target, lastKept, sh);
  if (threadIdx.x == 0) outIds[row] = id;
}

}  // namespace
}  // namespace hs_sample

extern "C" size_t hsSampleWorkspaceBytes(int B, int V) {
  (void)B;
  (void)V;
  return 0;
}

extern "C" cudaError_t hsSample(const float* logits, int B, int V, const float* temperature, const int* topK,
                                const float* topP, const float* minP, const float* uniform, int* outIds,
                                void* workspace, size_t workspaceBytes, cudaStream_t s) {
  (void)workspace;
  (void)workspaceBytes;
  if (B < 0 || V <= 0 || V > (1 << 30) || logits == nullptr || temperature == nullptr || topK == nullptr ||
      topP == nullptr || minP == nullptr || uniform == nullptr || outIds == nullptr)
    return cudaErrorInvalidValue;
  if (B == 0) return cudaSuccess;
  hs_sample::sampleKernel<<<B, hs_sample::kThreads, 0, s>>>(logits, V, temperature, topK, topP, minP, uniform,
                                                            outIds);
  return cudaGetLastError();
}
