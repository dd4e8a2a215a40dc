// C++ ports of the CPU oracle's MLA and DSA indexer kernels (src/backends/cpu/kernels/mla.ts and
// dsa.ts), for native/tests/mla_test.cu: expanded MLA attention in float64, indexer logits, the
// causal top-k with the engine's tie rule. Inputs are the float values the device kernels see.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace mla_ref {

/** Where a step's tokens sit: requests, lengths, block tables (host copies). */
struct Step {
  std::vector<int32_t> qsl, seqLens, blockTables;
  int maxBlocksPerReq = 0, blockSize = 16;
  int numReqs() const { return static_cast<int>(seqLens.size()); }
  int numTokens() const { return qsl.back(); }
  int slot(int r, int i) const { return blockTables[r * maxBlocksPerReq + i / blockSize] * blockSize + i % blockSize; }
  /** Request and position of token t. */
  void where(int t, int& r, int& p) const {
    for (r = 0; r < numReqs(); ++r)
      if (qsl[r] <= t && t < qsl[r + 1]) break;
    p = seqLens[r] - (qsl[r + 1] - qsl[r]) + (t - qsl[r]);
  }
};

struct Dims {
  int Hq, N, R, Vd, C;
  double scale;
};

/**
 * Expanded MLA attention (mlaAttentionKernel): k_nope / v per attended row from kv_b_proj, float64
 * softmax. q: [T, Hq(N+R)]; cache: [slots, C+R]; kvB: [Hq(N+Vd), C]; topk: [T, K] or empty.
 */
inline std::vector<double> attention(const std::vector<float>& q, const std::vector<float>& cache,
                                     const std::vector<float>& kvB, const Step& st, const Dims& d,
                                     const std::vector<int32_t>& topk, int K) {
  const int T = st.numTokens();
  const int D = d.C + d.R;
  std::vector<double> out(static_cast<size_t>(T) * d.Hq * d.Vd, 0.0);
  for (int t = 0; t < T; ++t) {
    int r, p;
    st.where(t, r, p);
    std::vector<int> list;
    if (topk.empty()) {
      for (int i = 0; i <= p; ++i) list.push_back(i);
    } else {
      for (int j = 0; j < K; ++j)
        if (topk[t * K + j] >= 0 && topk[t * K + j] <= p) list.push_back(topk[t * K + j]);
    }
    for (int h = 0; h < d.Hq; ++h) {
      std::vector<double> s(list.size());
      std::vector<std::vector<double>> v(list.size(), std::vector<double>(d.Vd));
      double mx = -INFINITY;
      for (size_t a = 0; a < list.size(); ++a) {
        const float* row = &cache[static_cast<size_t>(st.slot(r, list[a])) * D];
        const float* qh = &q[(static_cast<size_t>(t) * d.Hq + h) * (d.N + d.R)];
        double dot = 0;
        for (int n = 0; n < d.N; ++n) {
          double k = 0;
          for (int c = 0; c < d.C; ++c) k += static_cast<double>(kvB[(static_cast<size_t>(h) * (d.N + d.Vd) + n) * d.C + c]) * row[c];
          dot += qh[n] * k;
        }
        for (int n = 0; n < d.R; ++n) dot += static_cast<double>(qh[d.N + n]) * row[d.C + n];
        for (int e = 0; e < d.Vd; ++e) {
          double acc = 0;
          for (int c = 0; c < d.C; ++c)
            acc += static_cast<double>(kvB[(static_cast<size_t>(h) * (d.N + d.Vd) + d.N + e) * d.C + c]) * row[c];
          v[a][e] = acc;
        }
        s[a] = dot * d.scale;
        mx = std::max(mx, s[a]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int e = 0; e < d.Vd && !list.empty(); ++e) {
        double acc = 0;
        for (size_t a = 0; a < list.size(); ++a) acc += s[a] * v[a][e];
        out[(static_cast<size_t>(t) * d.Hq + h) * d.Vd + e] = acc / sum;
      }
    }
  }
  return out;
}

/** indexerLogitsKernel. q: [T, Hi Di]; w: [T, Hi]; keys: [slots, Di] -> [T, width]. */
inline std::vector<float> indexerLogits(const std::vector<float>& q, const std::vector<float>& w,
                                        const std::vector<float>& keys, const Step& st, int Hi, int Di,
                                        float softmaxScale, float headWeightScale, int width) {
  const int T = st.numTokens();
  std::vector<float> out(static_cast<size_t>(T) * width, -INFINITY);
  for (int t = 0; t < T; ++t) {
    int r, p;
    st.where(t, r, p);
    for (int i = 0; i <= p; ++i) {
      const float* k = &keys[static_cast<size_t>(st.slot(r, i)) * Di];
      double acc = 0;
      for (int h = 0; h < Hi; ++h) {
        double dot = 0;
        for (int e = 0; e < Di; ++e) dot += static_cast<double>(q[(static_cast<size_t>(t) * Hi + h) * Di + e]) * k[e];
        const float s = static_cast<float>(static_cast<float>(dot) * softmaxScale);
        if (s > 0) acc += static_cast<double>(s) * static_cast<float>(w[t * Hi + h] * headWeightScale);
      }
      out[static_cast<size_t>(t) * width + i] = static_cast<float>(acc);
    }
  }
  return out;
}

inline double orderValue(float v) { return std::isnan(v) ? -INFINITY : v == 0 ? 0.0 : v; }

/** topkIndicesKernel. logits: [T, width]; positions: [T] -> [T, k]. */
inline std::vector<int32_t> topk(const std::vector<float>& logits, int width, const std::vector<int32_t>& positions,
                                 int k) {
  const int T = static_cast<int>(positions.size());
  std::vector<int32_t> out(static_cast<size_t>(T) * k, -1);
  for (int t = 0; t < T; ++t) {
    const int n = positions[t] + 1;
    std::vector<int> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    if (n > k) {
      const float* row = &logits[static_cast<size_t>(t) * width];
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return orderValue(row[a]) > orderValue(row[b]); });
      idx.resize(k);
      std::sort(idx.begin(), idx.end());
    }
    for (size_t j = 0; j < idx.size(); ++j) out[static_cast<size_t>(t) * k + j] = idx[j];
  }
  return out;
}

}  // namespace mla_ref
