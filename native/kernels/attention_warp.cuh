// Warp-level attention steps shared by the paged decode and prefill attention kernels
// (attention_decode.cu, attention_prefill.cu): S = QK^T from the swizzled shared tiles, the
// online softmax, O += PV, and the quad reduction. Internal header: not part of the C ABI; the
// fragment layouts and tile addressing are attention_tile.cuh's, which includes this file at its
// end (so including either gives both).
#pragma once

#include "attention_tile.cuh"

namespace hs_attn {

// ---- warp-level attention steps ----------------------------------------------------------------

/**
 * s[mt][nt] = Q(rows qRowBase + 16mt ..) . K(keys keyBase + 8nt ..)^T for one warp.
 * Q fragments read from the shared tile `sQ` at every k-step (MT m16 slabs, NT n8 key tiles).
 */
template <int D, int MT, int NT>
__device__ __forceinline__ void warpScores(float (&s)[MT][NT][4], uint32_t sQ, int qRowBase, uint32_t sK,
                                           int keyBase, int lane) {
  static_assert(NT % 2 == 0, "key tiles come in pairs");
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) loadAFrag<D>(a[mt], sQ, qRowBase + 16 * mt, ks, lane);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      loadKFrag<D>(b, sK, keyBase + 16 * np, ks, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mmaBf16(s[mt][2 * np], a[mt], b[0], b[1]);
        mmaBf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

/**
 * Online softmax update (FlashAttention-2, Dao 2023, Algorithm 1) for the rows this thread holds:
 * row g (elements 0,1) and g+8 (elements 2,3) of each m16 slab. m: running max of raw scores
 * (-inf while empty); l: this thread's share of the running sum (quad-reduced at the end);
 * o rescaled by exp2((m_old - m_new) * scaleLog2). On return s holds the probabilities.
 * Masked scores must already be -inf; rows with no key so far keep m = -inf, l = 0, o = 0.
 */
template <int D, int MT, int NT>
__device__ __forceinline__ void onlineSoftmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                              float (&o)[MT][D / 8][4], float scaleLog2) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mNew = fmaxf(m[mt][hh], mx);
      const float mScaled = mNew == kNegInf ? 0.f : mNew * scaleLog2;
      const float alpha = fastExp2(m[mt][hh] * scaleLog2 - mScaled);
      m[mt][hh] = mNew;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
          const float p = fastExp2(fmaf(s[mt][nt][e], scaleLog2, -mScaled));
          s[mt][nt][e] = p;
          sum += p;
        }
      }
      l[mt][hh] = l[mt][hh] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[mt][dt][2 * hh] *= alpha;
        o[mt][dt][2 * hh + 1] *= alpha;
      }
    }
  }
}

/**
 * o[mt] += P(s, as bf16) . V(keys keyBase .. keyBase + 8NT) for one warp. The C fragments of
 * two adjacent n8 score tiles are exactly the A fragment of one k16 step (FlashAttention-2's
 * register reuse), so P never leaves registers.
 */
template <int D, int MT, int NT>
__device__ __forceinline__ void warpPV(float (&o)[MT][D / 8][4], const float (&s)[MT][NT][4], uint32_t sV,
                                       int keyBase, int lane) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t pa[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      pa[mt][0] = packBf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      pa[mt][1] = packBf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      pa[mt][2] = packBf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      pa[mt][3] = packBf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      loadVFrag<D>(b, sV, keyBase + 16 * kk, dp, lane);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mmaBf16(o[mt][2 * dp], pa[mt], b[0], b[1]);
        mmaBf16(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
      }
    }
  }
}

/** Same as warpScores for one m16 slab whose A fragments are held in registers (qf[ks]). */
template <int D, int NT>
__device__ __forceinline__ void warpScoresRegQ(float (&s)[1][NT][4], const uint32_t (&qf)[D / 16][4], uint32_t sK,
                                               int keyBase, int lane) {
  static_assert(NT % 2 == 0, "key tiles come in pairs");
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t b[4];
      loadKFrag<D>(b, sK, keyBase + 16 * np, ks, lane);
      mmaBf16(s[0][2 * np], qf[ks], b[0], b[1]);
      mmaBf16(s[0][2 * np + 1], qf[ks], b[2], b[3]);
    }
  }
}

/** Sums a per-thread partial over the 4 lanes of a quad (the lanes sharing one row). */
__device__ __forceinline__ float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

}  // namespace hs_attn
