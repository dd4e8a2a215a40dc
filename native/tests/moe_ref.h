// C++ ports of the CPU oracle of Backend.moe (src/backends/cpu/kernels/moe.ts: routeKernel,
// permuteKernel, unpermuteKernel) for native/tests/moe_test.cu, with the same rounding points
// (float64 where the TS code computes in doubles, f32 where it calls Math.fround), plus a float64
// reference of the grouped GEMM. Where the oracle throws (ids outside [0, E), fewer than k
// selectable experts), these follow the documented GPU behaviour instead (moe.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace moe_ref {

struct Rule {
  int scoring;  // 0 softmax, 1 sigmoid
  int topK;
  bool renormalize;
  int numGroups;
  int topkGroup;
  double scale;
};

inline float f32(double v) { return static_cast<float>(v); }

/** Index of the largest not-taken value (ties: lowest index), marked -inf; -1 when none > -inf. */
inline int takeMax(std::vector<float>& v) {
  int best = -1;
  double bestVal = -HUGE_VAL;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] > bestVal) {
      bestVal = v[i];
      best = static_cast<int>(i);
    }
  if (best >= 0) v[best] = -HUGE_VALF;
  return best;
}

/** routeKernel of moe.ts for one row; ids ascending, weights in the same order. */
inline void routeRow(const float* logits, const float* bias, int E, const Rule& r, int32_t* ids, float* w) {
  std::vector<float> s(E), c(E);
  if (r.scoring == 1) {
    for (int e = 0; e < E; ++e) s[e] = f32(1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))));
  } else {
    double m = -HUGE_VAL;
    for (int e = 0; e < E; ++e) m = std::max(m, static_cast<double>(logits[e]));
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e]) - m);
    for (int e = 0; e < E; ++e) s[e] = f32(std::exp(static_cast<double>(logits[e]) - m) / sum);
  }
  for (int e = 0; e < E; ++e) c[e] = bias == nullptr ? s[e] : f32(static_cast<double>(s[e]) + bias[e]);
  if (r.numGroups > 1) {
    const int G = r.numGroups, per = E / G;
    std::vector<float> groups(G);
    for (int g = 0; g < G; ++g) {
      double a = -HUGE_VAL, b = -HUGE_VAL;
      for (int i = g * per; i < (g + 1) * per; ++i) {
        const double x = c[i];
        if (x > a) {
          b = a;
          a = x;
        } else if (x > b) {
          b = x;
        }
      }
      groups[g] = f32(a + b);
    }
    std::vector<int> keep(G, 0);
    for (int i = 0; i < r.topkGroup; ++i) {
      const int g = takeMax(groups);
      if (g >= 0) keep[g] = 1;
    }
    for (int g = 0; g < G; ++g)
      if (!keep[g])
        for (int i = g * per; i < (g + 1) * per; ++i) c[i] = -HUGE_VALF;
  }
  std::vector<int> picked;
  float sum = 0.f;
  for (int j = 0; j < r.topK; ++j) {
    int e = takeMax(c);
    if (e < 0)  // GPU behaviour where the oracle throws: the lowest id not picked yet
      for (int q = 0; q < E && e < 0; ++q)
        if (std::find(picked.begin(), picked.end(), q) == picked.end()) e = q;
    picked.push_back(e);
    sum = f32(static_cast<double>(sum) + s[e]);
  }
  const float denom = f32(static_cast<double>(sum) + 1e-20);
  std::sort(picked.begin(), picked.end());
  for (int j = 0; j < r.topK; ++j) {
    const int e = picked[j];
    float wt = s[e];
    if (r.renormalize) wt = f32(static_cast<double>(wt) / denom);
    ids[j] = e;
    w[j] = f32(static_cast<double>(wt) * r.scale);
  }
}

/** permuteKernel of moe.ts (ids outside [0, E) get row -1 and no segment). */
inline void permute(const std::vector<int32_t>& ids, int T, int k, int E, std::vector<int32_t>& offsets,
                    std::vector<int32_t>& slotToRow) {
  offsets.assign(E + 1, 0);
  for (int i = 0; i < T * k; ++i)
    if (ids[i] >= 0 && ids[i] < E) offsets[ids[i] + 1]++;
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> cursor(offsets.begin(), offsets.end() - 1);
  slotToRow.assign(T * k, -1);
  for (int i = 0; i < T * k; ++i)
    if (ids[i] >= 0 && ids[i] < E) slotToRow[i] = cursor[ids[i]]++;
}

/** unpermuteKernel of moe.ts on f32 values (rows outside [0, P) add nothing), before output rounding. */
inline void unpermute(const std::vector<float>& y, int P, int H, const std::vector<int32_t>& rows,
                      const std::vector<float>& w, int T, int k, const float* shared, std::vector<float>& out) {
  out.assign(static_cast<size_t>(T) * H, 0.f);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int r = rows[t * k + j];
      if (r < 0 || r >= P) continue;
      const float wt = w[t * k + j];
      for (int i = 0; i < H; ++i) {
        float& o = out[static_cast<size_t>(t) * H + i];
        o = f32(static_cast<double>(o) + f32(static_cast<double>(y[static_cast<size_t>(r) * H + i]) * wt));
      }
    }
  if (shared != nullptr)
    for (size_t i = 0; i < out.size(); ++i) out[i] = f32(static_cast<double>(out[i]) + shared[i]);
}

/** Grouped GEMM in float64: out[r, n] = sum_k x[r, k] w[e, n, k] for rows of segment e; other rows untouched. */
inline void groupedGemm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<int32_t>& off,
                        int E, int N, int K, std::vector<double>& out) {
  for (int e = 0; e < E; ++e)
    for (int r = off[e]; r < off[e + 1]; ++r)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        const float* xr = &x[static_cast<size_t>(r) * K];
        const float* wr = &w[(static_cast<size_t>(e) * N + n) * K];
        for (int q = 0; q < K; ++q) acc += static_cast<double>(xr[q]) * wr[q];
        out[static_cast<size_t>(r) * N + n] = acc;
      }
}

}  // namespace moe_ref
