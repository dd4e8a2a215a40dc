// Standalone test of hsDenseGemv (native/kernels/gemv.cu) against a float64 CPU reference:
// 1. y = x @ w^T (+ bias) for M in 1..16 (every template size and the rows it skips), N not a
//    multiple of the CTA's columns, K with a tail chunk, bf16 / f32 outputs, f32 / bf16 biases;
// 2. determinism and batch invariance: two runs are equal bit for bit, and row m of an M-row run
//    equals the 1-row run of x[m] bit for bit (the sum order depends on K only);
// 3. the fused silu_and_mul epilogue equals hsSiluAndMul (activation.cu) on the plain output,
//    bit for bit;
// 4. hsDenseGemvRope equals hsRotaryEmbedding (rope.cu) on the plain output, bit for bit (a padded
//    row with position -1 stays unrotated; the v heads are not rotated);
// 5. invalid sizes are refused with cudaErrorInvalidValue;
// 6. a chain of dependent launches on one stream (skinny GEMM -> fused add + RMSNorm -> skinny
//    GEMM ..., each reading what the previous wrote) gives the same bits with programmatic
//    dependent launch (HS_LAUNCH_PDL, pdl.cuh) as fully serialized, eager and in a CUDA graph.
// Runs on the GPU (scripts/gpu/dense_b1_bench.sh builds it with nvcc) or on the CPU:
//   bash native/tests/emu/run_emu.sh gemv --quick
// Usage: gemv_test [--quick]
#include <cmath>
#include <cstdio>
#include <vector>

#include "../kernels/gemv.h"
#include "../kernels/kernels.h"
#include "test_common.h"

using hs_test::bf16ToFloat;
using hs_test::DeviceBuffer;
using hs_test::floatToBf16;

namespace {

hs_test::Tally tally;

struct Case {
  int m, n, k;
  bool bias;
  bool f32Out;
};

/** Device copies of one case's random inputs (bf16 x [m, k], w [n, k], f32 bias [n]). */
struct Inputs {
  std::vector<uint16_t> x, w;
  std::vector<float> bias;
  DeviceBuffer<uint16_t> dx, dw;
  DeviceBuffer<float> db;
  Inputs(const Case& c, hs_test::Rng& rng)
      : x(size_t(c.m) * c.k), w(size_t(c.n) * c.k), bias(c.n), dx(x.size()), dw(w.size()), db(c.n) {
    for (auto& v : x) v = hs_test::randomBf16(rng, 0.0, 1.0);
    for (auto& v : w) v = hs_test::randomBf16(rng, 0.0, 1.0 / std::sqrt(double(c.k)));
    for (auto& v : bias) v = static_cast<float>(rng.uniform(-0.5, 0.5));
    dx.upload(x);
    dw.upload(w);
    db.upload(bias);
  }
};

/** Runs the plain epilogue; returns y as floats [m, n]. */
std::vector<float> runPlain(const Case& c, Inputs& in, const uint16_t* x, int m) {
  const size_t count = size_t(m) * c.n;
  std::vector<float> out(count);
  const void* bias = c.bias ? in.db.ptr : nullptr;
  if (c.f32Out) {
    DeviceBuffer<float> y(count);
    y.poison();
    HS_CHECK(hsDenseGemv(y.ptr, x, in.dw.ptr, bias, m, c.n, c.k, HS_DTYPE_BF16, HS_DTYPE_F32, HS_DTYPE_F32,
                         HS_GEMV_PLAIN, nullptr));
    HS_CHECK(cudaDeviceSynchronize());
    out = y.download();
  } else {
    DeviceBuffer<uint16_t> y(count);
    y.poison();
    HS_CHECK(hsDenseGemv(y.ptr, x, in.dw.ptr, bias, m, c.n, c.k, HS_DTYPE_BF16, HS_DTYPE_BF16, HS_DTYPE_F32,
                         HS_GEMV_PLAIN, nullptr));
    HS_CHECK(cudaDeviceSynchronize());
    const auto h = y.download();
    for (size_t i = 0; i < count; ++i) out[i] = bf16ToFloat(h[i]);
  }
  return out;
}

/** |got - ref| within fp32 accumulation error (K * 2^-24 of the sum of |products|) plus bf16 rounding. */
bool close(const Case& c, const Inputs& in, const std::vector<float>& got) {
  for (int m = 0; m < c.m; ++m)
    for (int n = 0; n < c.n; ++n) {
      double ref = c.bias ? in.bias[n] : 0.0;
      double mag = std::fabs(ref);
      for (int k = 0; k < c.k; ++k) {
        const double p = double(bf16ToFloat(in.x[size_t(m) * c.k + k])) * bf16ToFloat(in.w[size_t(n) * c.k + k]);
        ref += p;
        mag += std::fabs(p);
      }
      const double g = got[size_t(m) * c.n + n];
      const double tol = mag * c.k * 6e-8 + (c.f32Out ? 0.0 : std::fabs(ref) * (1.0 / 256));
      if (!(std::fabs(g - ref) <= tol)) {
        std::printf("  m=%d n=%d: got %.8g, reference %.8g (tolerance %.3g)\n", m, n, g, ref, tol);
        return false;
      }
    }
  return true;
}

void checkCase(const Case& c, hs_test::Rng& rng) {
  char name[160];
  std::snprintf(name, sizeof(name), "gemv M=%d N=%d K=%d bias=%d out=%s", c.m, c.n, c.k, c.bias ? 1 : 0,
                c.f32Out ? "f32" : "bf16");
  Inputs in(c, rng);
  const auto y = runPlain(c, in, in.dx.ptr, c.m);
  bool ok = close(c, in, y);
  const auto again = runPlain(c, in, in.dx.ptr, c.m);
  const bool same = std::memcmp(y.data(), again.data(), y.size() * sizeof(float)) == 0;
  bool invariant = true;
  for (int m = 0; m < c.m && invariant; ++m) {  // row m alone, as a batch of one
    const auto one = runPlain(c, in, in.dx.ptr + size_t(m) * c.k, 1);
    invariant = std::memcmp(one.data(), y.data() + size_t(m) * c.n, c.n * sizeof(float)) == 0;
  }
  std::printf("%s %s%s%s\n", ok && same && invariant ? "ok  " : "FAIL", name, same ? "" : " (runs differ)",
              invariant ? "" : " (row differs from its 1-row run)");
  tally.record(ok && same && invariant, name);
}

/** Fused silu_and_mul (gate rows [0, n/2), up rows [n/2, n)) = hsSiluAndMul(plain output), bit for bit. */
void checkSilu(int m, int n, int k, bool bias, hs_test::Rng& rng) {
  char name[160];
  std::snprintf(name, sizeof(name), "gemv silu_and_mul M=%d N=%d K=%d bias=%d", m, n, k, bias ? 1 : 0);
  const Case c{m, n, k, bias, false};
  Inputs in(c, rng);
  const int inter = n / 2;
  DeviceBuffer<uint16_t> plain(size_t(m) * n), ref(size_t(m) * inter), fused(size_t(m) * inter);
  fused.poison();
  const void* b = bias ? in.db.ptr : nullptr;
  HS_CHECK(hsDenseGemv(plain.ptr, in.dx.ptr, in.dw.ptr, b, m, n, k, HS_DTYPE_BF16, HS_DTYPE_BF16, HS_DTYPE_F32,
                       HS_GEMV_PLAIN, nullptr));
  HS_CHECK(hsSiluAndMul(ref.ptr, plain.ptr, m, inter, HS_DTYPE_BF16, nullptr));
  HS_CHECK(hsDenseGemv(fused.ptr, in.dx.ptr, in.dw.ptr, b, m, n, k, HS_DTYPE_BF16, HS_DTYPE_BF16, HS_DTYPE_F32,
                       HS_GEMV_SILU_AND_MUL, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto r = ref.download();
  const auto f = fused.download();
  int bad = 0;
  for (size_t i = 0; i < r.size(); ++i) bad += r[i] != f[i];
  if (bad > 0) std::printf("  %d of %zu values differ\n", bad, r.size());
  std::printf("%s %s\n", bad == 0 ? "ok  " : "FAIL", name);
  tally.record(bad == 0, name);
}

/** Fused q/k/v + RoPE = hsRotaryEmbedding(plain output), bit for bit. heads = q + k + v heads. */
void checkRope(int m, int qHeads, int kvHeads, int headDim, int k, bool bias, hs_test::Rng& rng) {
  char name[160];
  std::snprintf(name, sizeof(name), "gemv rope M=%d heads=%d+2x%d D=%d K=%d bias=%d", m, qHeads, kvHeads, headDim, k,
                bias ? 1 : 0);
  const int n = (qHeads + 2 * kvHeads) * headDim;
  const int rotHeads = qHeads + kvHeads;
  const int maxPos = 64;
  const Case c{m, n, k, bias, false};
  Inputs in(c, rng);
  std::vector<float> cosSin(size_t(maxPos) * headDim);
  for (int p = 0; p < maxPos; ++p)
    for (int i = 0; i < headDim / 2; ++i) {
      const double ang = p * std::pow(10000.0, -2.0 * i / headDim);
      cosSin[size_t(p) * headDim + i] = static_cast<float>(std::cos(ang));
      cosSin[size_t(p) * headDim + headDim / 2 + i] = static_cast<float>(std::sin(ang));
    }
  std::vector<int32_t> pos(m);
  for (int i = 0; i < m; ++i) pos[i] = i == 1 ? -1 : (7 * i + 3) % maxPos;  // row 1: a padded row
  DeviceBuffer<float> dcs(cosSin.size());
  DeviceBuffer<int32_t> dpos(m);
  dcs.upload(cosSin);
  dpos.upload(pos);
  DeviceBuffer<uint16_t> ref(size_t(m) * n), fused(size_t(m) * n);
  fused.poison();
  const void* b = bias ? in.db.ptr : nullptr;
  HS_CHECK(hsDenseGemv(ref.ptr, in.dx.ptr, in.dw.ptr, b, m, n, k, HS_DTYPE_BF16, HS_DTYPE_BF16, HS_DTYPE_F32,
                       HS_GEMV_PLAIN, nullptr));
  HS_CHECK(hsRotaryEmbedding(ref.ptr, dpos.ptr, dcs.ptr, m, n, rotHeads, headDim, headDim, maxPos, HS_DTYPE_BF16,
                             nullptr));
  HS_CHECK(hsDenseGemvRope(fused.ptr, in.dx.ptr, in.dw.ptr, b, dpos.ptr, dcs.ptr, m, n, k, headDim, rotHeads, maxPos,
                           HS_DTYPE_BF16, HS_DTYPE_F32, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto r = ref.download();
  const auto f = fused.download();
  int bad = 0;
  for (size_t i = 0; i < r.size(); ++i) bad += r[i] != f[i];
  if (bad > 0) std::printf("  %d of %zu values differ\n", bad, r.size());
  std::printf("%s %s\n", bad == 0 ? "ok  " : "FAIL", name);
  tally.record(bad == 0, name);
}

void checkRefusals() {
  DeviceBuffer<uint16_t> buf(4096);
  const bool ok = hsDenseGemv(buf.ptr, buf.ptr, buf.ptr, nullptr, HS_GEMV_MAX_TOKENS + 1, 8, 64, HS_DTYPE_BF16,
                              HS_DTYPE_BF16, 0, HS_GEMV_PLAIN, nullptr) == cudaErrorInvalidValue &&
                  hsDenseGemv(buf.ptr, buf.ptr, buf.ptr, nullptr, 1, 8, 60, HS_DTYPE_BF16, HS_DTYPE_BF16, 0,
                              HS_GEMV_PLAIN, nullptr) == cudaErrorInvalidValue &&
                  hsDenseGemv(buf.ptr, buf.ptr + 1, buf.ptr, nullptr, 1, 8, 64, HS_DTYPE_BF16, HS_DTYPE_BF16, 0,
                              HS_GEMV_PLAIN, nullptr) == cudaErrorInvalidValue &&
                  hsDenseGemv(buf.ptr, buf.ptr, buf.ptr, nullptr, 1, 7, 64, HS_DTYPE_BF16, HS_DTYPE_BF16, 0,
                              HS_GEMV_SILU_AND_MUL, nullptr) == cudaErrorInvalidValue &&
                  hsDenseGemv(buf.ptr, buf.ptr, buf.ptr, nullptr, 1, 8, 64, HS_DTYPE_BF16, HS_DTYPE_F32, 0,
                              HS_GEMV_SILU_AND_MUL, nullptr) == cudaErrorInvalidValue;
  std::printf("%s gemv refuses M > %d, K %% 8 != 0, unaligned x, odd N or f32 output for silu_and_mul\n",
              ok ? "ok  " : "FAIL", HS_GEMV_MAX_TOKENS);
  tally.record(ok, "gemv refusals");
}

/** Runs `rounds` of y = gemv(h); fusedAddRmsNorm(y, res) ; h = y on `stream`; returns h's bits. */
std::vector<uint16_t> runChain(int options, bool graph, int rounds, int n, const DeviceBuffer<uint16_t>& w,
                               const DeviceBuffer<uint16_t>& normW, const std::vector<uint16_t>& h0) {
  const int previous = hsSetKernelLaunchOptions(options);
  cudaStream_t stream = nullptr;
  HS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<uint16_t> h(h0.size()), y(h0.size()), res(h0.size());
  h.upload(h0);
  res.upload(h0);
  const auto enqueue = [&] {
    for (int r = 0; r < rounds; ++r) {
      HS_CHECK(hsDenseGemv(y.ptr, h.ptr, w.ptr, nullptr, 1, n, n, HS_DTYPE_BF16, HS_DTYPE_BF16, HS_DTYPE_F32,
                           HS_GEMV_PLAIN, stream));
      HS_CHECK(hsFusedAddRmsNorm(y.ptr, res.ptr, normW.ptr, 1, n, 1e-5f, HS_DTYPE_BF16, HS_DTYPE_BF16, stream));
      HS_CHECK(hsDenseGemv(h.ptr, y.ptr, w.ptr, nullptr, 1, n, n, HS_DTYPE_BF16, HS_DTYPE_BF16, HS_DTYPE_F32,
                           HS_GEMV_PLAIN, stream));
      HS_CHECK(hsRmsNorm(h.ptr, h.ptr, normW.ptr, 1, n, 1e-5f, HS_DTYPE_BF16, HS_DTYPE_BF16, stream));
    }
  };
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    HS_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    HS_CHECK(cudaStreamEndCapture(stream, &g));
    HS_CHECK(cudaGraphInstantiate(&exec, g, 0));
    HS_CHECK(cudaGraphLaunch(exec, stream));
    HS_CHECK(cudaStreamSynchronize(stream));
    HS_CHECK(cudaGraphExecDestroy(exec));
    HS_CHECK(cudaGraphDestroy(g));
  } else {
    enqueue();
  }
  HS_CHECK(cudaStreamSynchronize(stream));
  HS_CHECK(cudaStreamDestroy(stream));
  hsSetKernelLaunchOptions(previous);
  return h.download();
}

/** Check 6: PDL on (eager, graph) = PDL off, bit for bit, over a dependent chain. */
void checkLaunchChain(hs_test::Rng& rng, bool quick) {
  const int n = quick ? 256 : 2048;
  const int rounds = quick ? 2 : 8;
  std::vector<uint16_t> hw(size_t(n) * n), nw(n), h0(n);
  for (auto& v : hw) v = hs_test::randomBf16(rng, 0.0, 1.0 / std::sqrt(double(n)));
  for (auto& v : nw) v = hs_test::randomBf16(rng, 1.0, 0.1);
  for (auto& v : h0) v = hs_test::randomBf16(rng, 0.0, 1.0);
  DeviceBuffer<uint16_t> w(hw.size()), normW(nw.size());
  w.upload(hw);
  normW.upload(nw);
  const auto serial = runChain(0, false, rounds, n, w, normW, h0);
  const auto pdl = runChain(HS_LAUNCH_ALL, false, rounds, n, w, normW, h0);
  const auto pdlGraph = runChain(HS_LAUNCH_ALL, true, rounds, n, w, normW, h0);
  const auto serialGraph = runChain(0, true, rounds, n, w, normW, h0);
  const bool ok = serial == pdl && serial == pdlGraph && serial == serialGraph;
  std::printf("%s launch chain (%d dependent kernels): PDL eager %s, PDL graph %s, serialized graph %s\n",
              ok ? "ok  " : "FAIL", 4 * rounds, serial == pdl ? "same" : "DIFFERS",
              serial == pdlGraph ? "same" : "DIFFERS", serial == serialGraph ? "same" : "DIFFERS");
  tally.record(ok, "gemv launch chain, PDL = serialized");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hs_test::hasFlag(argc, argv, "--quick");
  hs_test::Rng rng(20);
  std::vector<Case> cases = {
      {1, 37, 520, false, false}, {2, 19, 264, true, true}, {5, 9, 2056, true, false}, {16, 6, 1032, false, true},
  };
  if (!quick) {
    for (int m : {1, 2, 3, 4, 7, 8, 9, 13, 16})
      for (int f32 = 0; f32 < 2; ++f32) cases.push_back({m, 67, 4104, m % 2 == 1, f32 == 1});
  }
  for (const Case& c : cases) checkCase(c, rng);
  checkSilu(1, 2 * 21, 520, false, rng);
  checkSilu(8, 2 * 13, 1032, true, rng);
  if (!quick) checkSilu(16, 2 * 67, 4104, true, rng);
  checkRope(3, 4, 2, 32, 264, true, rng);
  if (!quick) {
    checkRope(1, 32, 8, 128, 4096, false, rng);
    checkRope(8, 8, 2, 128, 1032, true, rng);
  }
  checkRefusals();
  checkLaunchChain(rng, quick);
  return tally.finish("gemv_test");
}
