// One MoE layer on the device for native/tests/moe_decode_test.cu: host weights, the small-batch
// path (moe_decode.h) and the grouped path (moe.h) over the same buffers, and the --bench table.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/moe.h"
#include "../kernels/moe_decode.h"
#include "moe_ref.h"
#include "test_common.h"

namespace moe_decode_test {

using namespace hs_test;

/** One case: T tokens, E experts, top-k, hidden H, expert width I, shared expert width Is (0: none). */
struct Shape {
  const char* name;
  int T, E, k, H, I, Is;
  moe_ref::Rule rule;
  bool bias;
};

inline std::vector<uint16_t> toBf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = floatToBf16(v[i]);
  return r;
}
inline std::vector<float> toFloats(const std::vector<uint16_t>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16ToFloat(v[i]);
  return r;
}
/** Normal values of standard deviation `scale`, rounded to bf16 (as floats). */
inline std::vector<float> randomValues(Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = bf16ToFloat(floatToBf16(static_cast<float>(rng.normal() * scale)));
  return v;
}

/** Host values (bf16-representable floats) of a layer. */
struct HostLayer {
  std::vector<float> x, router, bias, gateUp, down, sGateUp, sDown;
  static HostLayer random(const Shape& c, Rng& rng) {
    HostLayer h;
    h.x = randomValues(rng, static_cast<size_t>(c.T) * c.H, 1.0);
    h.router = randomValues(rng, static_cast<size_t>(c.E) * c.H, 1.0 / std::sqrt(c.H));
    h.bias.resize(c.E);
    for (auto& b : h.bias) b = static_cast<float>(rng.normal() * 0.1);
    h.gateUp = randomValues(rng, static_cast<size_t>(c.E) * 2 * c.I * c.H, 1.0 / std::sqrt(c.H));
    h.down = randomValues(rng, static_cast<size_t>(c.E) * c.H * c.I, 1.0 / std::sqrt(c.I));
    h.sGateUp = randomValues(rng, static_cast<size_t>(2) * c.Is * c.H, 1.0 / std::sqrt(c.H));
    h.sDown = randomValues(rng, static_cast<size_t>(c.H) * c.Is, 1.0 / std::sqrt(c.Is > 0 ? c.Is : 1));
    return h;
  }
  /** The same weights with only token t's input row. */
  HostLayer tokenOnly(const Shape& c, int t) const {
    HostLayer h = *this;
    h.x.assign(x.begin() + static_cast<size_t>(t) * c.H, x.begin() + static_cast<size_t>(t + 1) * c.H);
    return h;
  }
};

/** Device state of one layer: both paths' buffers. */
struct DecodeLayer {
  Shape c;
  int S, Imax;
  DeviceBuffer<uint16_t> x, router, gateUp, down, sGateUp, sDown, act, out;
  DeviceBuffer<float> bias, logits, weights;
  DeviceBuffer<int32_t> ids, plan, sync;
  // Grouped path.
  DeviceBuffer<uint16_t> hidden, gAct, gY, gOut, sAct, sY;
  DeviceBuffer<int32_t> off, rows, sOff;
  explicit DecodeLayer(const Shape& s)
      : c(s), S(s.T * s.k), Imax(s.I > s.Is ? s.I : s.Is), x(static_cast<size_t>(s.T) * s.H),
        router(static_cast<size_t>(s.E) * s.H), gateUp(static_cast<size_t>(s.E) * 2 * s.I * s.H),
        down(static_cast<size_t>(s.E) * s.H * s.I), sGateUp(static_cast<size_t>(2) * s.Is * s.H),
        sDown(static_cast<size_t>(s.H) * s.Is), act(static_cast<size_t>(S + s.T) * Imax),
        out(static_cast<size_t>(s.T) * s.H), bias(s.E),
        logits(static_cast<size_t>(s.T) * s.E), weights(S), ids(S),
        plan(hsMoeDecodePlanInts(s.T, s.k, s.E)), sync(hsMoeDecodeSyncInts(s.H)),
        hidden(static_cast<size_t>(S) * s.H), gAct(static_cast<size_t>(S) * s.I), gY(static_cast<size_t>(S) * s.H),
        gOut(static_cast<size_t>(s.T) * s.H), sAct(static_cast<size_t>(s.T) * (s.Is > 0 ? s.Is : 1)),
        sY(static_cast<size_t>(s.T) * s.H), off(s.E + 1), rows(S), sOff(2) {
    sync.poison(0);
    act.poison();
    sOff.upload({0, s.T});
  }
  void upload(const HostLayer& h) {
    x.upload(toBf16(h.x));
    router.upload(toBf16(h.router));
    bias.upload(h.bias);
    gateUp.upload(toBf16(h.gateUp));
    down.upload(toBf16(h.down));
    if (c.Is > 0) {
      sGateUp.upload(toBf16(h.sGateUp));
      sDown.upload(toBf16(h.sDown));
    }
  }
  const void* sharedGateUp() const { return c.Is > 0 ? sGateUp.ptr : nullptr; }
  const void* sharedDown() const { return c.Is > 0 ? sDown.ptr : nullptr; }
  void route(cudaStream_t s) const {
    HS_CHECK(hsMoeDecodeRoute(x.ptr, router.ptr, c.bias ? bias.ptr : nullptr, logits.ptr, ids.ptr, weights.ptr,
                              plan.ptr, sync.ptr, c.T, c.H, c.E, c.k, c.rule.scoring, c.rule.renormalize,
                              c.rule.numGroups, c.rule.topkGroup, c.rule.scale, s));
  }
  void gateUpKernel(cudaStream_t s) const {
    HS_CHECK(hsMoeDecodeGateUp(x.ptr, gateUp.ptr, sharedGateUp(), plan.ptr, act.ptr, c.T, c.k, c.E, c.H, c.I, c.Is, s));
  }
  void downKernel(cudaStream_t s) const {
    HS_CHECK(hsMoeDecodeDown(act.ptr, down.ptr, sharedDown(), ids.ptr, weights.ptr, out.ptr, c.T, c.k, c.E, c.H, c.I,
                             c.Is, s));
  }
  /** The small-batch path: 3 launches. */
  void run(cudaStream_t s) const {
    route(s);
    gateUpKernel(s);
    downKernel(s);
  }
  /** The grouped path on the routing of the last run() (ids, weights): permute .. unpermute. */
  void runGroupedOnly(cudaStream_t s) const {
    HS_CHECK(hsMoePermute(x.ptr, ids.ptr, hidden.ptr, off.ptr, rows.ptr, nullptr, 0, c.T,
                          static_cast<size_t>(c.H) * 2, c.k, c.E, s));
    HS_CHECK(hsMoeGroupedGemm(hidden.ptr, gateUp.ptr, gAct.ptr, off.ptr, S, c.E, 2 * c.I, c.H, 1, s));
    HS_CHECK(hsMoeGroupedGemm(gAct.ptr, down.ptr, gY.ptr, off.ptr, S, c.E, c.H, c.I, 0, s));
    if (c.Is > 0) {  // the shared expert as a one-expert grouped GEMM pair
      HS_CHECK(hsMoeGroupedGemm(x.ptr, sGateUp.ptr, sAct.ptr, sOff.ptr, c.T, 1, 2 * c.Is, c.H, 1, s));
      HS_CHECK(hsMoeGroupedGemm(sAct.ptr, sDown.ptr, sY.ptr, sOff.ptr, c.T, 1, c.H, c.Is, 0, s));
    }
    HS_CHECK(hsMoeUnpermute(gY.ptr, rows.ptr, weights.ptr, c.Is > 0 ? sY.ptr : nullptr, gOut.ptr, c.T, c.k, c.H, S,
                            HS_DTYPE_BF16, s));
  }
  std::vector<uint16_t> runGrouped(cudaStream_t s) const {
    runGroupedOnly(s);
    HS_CHECK(cudaStreamSynchronize(s));
    return gOut.download();
  }
};

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

/** Time per replay of a graph of f's launches (what a decode step pays). */
inline float graphMs(cudaStream_t s, int reps, const std::function<void(cudaStream_t)>& f) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  HS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  f(s);
  HS_CHECK(cudaStreamEndCapture(s, &g));
  HS_CHECK(cudaGraphInstantiate(&ge, g, 0));
  const float ms = timeMs(s, reps, [&] { HS_CHECK(cudaGraphLaunch(ge, s)); });
  HS_CHECK(cudaGraphExecDestroy(ge));
  HS_CHECK(cudaGraphDestroy(g));
  return ms;
}

/**
 * Qwen3-30B-A3B's MoE layer at small T: the new path (router GEMV + route + plan, gate_up, down +
 * reduce) per kernel and as one graph, against the grouped path's graph (route, permute, gate_up,
 * down, unpermute; its router linear is a cuBLAS call outside this program, so the old column
 * leaves it out and the new one includes it). GB/s: the bytes the new path reads (router, gate_up
 * of the distinct experts, down of every slot) over the new graph's time; % of the 4.3 TB/s
 * measured on the H200.
 */
inline void bench() {
  std::printf("== bench: small-batch MoE path, Qwen3-30B-A3B layer (E 128, k 8, H 2048, I 768), bf16, us\n");
  std::printf("%4s %8s %9s %9s %9s %9s %12s %9s %8s %7s\n", "T", "experts", "route_us", "gateup_us", "down_us",
              "new_us", "grouped_us", "speedup", "GB/s", "%peak");
  for (int T : {1, 2, 4, 8, 16}) {
    const Shape c{"bench", T, 128, 8, 2048, 768, 0, moe_ref::Rule{0, 8, true, 1, 1, 1.0}, false};
    Rng rng(40 + T);
    DecodeLayer L(c);
    L.x.upload(toBf16(randomValues(rng, L.x.count, 1.0)));
    L.router.upload(toBf16(randomValues(rng, L.router.count, 0.05)));
    HS_CHECK(cudaMemset(L.gateUp.ptr, 0x3c, L.gateUp.bytes()));  // 0x3c3c: a small bf16 value
    HS_CHECK(cudaMemset(L.down.ptr, 0x3c, L.down.bytes()));
    cudaStream_t s;
    HS_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    L.run(s);
    HS_CHECK(cudaStreamSynchronize(s));
    const auto ids = L.ids.download();
    std::vector<int> hit(c.E, 0);
    for (int e : ids) hit[e] = 1;
    int active = 0;
    for (int v : hit) active += v;
    const int reps = 300;
    const float tRoute = timeMs(s, reps, [&] { L.route(s); });
    const float tGu = timeMs(s, reps, [&] { L.gateUpKernel(s); });
    const float tDown = timeMs(s, reps, [&] { L.downKernel(s); });
    const float tNew = graphMs(s, reps, [&](cudaStream_t st) { L.run(st); });
    const float tOld = graphMs(s, reps, [&](cudaStream_t st) {
      HS_CHECK(hsMoeRoute(L.logits.ptr, nullptr, L.ids.ptr, L.weights.ptr, T, c.E, c.k, 0, 1, 1, 1, 1.0, st));
      L.runGroupedOnly(st);
    });
    // gate_up reads each distinct expert once, down each slot's expert once per token.
    const double bytes = (static_cast<double>(active) * 2.0 * c.H * c.I + static_cast<double>(T) * c.k * c.H * c.I +
                          static_cast<double>(c.E) * c.H) *
                         2.0;
    const double gbs = bytes / (tNew * 1e-3) / 1e9;
    std::printf("%4d %8d %9.2f %9.2f %9.2f %9.2f %12.2f %8.2fx %8.0f %6.1f%%\n", T, active, tRoute * 1e3, tGu * 1e3,
                tDown * 1e3, tNew * 1e3, tOld * 1e3, tOld / tNew, gbs, gbs / 4300.0 * 100);
    HS_CHECK(cudaStreamDestroy(s));
  }
}
#endif

}  // namespace moe_decode_test
