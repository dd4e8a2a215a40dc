// The shared parts of native/tests/moe_test.cu: bf16 helpers, the device state of one whole MoE
// layer (route -> permute -> gate_up+silu -> down -> unpermute) used by the graph test, and the
// --bench timing of Qwen3-30B-A3B's layer shapes (GPU only). Included by moe_test.cu only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/moe.h"
#include "test_common.h"

namespace hs_moe_test {

using namespace hs_test;

inline std::vector<uint16_t> toBf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = floatToBf16(v[i]);
  return r;
}
/** Random values rounded to bf16 (as floats). */
inline std::vector<float> randomBf16Values(Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = bf16ToFloat(floatToBf16(static_cast<float>(rng.normal() * scale)));
  return v;
}
inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
/** Distance in f32 ulps between two finite floats of the same sign (large otherwise). */
inline long long ulpDistance(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b) || (a < 0) != (b < 0)) return 1 << 30;
  return std::llabs(static_cast<long long>(bitsOf(a)) - static_cast<long long>(bitsOf(b)));
}

/** Device state of one MoE layer (E experts, k, H hidden, I intermediate). */
struct Layer {
  int T, E, k, H, I;
  DeviceBuffer<float> logits, weights;
  DeviceBuffer<uint16_t> x, gateUp, down, hidden, act, y, out;
  DeviceBuffer<int32_t> ids, off, rows;
  DeviceBuffer<unsigned char> scratch;
  Layer(int T_, int E_, int k_, int H_, int I_)
      : T(T_), E(E_), k(k_), H(H_), I(I_), logits(static_cast<size_t>(T_) * E_), weights(static_cast<size_t>(T_) * k_),
        x(static_cast<size_t>(T_) * H_), gateUp(static_cast<size_t>(E_) * 2 * I_ * H_),
        down(static_cast<size_t>(E_) * H_ * I_), hidden(static_cast<size_t>(T_) * k_ * H_),
        act(static_cast<size_t>(T_) * k_ * I_), y(static_cast<size_t>(T_) * k_ * H_), out(static_cast<size_t>(T_) * H_),
        ids(static_cast<size_t>(T_) * k_), off(E_ + 1), rows(static_cast<size_t>(T_) * k_),
        scratch(hsMoePermuteScratchBytes(T_, k_, E_)) {}
  /** Queues the layer on `s`. */
  void run(cudaStream_t s) const {
    const int P = T * k;
    HS_CHECK(hsMoeRoute(logits.ptr, nullptr, ids.ptr, weights.ptr, T, E, k, HS_MOE_SOFTMAX, 1, 1, 1, 1.0, s));
    HS_CHECK(hsMoePermute(x.ptr, ids.ptr, hidden.ptr, off.ptr, rows.ptr, scratch.ptr, scratch.bytes(), T,
                          static_cast<size_t>(H) * 2, k, E, s));
    HS_CHECK(hsMoeGroupedGemm(hidden.ptr, gateUp.ptr, act.ptr, off.ptr, P, E, 2 * I, H, 1, s));
    HS_CHECK(hsMoeGroupedGemm(act.ptr, down.ptr, y.ptr, off.ptr, P, E, H, I, 0, s));
    HS_CHECK(hsMoeUnpermute(y.ptr, rows.ptr, weights.ptr, nullptr, out.ptr, T, k, H, P, HS_DTYPE_BF16, s));
  }
};

// ---- benchmark (GPU) --------------------------------------------------------------------------

#ifndef HS_ATTN_HOST_EMU
inline float timeMs(cudaStream_t s, int reps, const std::function<void()>& f) {
  cudaEvent_t a, b;
  HS_CHECK(cudaEventCreate(&a));
  HS_CHECK(cudaEventCreate(&b));
  f();
  HS_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i) f();
  HS_CHECK(cudaEventRecord(b, s));
  HS_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  HS_CHECK(cudaEventElapsedTime(&ms, a, b));
  HS_CHECK(cudaEventDestroy(a));
  HS_CHECK(cudaEventDestroy(b));
  return ms / reps;
}

inline void bench() {
  const int E = 128, k = 8, H = 2048, I = 768;
  std::printf("== bench: Qwen3-30B-A3B MoE layer (E %d, k %d, H %d, I %d), bf16, per layer\n", E, k, H, I);
  std::printf("%6s %8s %9s %9s %9s %9s %9s %9s %8s %9s\n", "T", "experts", "route_us", "perm_us", "gateup_us",
              "down_us", "unperm_us", "layer_us", "GB/s", "TFLOP/s");
  for (int T : {1, 32, 128, 8192}) {
    Rng rng(16 + T);
    Layer L(T, E, k, H, I);
    std::vector<float> logits(L.logits.count);
    for (auto& v : logits) v = static_cast<float>(rng.normal());
    L.logits.upload(logits);
    L.x.upload(toBf16(randomBf16Values(rng, L.x.count, 1.0)));
    HS_CHECK(cudaMemset(L.gateUp.ptr, 0x3c, L.gateUp.bytes()));  // 0x3c3c: a small bf16 value
    HS_CHECK(cudaMemset(L.down.ptr, 0x3c, L.down.bytes()));
    cudaStream_t s;
    HS_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    L.run(s);
    HS_CHECK(cudaStreamSynchronize(s));
    const auto off = L.off.download();
    int active = 0;
    for (int e = 0; e < E; ++e) active += off[e + 1] > off[e] ? 1 : 0;
    const int P = T * k;
    const int reps = T >= 8192 ? 10 : 200;
    const float tRoute = timeMs(s, reps, [&] {
      HS_CHECK(hsMoeRoute(L.logits.ptr, nullptr, L.ids.ptr, L.weights.ptr, T, E, k, 0, 1, 1, 1, 1.0, s));
    });
    const float tPerm = timeMs(s, reps, [&] {
      HS_CHECK(hsMoePermute(L.x.ptr, L.ids.ptr, L.hidden.ptr, L.off.ptr, L.rows.ptr, L.scratch.ptr, L.scratch.bytes(),
                            T, static_cast<size_t>(H) * 2, k, E, s));
    });
    const float tGu = timeMs(s, reps, [&] {
      HS_CHECK(hsMoeGroupedGemm(L.hidden.ptr, L.gateUp.ptr, L.act.ptr, L.off.ptr, P, E, 2 * I, H, 1, s));
    });
    const float tDown = timeMs(s, reps, [&] {
      HS_CHECK(hsMoeGroupedGemm(L.act.ptr, L.down.ptr, L.y.ptr, L.off.ptr, P, E, H, I, 0, s));
    });
    const float tUn = timeMs(s, reps, [&] {
      HS_CHECK(hsMoeUnpermute(L.y.ptr, L.rows.ptr, L.weights.ptr, nullptr, L.out.ptr, T, k, H, P, HS_DTYPE_BF16, s));
    });
    // The whole layer as one graph (what a decode step replays).
    cudaGraph_t g;
    cudaGraphExec_t ge;
    HS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    L.run(s);
    HS_CHECK(cudaStreamEndCapture(s, &g));
    HS_CHECK(cudaGraphInstantiate(&ge, g, 0));
    const float tLayer = timeMs(s, reps, [&] { HS_CHECK(cudaGraphLaunch(ge, s)); });
    HS_CHECK(cudaGraphExecDestroy(ge));
    HS_CHECK(cudaGraphDestroy(g));
    const double weightBytes = static_cast<double>(active) * 3.0 * H * I * 2.0;
    const double flops = 2.0 * P * 3.0 * H * I;
    std::printf("%6d %8d %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.0f %9.1f\n", T, active, tRoute * 1e3, tPerm * 1e3,
                tGu * 1e3, tDown * 1e3, tUn * 1e3, tLayer * 1e3, weightBytes / ((tGu + tDown) * 1e-3) / 1e9,
                flops / ((tGu + tDown) * 1e-3) / 1e12);
    for (int config : {HS_MOE_GEMM_SMALL, HS_MOE_GEMM_MEDIUM, HS_MOE_GEMM_LARGE}) {
      const float a = timeMs(s, reps, [&] {
        HS_CHECK(hsMoeGroupedGemmWith(config, L.hidden.ptr, L.gateUp.ptr, L.act.ptr, L.off.ptr, P, E, 2 * I, H, 1, s));
      });
      const float b = timeMs(s, reps, [&] {
        HS_CHECK(hsMoeGroupedGemmWith(config, L.act.ptr, L.down.ptr, L.y.ptr, L.off.ptr, P, E, H, I, 0, s));
      });
      std::printf("       config %d%s: gate_up %8.2f us, down %8.2f us, %6.0f GB/s, %6.1f TFLOP/s\n", config,
                  config == hsMoeGemmAutoConfig(P, E) ? " (auto)" : "       ", a * 1e3, b * 1e3,
                  weightBytes / ((a + b) * 1e-3) / 1e9, flops / ((a + b) * 1e-3) / 1e12);
    }
    HS_CHECK(cudaStreamDestroy(s));
  }
}
#endif

}  // namespace hs_moe_test
