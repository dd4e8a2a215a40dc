// Standalone test of the small-batch MoE path (native/kernels/moe_decode.h) against the C++ port of
// the CPU oracle (moe_ref.h) and against the grouped path (moe.h). Usage:
//   moe_decode_test [--quick] [--bench]
// Per case (T tokens, E experts, top-k, H, I, optional shared expert of width Is):
// - router logits within f32 accumulation noise of a float64 reference;
// - ids identical to the oracle's routing of those logits, weights within 1 f32 ulp (moe_route.cu);
// - the plan: the distinct experts in ascending order, each with its slots ascending;
// - the layer output within bf16 tolerance of a float64 reference with the path's roundings, and of
//   the grouped path (route -> permute -> grouped GEMMs -> unpermute) on the same routing;
// - batch invariance: each token alone (T = 1) gives bitwise its row of the batch;
// - graph replay == eager, and the sync buffer is all zero after every run.
// --bench (GPU only): Qwen3-30B-A3B's layer (E 128, k 8, H 2048, I 768) at T = 1, 2, 4, 8, 16:
// the new path's kernels and whole-layer graph vs the grouped path's graph (moe_decode_bench.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../kernels/moe.h"
#include "../kernels/moe_decode.h"
#include "moe_decode_layer.h"
#include "moe_ref.h"
#include "test_common.h"

using namespace hs_test;
using namespace moe_decode_test;

namespace {

Tally tally;

/** f32 ulps between two floats of the same sign (large otherwise). */
long long ulps(float a, float b) {
  if (a == b) return 0;
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  if ((a < 0) != (b < 0) || std::isnan(a) || std::isnan(b)) return 1 << 30;
  return std::llabs(static_cast<long long>(ua) - static_cast<long long>(ub));
}

/** The plan the route kernel must write for these ids (moe_decode.h). */
std::vector<int32_t> expectedPlan(const std::vector<int32_t>& ids, int T, int k, int E) {
  const int S = T * k, A = std::min(E, S);
  std::vector<int32_t> plan(2 * A + 1 + S, 0);
  int a = 0, p = 0;
  for (int e = 0; e < E; ++e) {
    bool hit = false;
    for (int s = 0; s < S; ++s)
      if (ids[s] == e) {
        if (!hit) {
          plan[a] = e;
          plan[A + a] = p;
          hit = true;
        }
        plan[2 * A + 1 + p++] = s;
      }
    a += hit ? 1 : 0;
  }
  for (int q = a; q < A; ++q) {
    plan[q] = -1;
    plan[A + q] = S;
  }
  plan[2 * A] = S;
  return plan;
}

/**
 * Float64 reference of the layer with the path's rounding points, on the given routing:
 * act = T(T(silu(T(g))) * T(u)), y = T(down . act), out = T(sum_j f32(w y) + y_shared).
 */
std::vector<float> referenceOut(const HostLayer& h, const Shape& c, const std::vector<int32_t>& ids,
                                const std::vector<float>& w) {
  auto bf = [](double v) { return bf16ToFloat(floatToBf16(static_cast<float>(v))); };
  auto expert = [&](const float* gu, const float* dn, int I, int t, std::vector<float>& y) {
    std::vector<float> act(I);
    const float* xt = &h.x[static_cast<size_t>(t) * c.H];
    for (int i = 0; i < I; ++i) {
      double g = 0, u = 0;
      for (int q = 0; q < c.H; ++q) {
        g += static_cast<double>(gu[static_cast<size_t>(i) * c.H + q]) * xt[q];
        u += static_cast<double>(gu[static_cast<size_t>(I + i) * c.H + q]) * xt[q];
      }
      const float gf = bf(g);
      const float silu = bf(gf / (1.0f + std::exp(-gf)));
      act[i] = bf(static_cast<double>(silu) * bf(u));
    }
    y.assign(c.H, 0.f);
    for (int r = 0; r < c.H; ++r) {
      double acc = 0;
      for (int i = 0; i < I; ++i) acc += static_cast<double>(dn[static_cast<size_t>(r) * I + i]) * act[i];
      y[r] = bf(acc);
    }
  };
  std::vector<float> out(static_cast<size_t>(c.T) * c.H);
  std::vector<float> y;
  for (int t = 0; t < c.T; ++t) {
    std::vector<float> acc(c.H, 0.f);
    for (int j = 0; j < c.k; ++j) {
      const int e = ids[t * c.k + j];
      expert(&h.gateUp[static_cast<size_t>(e) * 2 * c.I * c.H], &h.down[static_cast<size_t>(e) * c.H * c.I], c.I, t,
             y);
      for (int r = 0; r < c.H; ++r) acc[r] = acc[r] + y[r] * w[t * c.k + j];
    }
    if (c.Is > 0) {
      expert(h.sGateUp.data(), h.sDown.data(), c.Is, t, y);
      for (int r = 0; r < c.H; ++r) acc[r] = acc[r] + y[r];
    }
    for (int r = 0; r < c.H; ++r) out[static_cast<size_t>(t) * c.H + r] = bf(acc[r]);
  }
  return out;
}

/** max over elements of |a - b| / (|b| / 64 + atol), atol = 2% of the largest |b| of the row. */
double worstRatio(const std::vector<float>& a, const std::vector<float>& b, int H) {
  double worst = 0;
  for (size_t r = 0; r * H < b.size(); ++r) {
    double scale = 0;
    for (int i = 0; i < H; ++i) scale = std::max(scale, std::fabs(static_cast<double>(b[r * H + i])));
    for (int i = 0; i < H; ++i) {
      const double d = std::fabs(static_cast<double>(a[r * H + i]) - b[r * H + i]);
      worst = std::max(worst, d / (std::fabs(static_cast<double>(b[r * H + i])) / 64 + 0.02 * scale + 1e-30));
    }
  }
  return worst;
}

void testCase(const Shape& c, Rng& rng) {
  const HostLayer h = HostLayer::random(c, rng);
  DecodeLayer L(c);
  L.upload(h);
  L.run(nullptr);
  HS_CHECK(cudaDeviceSynchronize());
  const std::string name = c.name;
  // Logits.
  const auto logits = L.logits.download();
  double worstLogit = 0;
  for (int t = 0; t < c.T; ++t)
    for (int e = 0; e < c.E; ++e) {
      double ref = 0, mag = 0;
      for (int q = 0; q < c.H; ++q) {
        const double p = static_cast<double>(h.router[static_cast<size_t>(e) * c.H + q]) * h.x[t * c.H + q];
        ref += p;
        mag += std::fabs(p);
      }
      worstLogit = std::max(worstLogit, std::fabs(logits[t * c.E + e] - ref) / (mag * 1e-6 + 1e-30));
    }
  tally.record(worstLogit <= 1.0, (name + ": router logits").c_str());
  // Routing of those logits, and the plan.
  const auto ids = L.ids.download();
  const auto w = L.weights.download();
  std::vector<int32_t> rid(c.k);
  std::vector<float> rw(c.k);
  bool routeOk = true;
  for (int t = 0; t < c.T; ++t) {
    moe_ref::routeRow(&logits[static_cast<size_t>(t) * c.E], c.bias ? h.bias.data() : nullptr, c.E, c.rule,
                      rid.data(), rw.data());
    for (int j = 0; j < c.k; ++j)
      routeOk = routeOk && ids[t * c.k + j] == rid[j] && ulps(w[t * c.k + j], rw[j]) <= 1;
  }
  tally.record(routeOk, (name + ": routing == oracle").c_str());
  tally.record(L.plan.download() == expectedPlan(ids, c.T, c.k, c.E), (name + ": plan").c_str());
  // Output vs the float64 reference and vs the grouped path.
  const auto out = toFloats(L.out.download());
  const double vsRef = worstRatio(out, referenceOut(h, c, ids, w), c.H);
  const double vsGrouped = worstRatio(out, toFloats(L.runGrouped(nullptr)), c.H);
  if (vsRef > 1 || vsGrouped > 1)
    std::printf("  %s: worst error %.2f of tolerance vs reference, %.2f vs the grouped path\n", c.name, vsRef,
                vsGrouped);
  tally.record(vsRef <= 1, (name + ": output vs float64 reference").c_str());
  tally.record(vsGrouped <= 1, (name + ": output vs grouped path").c_str());
  // Batch invariance: tokens 0 and T - 1 alone.
  bool invariant = true;
  for (int t : {0, c.T - 1}) {
    Shape one = c;
    one.T = 1;
    DecodeLayer L1(one);
    L1.upload(h.tokenOnly(c, t));
    L1.run(nullptr);
    HS_CHECK(cudaDeviceSynchronize());
    const auto o1 = L1.out.download();
    const auto ob = L.out.download();
    invariant = invariant && std::memcmp(o1.data(), &ob[static_cast<size_t>(t) * c.H], c.H * 2) == 0;
  }
  tally.record(invariant, (name + ": a token alone == its row of the batch").c_str());
  // Graph replay on new inputs == eager; the sync buffer zero after each run.
  cudaStream_t s;
  HS_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  HS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  L.run(s);
  HS_CHECK(cudaStreamEndCapture(s, &g));
  HS_CHECK(cudaGraphInstantiate(&ge, g, 0));
  bool replay = true, zero = true;
  for (int rep = 0; rep < 2; ++rep) {
    L.x.upload(toBf16(randomValues(rng, L.x.count, 1.0)));
    L.out.poison();
    HS_CHECK(cudaGraphLaunch(ge, s));
    HS_CHECK(cudaStreamSynchronize(s));
    const auto viaGraph = L.out.download();
    for (int32_t v : L.sync.download()) zero = zero && v == 0;
    L.out.poison();
    L.run(s);
    HS_CHECK(cudaStreamSynchronize(s));
    replay = replay && viaGraph == L.out.download();
  }
  HS_CHECK(cudaGraphExecDestroy(ge));
  HS_CHECK(cudaGraphDestroy(g));
  HS_CHECK(cudaStreamDestroy(s));
  tally.record(replay, (name + ": graph replay == eager").c_str());
  tally.record(zero, (name + ": sync buffer zero after each run").c_str());
}

void tests(bool quick) {
  Rng rng(21);
  using R = moe_ref::Rule;
  const R softmax{0, 4, true, 1, 1, 1.0};
  const R sigmoid{1, 4, true, 1, 1, 2.5};
  const R grouped{1, 4, true, 4, 2, 2.5};
  std::vector<Shape> cases = {
      {"T1 E16 k4 softmax", 1, 16, 4, 64, 32, 0, softmax, false},
      {"T3 E16 k4 softmax, shared Is 32", 3, 16, 4, 64, 32, 32, softmax, false},
      {"T8 E16 k4 sigmoid+bias x2.5, shared Is 64 (Is != I)", 8, 16, 4, 96, 32, 64, sigmoid, true},
      {"T5 E16 G4/2 k4 noaux_tc, H 40 (ragged chunks)", 5, 16, 4, 40, 16, 0, grouped, true},
  };
  if (!quick) {
    cases.push_back({"T16 E64 k8 softmax (bucket 16), shared", 16, 64, 8, 256, 64, 64, R{0, 8, true, 1, 1, 1.0}, false});
    // Qwen3-30B-A3B's H and I with 16 experts (the host reference of 128 would take GBs).
    cases.push_back({"T1 E16 k8 H2048 I768", 1, 16, 8, 2048, 768, 0, R{0, 8, true, 1, 1, 1.0}, false});
    cases.push_back({"T6 E16 k8 H2048 I768", 6, 16, 8, 2048, 768, 0, R{0, 8, true, 1, 1, 1.0}, false});
    cases.push_back({"T4 E256 G8/4 k8 deepseek-v3 routing, shared", 4, 256, 8, 512, 128, 128,
                     R{1, 8, true, 8, 4, 2.5}, true});
  }
  for (const auto& c : cases) testCase(c, rng);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  tests(quick);
  const int rc = tally.finish("moe_decode_test");
#ifndef HS_ATTN_HOST_EMU
  if (hasFlag(argc, argv, "--bench")) bench();
#endif
  return rc;
}
