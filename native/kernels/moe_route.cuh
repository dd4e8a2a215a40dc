// The routing rule of the MoE kernels, one warp per token (moe_route.cu's hsMoeRoute and the
// small-batch decode path of moe_decode.cu share it): softmax or sigmoid scores, correction bias,
// group limit, top-k, renormalisation and routed scaling, with the CPU oracle's rounding points
// (see moe_route.cu). Internal to native/kernels.
#pragma once

#include <climits>

#include "common.cuh"
#include "moe.h"

namespace hs {
namespace moe_route {
namespace {

constexpr int kRouteWarps = 4;
constexpr int kPerLane = HS_MOE_MAX_EXPERTS / 32;
constexpr float kNegInf = -__builtin_huge_valf();

/** Per-warp shared floats: scores s [E], selection scores c [E], group scores [32], picked ids [32]. */
__host__ __device__ constexpr int routeWarpFloats(int E) { return 2 * E + 64; }

struct RouteArgs {
  const float* logits;
  const float* bias;
  int32_t* ids;
  float* weights;
  int T, E, k, scoring, renormalize, G, topkGroup;
  double scale;
};

/** True when (v, i) ranks before (bv, bi): larger value, or equal value and lower index. */
__device__ __forceinline__ bool ranksBefore(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

/** Warp-wide best (value, index) pair; every lane receives it. Empty lanes hold (-inf, INT_MAX). */
__device__ __forceinline__ void warpBest(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ranksBefore(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ double warpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/** s[e] for every expert of the row (softmax: float64 exp and sum, each p rounded to f32). */
__device__ void scoreRow(const RouteArgs& a, const float* row, float* s, int lane) {
  const int E = a.E;
  if (a.scoring == HS_MOE_SIGMOID) {
    for (int e = lane; e < E; e += 32) s[e] = __double2float_rn(1.0 / (1.0 + exp(-static_cast<double>(row[e]))));
    return;
  }
  float m = kNegInf;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, row[e]);
  m = warpMax(m);
  double ex[kPerLane];
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    ex[i] = e < E ? exp(static_cast<double>(row[e]) - static_cast<double>(m)) : 0.0;
    sum += ex[i];
  }
  sum = warpSumD(sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < E) s[e] = __double2float_rn(ex[i] / sum);
  }
}

/**
 * Group limit: a group's score is the f32 sum of its two largest c; the topkGroup best groups
 * (ties: lower group first; -inf / NaN groups never kept) keep their experts, the others get
 * c = -inf. G <= 32 groups of E / G consecutive experts.
 */
__device__ void limitGroups(const RouteArgs& a, float* c, float* grp, int lane) {
  const int per = a.E / a.G;
  if (lane < a.G) {
    float x1 = kNegInf;
    float x2 = kNegInf;
    for (int e = lane * per; e < (lane + 1) * per; ++e) {
      const float x = c[e];
      if (x > x1) {
        x2 = x1;
        x1 = x;
      } else if (x > x2) {
        x2 = x;
      }
    }
    grp[lane] = __fadd_rn(x1, x2);
  }
  __syncwarp();
  float gv = lane < a.G ? grp[lane] : kNegInf;
  unsigned keep = 0;
  for (int r = 0; r < a.topkGroup; ++r) {
    float v = gv > kNegInf ? gv : kNegInf;  // NaN -> -inf: never kept
    int i = v > kNegInf ? lane : INT_MAX;
    warpBest(v, i);
    if (i == INT_MAX) break;  // no selectable group left (uniform across the warp)
    keep |= 1u << i;
    if (lane == i) gv = kNegInf;
  }
  for (int e = lane; e < a.E; e += 32)
    if (((keep >> (e / per)) & 1u) == 0) c[e] = kNegInf;
  __syncwarp();
}

/**
 * Routes token t with one warp: reads logits row `row` (E floats, global or shared), uses the
 * warp's routeWarpFloats(E) shared floats at `s`, writes ids / weights [t * k + rank] (rank: the
 * id's place in ascending order). Every lane of the warp must call it.
 */
__device__ void routeToken(const RouteArgs& a, const float* row, int t, float* s, int lane) {
  const int E = a.E;
  float* c = s + E;
  float* grp = c + E;
  int* picked = reinterpret_cast<int*>(grp + 32);
  scoreRow(a, row, s, lane);
  __syncwarp();
  for (int e = lane; e < E; e += 32) c[e] = a.bias != nullptr ? __fadd_rn(s[e], a.bias[e]) : s[e];
  __syncwarp();
  if (a.G > 1) limitGroups(a, c, grp, lane);
  float sum = 0.f;
  for (int j = 0; j < a.k; ++j) {
    float v = kNegInf;
    int best = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float x = c[e];
      if (x > v) {  // ascending e and a strict test: the lowest id among equal values
        v = x;
        best = e;
      }
    }
    warpBest(v, best);
    if (best == INT_MAX) {  // fewer than k selectable experts: the lowest id not picked yet
      for (int e = 0; e < E && best == INT_MAX; ++e) {
        bool used = false;
        for (int q = 0; q < j; ++q) used = used || picked[q] == e;
        if (!used) best = e;
      }
    }
    if (lane == 0) {
      picked[j] = best;
      c[best] = kNegInf;
    }
    sum = __fadd_rn(sum, s[best]);
    __syncwarp();
  }
  const float denom = __double2float_rn(static_cast<double>(sum) + 1e-20);
  if (lane < a.k) {
    const int e = picked[lane];
    int rank = 0;
    for (int q = 0; q < a.k; ++q) rank += picked[q] < e ? 1 : 0;
    float w = s[e];
    if (a.renormalize) w = __fdiv_rn(w, denom);
    w = __double2float_rn(static_cast<double>(w) * a.scale);
    const size_t o = static_cast<size_t>(t) * a.k + rank;
    a.ids[o] = e;
    a.weights[o] = w;
  }
}

}  // namespace
}  // namespace moe_route
}  // namespace hs
