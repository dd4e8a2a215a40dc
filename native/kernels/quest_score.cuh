// The Quest scorer's per-lane arithmetic (hisparse_select.cu questScoreKernel, steps 1-2 of its
// file comment): one lane's 8 elements of a sub-page digest, and the bounds of kN sub-pages of a
// page summed in the oracle's order (quest.ts questScore) with a transpose-reduce butterfly.
// Internal header: not part of the C ABI.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>

#include "hisparse.h"
#include "hisparse_common.cuh"

namespace hs_sparse {

/**
 * Lane l's 8 elements of one sub-page digest's min and max (kv head g), as floats; zeros when
 * !load (an unscored page, or the lanes past D). Digests [numHostBlocks * S, 2, Hkv, D] of bf16
 * (kFp8 false: one 16-byte load each) or e4m3 codes (one 8-byte load each, converted exactly).
 */
template <bool kFp8>
__device__ __forceinline__ void loadDigest(const HsQuestSelectParams& a, size_t sub, int g, int l, bool load,
                                           float (&mn)[8], float (&mx)[8]) {
  const size_t at = (sub * 2 * a.numKvHeads + g) * a.headDim;  // elements
  const size_t half = static_cast<size_t>(a.numKvHeads) * a.headDim / 8;  // min -> max, in 8-element vectors
  if constexpr (kFp8) {
    uint2 lo{0u, 0u};
    uint2 hi{0u, 0u};
    if (load) {
      const uint2* d = reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(a.digests) + at);
      lo = d[l];
      hi = d[half + l];
    }
    e4m3x8ToFloat(lo, mn);
    e4m3x8ToFloat(hi, mx);
  } else {
    uint4 lo = make_uint4(0u, 0u, 0u, 0u);
    uint4 hi = lo;
    if (load) {
      const uint4* d = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(a.digests) + at);
      lo = d[l];
      hi = d[half + l];
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      mn[e] = bf16Bits(lane16(lo, e));
      mx[e] = bf16Bits(lane16(hi, e));
    }
  }
}

/**
 * The butterfly sums of kN sub-page partial sums v[0..kN) over a page's L lanes (quest.ts
 * questScore: the lanes' sums at o = L/2, L/4, .., 1, each rounded), as a transpose-reduce: at
 * the first log2(kN) levels a lane keeps half of its values (the lower half when its bit o is
 * clear) and swaps the other half with its partner, so a level costs kN / 2 shuffles instead of
 * kN; every sum is still (own + partner) in the oracle's tree, and addition commutes, so each
 * sub-page's total is bit-identical to the oracle's lane 0. Returns this lane's total: the
 * sub-page whose index the lane's bits o = L/2 .. L/kN pick (every sub-page sits in some lane).
 * Every lane of the warp calls it; requires kN <= L.
 */
template <int kN>
__device__ __forceinline__ float butterflySums(float (&v)[kN], int L, int l) {
  int o = L >> 1;
#pragma unroll
  for (int n = kN; n > 1; n >>= 1, o >>= 1) {
    const bool hi = (l & o) != 0;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float keep = hi ? v[i + n / 2] : v[i];
      const float send = hi ? v[i] : v[i + n / 2];
      v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, o));
    }
  }
  float s = v[0];
  for (; o >= 1; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
  return s;
}

/**
 * The largest bound of kN sub-pages of one page for one lane's 8 dims, over the heads of the
 * group (step 2 of the file comment): the sub-pages share each q load from shared memory and
 * their sums are independent (kN chains in flight). Returns the largest of the totals this lane
 * holds (butterflySums); the page's score is the largest over the lanes at bits L/2 .. L/kN.
 * Every lane of the warp calls it. qs: the group's [G][2][L] float4 qPos then [G][2][L] float4
 * qNeg; mn / mx: this lane's 8 values of each sub-page's min / max digest (zeros past D or for an
 * unscored page).
 */
template <int kN>
__device__ __forceinline__ float laneScores(const float4* qs, int G, int L, int l, const float (&mn)[kN][8],
                                            const float (&mx)[kN][8]) {
  const float4* qNeg = qs + static_cast<size_t>(G) * 2 * L;
  float best = -INFINITY;
  for (int h = 0; h < G; ++h) {
    float s[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) s[j] = 0.f;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float4 pp = qs[(h * 2 + half) * L + l];
      const float4 nn = qNeg[(h * 2 + half) * L + l];
      const float qp[4] = {pp.x, pp.y, pp.z, pp.w};
      const float qn[4] = {nn.x, nn.y, nn.z, nn.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = half * 4 + e;
#pragma unroll
        for (int j = 0; j < kN; ++j) {  // the oracle's order within each sub-page: qPos*max, then qNeg*min
          s[j] = __fadd_rn(s[j], __fmul_rn(qp[e], mx[j][k]));
          s[j] = __fadd_rn(s[j], __fmul_rn(qn[e], mn[j][k]));
        }
      }
    }
    const float t = butterflySums<kN>(s, L, l);
    const float v = t != t ? -INFINITY : t;
    if (v > best) best = v;
  }
  return best;
}

}  // namespace hs_sparse
