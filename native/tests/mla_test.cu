// Standalone test of the MLA and DSA indexer kernels (native/kernels/mla.h) against the C++ ports
// of the CPU oracle in mla_ref.h. Usage: mla_test [--quick] [--only rows|attention|attention_tc|indexer]
// - rows: the paged row write (bf16 rounding, PAD_SLOT_ID skipped), strided RoPE (interleaved and
//   half) and LayerNorm against float64 formulas; column slices exact;
// - attention: absorb -> attention (the SIMT kernel) -> output projection (the absorbed form)
//   against the expanded float64 reference (dense causal, DSA top-k with -1 entries, decode +
//   prefill chunk in one step, with and without split-KV), and DSA with top-k covering every
//   position == dense;
// - attention_tc: the tensor-core kernel (GLM-5's 64 heads x 576-wide rows, also 20 and 128
//   heads) against the float64 reference and the SIMT kernel within bf16 tolerance, dense and
//   DSA, split and not; hsMlaAttention picks it;
// - indexer: logits within f32 tolerance, the top-k of the device logits identical to the oracle's
//   top-k of the same logits (ties by lower position, NaN as -inf, -0 as +0, k >= context).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/mla.h"
#include "mla_ref.h"
#include "test_common.h"

using namespace hs_test;

namespace {

Tally tally;

float bf(float x) { return bf16ToFloat(floatToBf16(x)); }
std::vector<float> randVals(Rng& rng, size_t n, double scale, bool roundBf16) {
  std::vector<float> v(n);
  for (auto& x : v) x = roundBf16 ? bf(static_cast<float>(rng.normal() * scale)) : static_cast<float>(rng.normal() * scale);
  return v;
}
std::vector<uint16_t> toBf16(const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = floatToBf16(v[i]);
  return r;
}
std::vector<float> fromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = bf16ToFloat(v[i]);
  return r;
}
/** max |out - ref| / max(max |ref|, 1e-6). */
template <typename A, typename B>
double relMaxErr(const std::vector<A>& out, const std::vector<B>& ref) {
  double num = 0, den = 1e-6;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(out[i]) - static_cast<double>(ref[i])));
    den = std::max(den, std::fabs(static_cast<double>(ref[i])));
  }
  return num / den;
}

/** A step of requests with (qLen, seqLen) over shuffled blocks. */
mla_ref::Step makeStep(const std::vector<std::pair<int, int>>& reqs, int blockSize, int maxBlocksPerReq, Rng& rng,
                       int& numBlocks) {
  mla_ref::Step st;
  st.blockSize = blockSize;
  st.maxBlocksPerReq = maxBlocksPerReq;
  st.qsl.push_back(0);
  numBlocks = static_cast<int>(reqs.size()) * maxBlocksPerReq + 3;
  std::vector<int> perm(numBlocks);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = numBlocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
  int next = 0;
  for (auto [q, s] : reqs) {
    st.qsl.push_back(st.qsl.back() + q);
    st.seqLens.push_back(s);
    for (int b = 0; b < maxBlocksPerReq; ++b) st.blockTables.push_back(perm[next++]);
  }
  return st;
}

struct DevStep {
  DeviceBuffer<int32_t> qsl, seqLens, blockTables;
  explicit DevStep(const mla_ref::Step& st)
      : qsl(st.qsl.size()), seqLens(st.seqLens.size()), blockTables(st.blockTables.size()) {
    qsl.upload(st.qsl);
    seqLens.upload(st.seqLens);
    blockTables.upload(st.blockTables);
  }
};

// ---- rows -------------------------------------------------------------------------------------

void rowTests() {
  Rng rng(5);
  const int T = 5, W = 24, rowWidth = 40, col = 8, numSlots = 64;
  const auto src = randVals(rng, T * W, 1.0, false);
  std::vector<int32_t> slots = {3, -1, 17, 63, 40};
  DeviceBuffer<float> dSrc(src.size());
  DeviceBuffer<uint16_t> dCache(static_cast<size_t>(numSlots) * rowWidth);
  DeviceBuffer<int32_t> dSlots(T);
  dSrc.upload(src);
  dSlots.upload(slots);
  dCache.poison(0);
  HS_CHECK(hsMlaWriteRows(dSrc.ptr, HS_DTYPE_F32, dCache.ptr, HS_DTYPE_BF16, dSlots.ptr, T, W, rowWidth, col, numSlots,
                          nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto cache = dCache.download();
  std::vector<uint16_t> want(cache.size(), 0);
  for (int t = 0; t < T; ++t)
    if (slots[t] >= 0)
      for (int e = 0; e < W; ++e) want[static_cast<size_t>(slots[t]) * rowWidth + col + e] = floatToBf16(src[t * W + e]);
  tally.record(cache == want, "writeRows f32 -> bf16 cache, PAD skipped");

  DeviceBuffer<float> dSlice(T * 7);
  HS_CHECK(hsMlaSliceColumns(dSrc.ptr, dSlice.ptr, T, W, 5, 7, 4, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto slice = dSlice.download();
  bool ok = true;
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < 7; ++e) ok &= slice[t * 7 + e] == src[t * W + 5 + e];
  tally.record(ok, "sliceColumns");

  for (int inter = 0; inter < 2; ++inter) {
    const int R = 8, maxPos = 32, offset = 2, stride = 12, count = 2;
    std::vector<float> cs(maxPos * R);
    for (int p = 0; p < maxPos; ++p)
      for (int i = 0; i < R / 2; ++i) {
        const double ang = p * std::pow(10000.0, -2.0 * i / R);
        cs[p * R + i] = static_cast<float>(std::cos(ang));
        cs[p * R + R / 2 + i] = static_cast<float>(std::sin(ang));
      }
    const auto x = randVals(rng, T * W, 1.0, true);
    std::vector<int32_t> pos = {0, 7, 31, 12, 3};
    DeviceBuffer<uint16_t> dx(x.size());
    DeviceBuffer<float> dcs(cs.size());
    DeviceBuffer<int32_t> dpos(T);
    dx.upload(toBf16(x));
    dcs.upload(cs);
    dpos.upload(pos);
    HS_CHECK(hsMlaRotaryStrided(dx.ptr, HS_DTYPE_BF16, dpos.ptr, dcs.ptr, T, W, offset, stride, count, R, maxPos, inter,
                                nullptr));
    HS_CHECK(cudaDeviceSynchronize());
    const auto got = fromBf16(dx.download());
    std::vector<float> ref = x;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < count; ++h)
        for (int i = 0; i < R / 2; ++i) {
          const int o = t * W + offset + h * stride;
          const int ia = inter ? o + 2 * i : o + i;
          const int ib = inter ? ia + 1 : ia + R / 2;
          const float c = cs[pos[t] * R + i], s = cs[pos[t] * R + R / 2 + i];
          const float a = x[ia], b = x[ib];
          ref[ia] = bf(a * c - b * s);
          ref[ib] = bf(b * c + a * s);
        }
    tally.record(relMaxErr(got, ref) < 1e-2, inter ? "rotaryStrided interleaved" : "rotaryStrided half");
  }

  const int n = 48;
  const auto lx = randVals(rng, T * n, 2.0, false);
  const auto lw = randVals(rng, n, 1.0, false);
  const auto lb = randVals(rng, n, 1.0, false);
  DeviceBuffer<float> dlx(lx.size()), dlw(n), dlb(n), dlo(lx.size());
  dlx.upload(lx);
  dlw.upload(lw);
  dlb.upload(lb);
  HS_CHECK(hsMlaLayerNorm(dlx.ptr, dlw.ptr, dlb.ptr, dlo.ptr, T, n, 1e-6f, HS_DTYPE_F32, HS_DTYPE_F32, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto lo = dlo.download();
  std::vector<double> lref(lx.size());
  for (int t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; ++i) mean += lx[t * n + i];
    mean /= n;
    for (int i = 0; i < n; ++i) var += (lx[t * n + i] - mean) * (lx[t * n + i] - mean);
    const double inv = 1 / std::sqrt(var / n + 1e-6);
    for (int i = 0; i < n; ++i) lref[t * n + i] = (lx[t * n + i] - mean) * inv * lw[i] + lb[i];
  }
  tally.record(relMaxErr(lo, lref) < 1e-5, "layerNorm");
}

// ---- attention --------------------------------------------------------------------------------

struct AttnCase {
  const char* name;
  mla_ref::Dims d;
  std::vector<std::pair<int, int>> reqs;  // (qLen, seqLen)
  int blockSize, maxBlocksPerReq;
  int topk;  // 0: dense; > 0: random selections of this many entries (some -1); < 0: every position
};

/** An absorbed attention entry point (hsMlaAttention, hsMlaAttentionSimt, hsMlaAttentionTc). */
using AttnFn = cudaError_t (*)(const HsMlaAttentionParams*, cudaStream_t);

/** Runs absorb -> attention (`fn`) -> outProject; returns out [T, Hq Vd] (f32). */
std::vector<float> runAttention(const AttnCase& c, const mla_ref::Step& st, const std::vector<float>& q,
                                const std::vector<float>& cache, const std::vector<float>& kvB,
                                const std::vector<int32_t>& topk, int K, AttnFn fn = hsMlaAttentionSimt) {
  const auto& d = c.d;
  const int T = st.numTokens(), D = d.C + d.R;
  DevStep ds(st);
  DeviceBuffer<float> dq(q.size()), dqAbs(static_cast<size_t>(T) * d.Hq * D), doLat(static_cast<size_t>(T) * d.Hq * d.C);
  DeviceBuffer<uint16_t> dCache(cache.size()), dKvB(kvB.size());
  DeviceBuffer<float> dOut(static_cast<size_t>(T) * d.Hq * d.Vd);
  DeviceBuffer<int32_t> dTopk(std::max<size_t>(topk.size(), 1));
  dq.upload(q);
  dCache.upload(toBf16(cache));
  dKvB.upload(toBf16(kvB));
  if (!topk.empty()) dTopk.upload(topk);
  doLat.poison();
  dOut.poison();
  HS_CHECK(hsMlaAbsorbQuery(dq.ptr, HS_DTYPE_F32, dKvB.ptr, dqAbs.ptr, T, d.Hq, d.N, d.R, d.Vd, d.C, nullptr));
  const int maxContext = c.maxBlocksPerReq * c.blockSize;
  const int entries = topk.empty() ? maxContext : K;
  const size_t wsBytes = hsMlaAttentionWorkspaceBytes(T, d.Hq, d.C, entries);
  DeviceBuffer<unsigned char> ws(std::max<size_t>(wsBytes, 16));
  HsMlaAttentionParams p{};
  p.qAbs = dqAbs.ptr;
  p.latentCache = dCache.ptr;
  p.cacheDtype = HS_DTYPE_BF16;
  p.oLat = doLat.ptr;
  p.queryStartLoc = ds.qsl.ptr;
  p.seqLens = ds.seqLens.ptr;
  p.blockTables = ds.blockTables.ptr;
  p.maxBlocksPerReq = c.maxBlocksPerReq;
  p.numReqs = st.numReqs();
  p.numTokens = T;
  p.numHeads = d.Hq;
  p.rank = d.C;
  p.ropeDim = d.R;
  p.blockSize = c.blockSize;
  p.scale = static_cast<float>(d.scale);
  p.topkIndices = topk.empty() ? nullptr : dTopk.ptr;
  p.topkStride = K;
  p.maxContext = maxContext;
  p.workspace = ws.ptr;
  p.workspaceBytes = wsBytes;
  HS_CHECK(fn(&p, nullptr));
  HS_CHECK(hsMlaOutProject(doLat.ptr, dKvB.ptr, dOut.ptr, HS_DTYPE_F32, T, d.Hq, d.N, d.Vd, d.C, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  return dOut.download();
}

/** A case's random inputs: step, q, cache, kv_b_proj and (c.topk != 0) the selections. */
struct AttnInputs {
  mla_ref::Step st;
  std::vector<float> q, cache, kvB;
  std::vector<int32_t> topk;
  int K = 0;
};

AttnInputs makeInputs(const AttnCase& c, Rng& rng) {
  const auto& d = c.d;
  AttnInputs in;
  int numBlocks = 0;
  in.st = makeStep(c.reqs, c.blockSize, c.maxBlocksPerReq, rng, numBlocks);
  const auto& st = in.st;
  const int T = st.numTokens(), D = d.C + d.R;
  in.q = randVals(rng, static_cast<size_t>(T) * d.Hq * (d.N + d.R), 1.0, false);
  in.cache = randVals(rng, static_cast<size_t>(numBlocks) * c.blockSize * D, 1.0, true);
  in.kvB = randVals(rng, static_cast<size_t>(d.Hq) * (d.N + d.Vd) * d.C, 1.0 / std::sqrt(d.C), true);
  if (c.topk != 0) {
    const int K = c.topk > 0 ? c.topk : st.maxBlocksPerReq * st.blockSize;
    in.K = K;
    in.topk.assign(static_cast<size_t>(T) * K, -1);
    for (int t = 0; t < T; ++t) {
      int r, p;
      st.where(t, r, p);
      std::vector<int> all(p + 1);
      std::iota(all.begin(), all.end(), 0);
      for (int i = p; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
      const int take = c.topk > 0 ? std::min(p + 1, K - 1) : p + 1;  // leave a -1 when selecting
      all.resize(take);
      std::sort(all.begin(), all.end());
      for (int j = 0; j < take; ++j) in.topk[static_cast<size_t>(t) * K + j] = all[j];
    }
  }
  return in;
}

/** The SIMT kernel (hsMlaAttentionSimt) against the expanded float64 reference. */
void testAttention(const AttnCase& c, Rng& rng) {
  const auto in = makeInputs(c, rng);
  const auto out = runAttention(c, in.st, in.q, in.cache, in.kvB, in.topk, in.K);
  const auto ref = mla_ref::attention(in.q, in.cache, in.kvB, in.st, c.d, in.topk, in.K);
  const double err = relMaxErr(out, ref);
  if (err >= 1e-4) std::printf("  attention %s: rel err %.3g\n", c.name, err);
  tally.record(err < 1e-4, (std::string("attention ") + c.name).c_str());
  if (c.topk < 0) {  // every position selected == dense attention
    const auto dense = runAttention(c, in.st, in.q, in.cache, in.kvB, {}, 0);
    const double e2 = relMaxErr(out, dense);
    if (e2 >= 1e-5) std::printf("  sparse vs dense %s: rel err %.3g\n", c.name, e2);
    tally.record(e2 < 1e-5, (std::string("sparse == dense ") + c.name).c_str());
  }
}

void attentionTests(bool quick) {
  Rng rng(21);
  const mla_ref::Dims tiny{4, 32, 16, 32, 64, 1.0 / std::sqrt(48.0)};
  const mla_ref::Dims wide{20, 16, 64, 24, 512, 1.0 / std::sqrt(80.0)};  // C + R = 576, two head tiles
  const AttnCase cases[] = {
      {"tiny dense decode x3 (split-KV)", tiny, {{1, 37}, {1, 5}, {1, 300}}, 16, 20, 0},
      {"tiny dense prefill chunk + decode", tiny, {{7, 40}, {1, 17}}, 16, 4, 0},
      {"tiny DSA top-12 decode + prefill", tiny, {{1, 60}, {5, 30}}, 16, 4, 12},
      {"tiny DSA all positions", tiny, {{1, 45}, {3, 20}}, 16, 4, -1},
      {"wide (C 512 R 64, 20 heads) DSA top-40", wide, {{1, 70}, {2, 33}}, 16, 5, 40},
  };
  for (const auto& c : cases) {
    if (quick && c.d.C == 512 && c.topk == 0) continue;
    testAttention(c, rng);
  }
  if (!quick) testAttention({"wide dense decode", wide, {{1, 200}, {1, 9}}, 16, 16, 0}, rng);
}

#include "mla_test_tc.h"  // testAttentionTc, attentionTcTests

#include "mla_test_indexer.h"  // testIndexer, indexerTests

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  const char* only = flagValue(argc, argv, "--only");
  auto section = [&](const char* name, const std::function<void()>& f) {
    if (only == nullptr || std::string(only) == name) f();
  };
  section("rows", [&] { rowTests(); });
  section("attention", [&] { attentionTests(quick); });
  section("attention_tc", [&] { attentionTcTests(quick); });
  section("indexer", [&] { indexerTests(quick); });
  return tally.finish("mla_test");
}
