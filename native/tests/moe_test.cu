// Standalone test of the MoE kernels (native/kernels/moe.h) against the C++ ports of the CPU
// oracle in moe_ref.h. Usage: moe_test [--quick] [--only route|permute|gemm|unpermute|layer] [--bench]
// - route: ids identical to the oracle's; weights identical, or (counted, reported) within 1 f32
//   ulp where the float64 softmax denominator's summation order differs (moe_route.cu);
// - permute (both paths), unpermute: bit-exact;
// - grouped GEMM: every tile config against a float64 reference (bf16 tolerance), the configs
//   bitwise equal to each other, the fused silu_and_mul bitwise equal to GEMM + hsSiluAndMul,
//   rows outside every segment left untouched;
// - a whole MoE layer (route -> permute -> gate_up+silu -> down -> unpermute) captured in a CUDA
//   graph and replayed on new logits equals the eager run.
// --bench (GPU only): Qwen3-30B-A3B's MoE layer shapes (E 128, k 8, H 2048, I 768) at T = 1, 32,
// 128, 8192: time per kernel and the weight bandwidth of the distinct experts the routing used.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/moe.h"
#include "moe_ref.h"
#include "moe_test_layer.h"
#include "test_common.h"

using namespace hs_test;
using namespace hs_moe_test;

namespace {

Tally tally;

// ---- route ------------------------------------------------------------------------------------

struct RouteCase {
  const char* name;
  int T, E;
  moe_ref::Rule rule;
  bool bias;
  int valueLevels;  // > 0: logits drawn from this many distinct values (ties)
  bool nanRow;      // row 0 all NaN
};

void testRoute(const RouteCase& c, Rng& rng) {
  const int T = c.T, E = c.E, k = c.rule.topK;
  std::vector<float> logits(static_cast<size_t>(T) * E), bias(E);
  for (auto& x : logits)
    x = c.valueLevels > 0 ? static_cast<float>(rng.below(c.valueLevels)) * 0.25f : static_cast<float>(rng.normal() * 2);
  for (auto& b : bias) b = c.valueLevels > 0 ? 0.f : static_cast<float>(rng.normal() * 0.1);
  if (c.nanRow)
    for (int e = 0; e < E; ++e) logits[e] = std::nanf("");
  DeviceBuffer<float> dLogits(logits.size()), dBias(E), dW(static_cast<size_t>(T) * k);
  DeviceBuffer<int32_t> dIds(static_cast<size_t>(T) * k);
  dLogits.upload(logits);
  dBias.upload(bias);
  dIds.poison();
  dW.poison();
  HS_CHECK(hsMoeRoute(dLogits.ptr, c.bias ? dBias.ptr : nullptr, dIds.ptr, dW.ptr, T, E, k, c.rule.scoring,
                      c.rule.renormalize, c.rule.numGroups, c.rule.topkGroup, c.rule.scale, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto ids = dIds.download();
  const auto w = dW.download();
  int idMismatch = 0, wExact = 0, wUlp = 0, wBad = 0;
  std::vector<int32_t> rid(k);
  std::vector<float> rw(k);
  for (int t = 0; t < T; ++t) {
    moe_ref::routeRow(&logits[static_cast<size_t>(t) * E], c.bias ? bias.data() : nullptr, E, c.rule, rid.data(),
                      rw.data());
    for (int j = 0; j < k; ++j) {
      const size_t o = static_cast<size_t>(t) * k + j;
      if (ids[o] != rid[j]) ++idMismatch;
      const long long d = ulpDistance(w[o], rw[j]);
      if (d == 0)
        ++wExact;
      else if (d <= 1)
        ++wUlp;
      else
        ++wBad;
    }
  }
  if (idMismatch + wBad > 0 || wUlp > 0)
    std::printf("  route %s: %d id mismatches, weights %d exact / %d within 1 ulp / %d off\n", c.name, idMismatch,
                wExact, wUlp, wBad);
  tally.record(idMismatch == 0 && wBad == 0, (std::string("route ") + c.name).c_str());
}

void routeTests(bool quick) {
  Rng rng(11);
  using R = moe_ref::Rule;
  const int n = quick ? 12 : 1;  // quick: fewer tokens per case (the emulator runs a thread per CUDA thread)
  const RouteCase cases[] = {
      {"softmax E8 k2 renorm (tiny qwen3-moe)", quick ? n : 37, 8, R{0, 2, true, 1, 1, 1.0}, false, 0, false},
      {"softmax E128 k8 renorm (qwen3-30b-a3b)", quick ? n : 300, 128, R{0, 8, true, 1, 1, 1.0}, false, 0, false},
      {"softmax E128 k8 no renorm", quick ? n : 33, 128, R{0, 8, false, 1, 1, 1.0}, false, 0, false},
      {"softmax E60 k4 ties", quick ? n : 50, 60, R{0, 4, false, 1, 1, 1.0}, false, 3, false},
      {"sigmoid+bias E8 k2 (tiny glm4-moe)", quick ? n : 37, 8, R{1, 2, true, 1, 1, 1.0}, true, 0, false},
      {"sigmoid+bias E160 k8 scale 2.5 (glm-4.5)", quick ? n : 45, 160, R{1, 8, true, 1, 1, 2.5}, true, 0, false},
      {"noaux_tc E256 G8/4 k8 scale 2.5 (deepseek-v3)", quick ? n : 200, 256, R{1, 8, true, 8, 4, 2.5}, true, 0,
       false},
      {"noaux_tc groups with ties", quick ? 2 * n : 64, 64, R{1, 6, true, 8, 3, 1.0 / 3.0}, true, 2, false},
      {"E512 k32 sigmoid", quick ? 4 : 9, 512, R{1, 32, true, 16, 16, 1.0}, true, 0, false},
      {"NaN row -> lowest ids", 5, 16, R{0, 4, true, 1, 1, 1.0}, false, 0, true},
  };
  for (const auto& c : cases) testRoute(c, rng);
}

// ---- permute ----------------------------------------------------------------------------------

void testPermute(const char* name, int T, int k, int E, int H, bool distinct, bool invalid, Rng& rng) {
  const int S = T * k;
  std::vector<int32_t> ids(S);
  for (int t = 0; t < T; ++t) {
    if (distinct) {  // route's output: k distinct ids, ascending
      std::vector<int> all(E);
      std::iota(all.begin(), all.end(), 0);
      for (int j = 0; j < k; ++j) std::swap(all[j], all[j + rng.below(E - j)]);
      std::sort(all.begin(), all.begin() + k);
      for (int j = 0; j < k; ++j) ids[t * k + j] = all[j];
    } else {
      for (int j = 0; j < k; ++j) ids[t * k + j] = rng.below(E);
    }
  }
  if (invalid && S > 3) {
    ids[1] = -1;
    ids[S - 2] = E;
  }
  std::vector<uint16_t> x(static_cast<size_t>(T) * H);
  for (auto& v : x) v = randomBf16(rng, 0.1, 2.0);
  DeviceBuffer<uint16_t> dx(x.size()), dHidden(static_cast<size_t>(S) * H);
  DeviceBuffer<int32_t> dIds(S), dOff(E + 1), dRows(S);
  const size_t scratchBytes = hsMoePermuteScratchBytes(T, k, E);
  DeviceBuffer<unsigned char> dScratch(scratchBytes);
  dx.upload(x);
  dIds.upload(ids);
  dHidden.poison();
  dOff.poison();
  dRows.poison();
  HS_CHECK(hsMoePermute(dx.ptr, dIds.ptr, dHidden.ptr, dOff.ptr, dRows.ptr, dScratch.ptr, scratchBytes, T,
                        static_cast<size_t>(H) * 2, k, E, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> rOff, rRows;
  moe_ref::permute(ids, T, k, E, rOff, rRows);
  const auto off = dOff.download();
  const auto rows = dRows.download();
  const auto hidden = dHidden.download();
  bool ok = off == rOff && rows == rRows;
  for (int i = 0; i < S && ok; ++i) {
    if (rows[i] < 0) continue;
    const int t = i / k;
    ok = std::memcmp(&hidden[static_cast<size_t>(rows[i]) * H], &x[static_cast<size_t>(t) * H], H * 2) == 0;
  }
  tally.record(ok, (std::string("permute ") + name).c_str());
}

void permuteTests(bool quick) {
  Rng rng(12);
  testPermute("T1 k8 E128 (decode, batch 1)", 1, 8, 128, 64, true, false, rng);
  testPermute("T7 k2 E8 H128", 7, 2, 8, 128, true, false, rng);
  testPermute("T32 k8 E128", 32, 8, 128, 32, true, false, rng);
  testPermute("T300 k2 E8 repeats + invalid ids", quick ? 100 : 300, 2, 8, 16, false, true, rng);
  testPermute("T77 k3 E5 H6 (4-byte rows)", 77, 3, 5, 6, false, false, rng);
  if (!quick) testPermute("T512 k8 E128 (largest single-kernel)", 512, 8, 128, 8, true, false, rng);
  testPermute("T1100 k8 E128 (three kernels)", quick ? 520 : 1100, 8, 128, 8, true, false, rng);
  testPermute("T3000 k2 E8 three kernels + invalid", 3000, 2, 8, 8, false, true, rng);
  if (!quick) testPermute("T2100 k4 E512 three kernels", 2100, 4, 512, 8, false, false, rng);
}

// ---- grouped GEMM -----------------------------------------------------------------------------

/** Random segmentation of `used` rows into E segments (some empty), offsets[E] = used <= P. */
std::vector<int32_t> randomOffsets(Rng& rng, int E, int used, double emptyFrac) {
  std::vector<double> wts(E);
  for (auto& v : wts) v = rng.uniform() < emptyFrac ? 0.0 : rng.uniform(0.2, 1.0);
  double total = std::accumulate(wts.begin(), wts.end(), 0.0);
  if (total == 0) {
    wts[0] = 1;
    total = 1;
  }
  std::vector<int32_t> off(E + 1, 0);
  double acc = 0;
  for (int e = 0; e < E; ++e) {
    acc += wts[e];
    off[e + 1] = static_cast<int32_t>(std::lround(acc / total * used));
  }
  off[E] = used;
  return off;
}

/** Runs one config; returns the output bits. */
std::vector<uint16_t> runGemm(int config, const DeviceBuffer<uint16_t>& dx, const DeviceBuffer<uint16_t>& dw,
                              const DeviceBuffer<int32_t>& dOff, int P, int E, int N, int K, bool silu) {
  DeviceBuffer<uint16_t> dOut(static_cast<size_t>(P) * (silu ? N / 2 : N));
  dOut.poison();
  HS_CHECK(hsMoeGroupedGemmWith(config, dx.ptr, dw.ptr, dOut.ptr, dOff.ptr, P, E, N, K, silu ? 1 : 0, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  return dOut.download();
}

void testGemm(const char* name, int P, int used, int E, int N, int K, double emptyFrac, Rng& rng) {
  const auto x = randomBf16Values(rng, static_cast<size_t>(P) * K, 1.0);
  const auto w = randomBf16Values(rng, static_cast<size_t>(E) * N * K, 1.0 / std::sqrt(K));
  const auto off = randomOffsets(rng, E, used, emptyFrac);
  DeviceBuffer<uint16_t> dx(x.size()), dw(w.size());
  DeviceBuffer<int32_t> dOff(E + 1);
  dx.upload(toBf16(x));
  dw.upload(toBf16(w));
  dOff.upload(off);
  std::vector<double> ref(static_cast<size_t>(P) * N, 0.0);
  moe_ref::groupedGemm(x, w, off, E, N, K, ref);
  std::vector<uint16_t> first;
  bool same = true, close = true, untouched = true;
  double worst = 0;
  for (int config : {HS_MOE_GEMM_SMALL, HS_MOE_GEMM_MEDIUM, HS_MOE_GEMM_LARGE}) {
    const auto out = runGemm(config, dx, dw, dOff, P, E, N, K, false);
    if (first.empty()) first = out;
    same = same && out == first;
    for (int r = 0; r < P; ++r) {
      const bool inSeg = r < off[E];
      for (int n = 0; n < N; ++n) {
        const size_t i = static_cast<size_t>(r) * N + n;
        if (!inSeg) {
          untouched = untouched && out[i] == kBf16NaN;
          continue;
        }
        const double got = bf16ToFloat(out[i]);
        const double err = std::fabs(got - ref[i]);
        // bf16 output rounding (2^-8 relative) plus fp32 accumulation noise.
        const double tol = std::fabs(ref[i]) * (1.0 / 256) + 1e-3;
        worst = std::max(worst, err / tol);
        close = close && err <= tol;
      }
    }
  }
  // Fused gate_up + silu_and_mul == GEMM then hsSiluAndMul, bit for bit.
  bool fused = true;
  if (N % 16 == 0) {
    DeviceBuffer<uint16_t> dFull(static_cast<size_t>(P) * N), dAct(static_cast<size_t>(P) * N / 2);
    HS_CHECK(hsMoeGroupedGemm(dx.ptr, dw.ptr, dFull.ptr, dOff.ptr, P, E, N, K, 0, nullptr));
    dAct.poison();
    HS_CHECK(hsSiluAndMul(dAct.ptr, dFull.ptr, off[E], N / 2, HS_DTYPE_BF16, nullptr));
    HS_CHECK(cudaDeviceSynchronize());
    const auto act = dAct.download();
    for (int config : {HS_MOE_GEMM_SMALL, HS_MOE_GEMM_MEDIUM, HS_MOE_GEMM_LARGE}) {
      const auto out = runGemm(config, dx, dw, dOff, P, E, N, K, true);
      for (int r = 0; r < P; ++r)
        for (int n = 0; n < N / 2; ++n) {
          const size_t i = static_cast<size_t>(r) * (N / 2) + n;
          fused = fused && (r < off[E] ? out[i] == act[i] : out[i] == kBf16NaN);
        }
    }
  }
  if (!(same && close && untouched && fused))
    std::printf("  gemm %s: configs equal %d, within tolerance %d (worst %.2f of tol), padding untouched %d, fused %d\n",
                name, same, close, worst, untouched, fused);
  tally.record(same && close && untouched && fused, (std::string("grouped gemm ") + name).c_str());
}

void gemmTests(bool quick) {
  Rng rng(13);
  testGemm("decode P8 E128 N64 K128", 8, 8, 128, 64, 128, 0.95, rng);
  if (!quick) testGemm("P14 E8 N128 K128 (tiny, T7 k2)", 14, 14, 8, 128, 128, 0.0, rng);
  testGemm("P40 used 33 E4 N48 K72 (ragged N and K)", 40, 33, 4, 48, 72, 0.0, rng);
  if (!quick) testGemm("P40 E4 N40 K64 (N not a multiple of 16: no fused)", 40, 40, 4, 40, 64, 0.0, rng);
  if (!quick) testGemm("P300 E8 N96 K64", 300, 300, 8, 96, 64, 0.1, rng);
  if (!quick) testGemm("P600 E8 N128 K256 (medium/large)", 600, 600, 8, 128, 256, 0.0, rng);
  testGemm("P130 E3 N32 K200 empty experts", 130, 110, 3, 32, 200, 0.4, rng);
}

// ---- unpermute --------------------------------------------------------------------------------

void testUnpermute(const char* name, int T, int k, int E, int H, bool withShared, Rng& rng) {
  const int P = T * k;
  std::vector<int32_t> ids(P);
  for (auto& e : ids) e = rng.below(E);
  if (P > 2) ids[1] = -1;  // an invalid slot: row -1, adds nothing
  std::vector<int32_t> off, rows;
  moe_ref::permute(ids, T, k, E, off, rows);
  const auto y = randomBf16Values(rng, static_cast<size_t>(P) * H, 1.0);
  const auto shared = randomBf16Values(rng, static_cast<size_t>(T) * H, 1.0);
  std::vector<float> w(P);
  for (auto& v : w) v = static_cast<float>(rng.uniform(0.0, 1.0));
  DeviceBuffer<uint16_t> dy(y.size()), dShared(shared.size()), dOut(static_cast<size_t>(T) * H);
  DeviceBuffer<int32_t> dRows(P);
  DeviceBuffer<float> dW(P);
  dy.upload(toBf16(y));
  dShared.upload(toBf16(shared));
  dRows.upload(rows);
  dW.upload(w);
  dOut.poison();
  HS_CHECK(hsMoeUnpermute(dy.ptr, dRows.ptr, dW.ptr, withShared ? dShared.ptr : nullptr, dOut.ptr, T, k, H, P,
                          HS_DTYPE_BF16, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  std::vector<float> ref;
  moe_ref::unpermute(y, P, H, rows, w, T, k, withShared ? shared.data() : nullptr, ref);
  const auto out = dOut.download();
  bool ok = true;
  for (size_t i = 0; i < out.size(); ++i) ok = ok && out[i] == floatToBf16(ref[i]);
  tally.record(ok, (std::string("unpermute ") + name).c_str());
}

void unpermuteTests(bool quick) {
  Rng rng(14);
  testUnpermute("T1 k8 H2048", 1, 8, 128, 2048, false, rng);
  testUnpermute("T37 k2 H128 + shared", quick ? 9 : 37, 2, 8, 128, true, rng);
  testUnpermute("T5 k3 H13 (scalar path) + shared", 5, 3, 4, 13, true, rng);
}

// ---- a whole layer, eager and graph -------------------------------------------------------------

void testLayerGraph() {
  Rng rng(15);
  Layer L(9, 8, 2, 64, 32);
  L.x.upload(toBf16(randomBf16Values(rng, L.x.count, 1.0)));
  L.gateUp.upload(toBf16(randomBf16Values(rng, L.gateUp.count, 0.125)));
  L.down.upload(toBf16(randomBf16Values(rng, L.down.count, 0.18)));
  cudaStream_t s;
  HS_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  HS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  L.run(s);
  HS_CHECK(cudaStreamEndCapture(s, &g));
  HS_CHECK(cudaGraphInstantiate(&ge, g, 0));
  bool ok = true;
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<float> logits(L.logits.count);
    for (auto& v : logits) v = static_cast<float>(rng.normal());
    L.logits.upload(logits);
    L.out.poison();
    HS_CHECK(cudaGraphLaunch(ge, s));
    HS_CHECK(cudaStreamSynchronize(s));
    const auto viaGraph = L.out.download();
    L.out.poison();
    L.run(s);
    HS_CHECK(cudaStreamSynchronize(s));
    ok = ok && viaGraph == L.out.download();
  }
  HS_CHECK(cudaGraphExecDestroy(ge));
  HS_CHECK(cudaGraphDestroy(g));
  HS_CHECK(cudaStreamDestroy(s));
  tally.record(ok, "layer: graph replay == eager");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  const char* only = flagValue(argc, argv, "--only");
  auto section = [&](const char* name, const std::function<void()>& f) {
    if (only != nullptr && std::strcmp(only, name) != 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  %s: %.1f s\n", name, s);
  };
  section("route", [&] { routeTests(quick); });
  section("permute", [&] { permuteTests(quick); });
  section("gemm", [&] { gemmTests(quick); });
  section("unpermute", [&] { unpermuteTests(quick); });
  section("layer", [&] { testLayerGraph(); });
  const int rc = tally.finish("moe_test");
#ifndef HS_ATTN_HOST_EMU
  if (hasFlag(argc, argv, "--bench")) bench();
#endif
  return rc;
}
