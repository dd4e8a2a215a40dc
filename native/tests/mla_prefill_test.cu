// Standalone test of the expanded-prefill kernels of native/kernels/mla.h (mla_prefill.cu) against
// float64 formulas. Usage: mla_prefill_test [--quick] [--only gather|softmax]
// - gather: a request's paged rows (shuffled blocks, f32 and bf16 caches) into a contiguous bf16
//   buffer, exact; k_pe copied into every head's key of a KV buffer whose other columns stay
//   untouched; positions past the block table give zeros; spilled pages (device block -1) read
//   from a mapped pinned host tier (16-byte aligned and not), the stale device blocks NaN, a
//   spilled page without a host block zeros; the host source's argument checks;
// - softmax: dense causal rows of a tile (firstPos > 0, a key limit below the tile's keys) and DSA
//   top-k rows (-1 entries, entries past the query's position, a row with no valid entry): P
//   within bf16 rounding of exp(s - max) / sum, exact zeros at every unattended key, the row
//   padding past numKeys untouched, and the same bits on a second run (deterministic).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/mla.h"
#include "test_common.h"

using namespace hs_test;

namespace {

Tally tally;

/** Where testGather's rows come from. */
enum class Spill {
  kNone,
  /** Some of the request's device blocks are -1: their rows from a mapped pinned host tier. */
  kHost,
  /** kHost with the host tier one element past a 16-byte boundary (the scalar-load path). */
  kHostMisaligned,
};

/** Element i of vals stored as dtype into bytes (f32 or bf16). */
void storeAs(int dtype, std::vector<unsigned char>& bytes, size_t i, float v) {
  if (dtype == HS_DTYPE_F32) {
    std::memcpy(bytes.data() + i * 4, &v, 4);
  } else {
    const uint16_t b = floatToBf16(v);
    std::memcpy(bytes.data() + i * 2, &b, 2);
  }
}

void testGather(const char* name, int dtype, int numRows, int maxBlocks, int bs, int C, int R, Rng& rng,
                Spill spill = Spill::kNone) {
  const int W = C + R;
  const int numBlocks = maxBlocks * 2 + 1;
  const int req = 1;
  const size_t elem = dtype == HS_DTYPE_F32 ? 4 : 2;
  std::vector<int32_t> tables(2 * maxBlocks);
  std::vector<int> perm(numBlocks);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = numBlocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = perm[i];
  std::vector<float> vals(static_cast<size_t>(numBlocks) * bs * W);
  for (auto& v : vals) v = bf16ToFloat(floatToBf16(static_cast<float>(rng.normal())));
  // Spilled blocks b of the request (every third, from 1): device entry -1, host block hostOf[b]
  // (shuffled; the last spilled one -1: zeros); host tables one entry wider than the device's.
  const int hostMax = maxBlocks + 1;
  std::vector<int32_t> deviceTables = tables, hostTables(2 * hostMax, -1);
  std::vector<int> spilled;
  if (spill != Spill::kNone)
    for (int b = 1; b < maxBlocks; b += 3) spilled.push_back(b);
  const int numHost = static_cast<int>(spilled.size()) + 2;
  std::vector<int> hostPerm(numHost);
  std::iota(hostPerm.begin(), hostPerm.end(), 0);
  for (int i = numHost - 1; i > 0; --i) std::swap(hostPerm[i], hostPerm[rng.below(i + 1)]);
  const size_t rowElems = static_cast<size_t>(bs) * W;
  const size_t lead = spill == Spill::kHostMisaligned ? 1 : 0;  // elements before the host tier
  std::vector<unsigned char> hostBytes((lead + numHost * rowElems) * elem, 0xff);
  std::vector<float> deviceVals = vals;
  for (size_t k = 0; k < spilled.size(); ++k) {
    const int b = spilled[k];
    const int blk = tables[req * maxBlocks + b];
    deviceTables[req * maxBlocks + b] = -1;
    const bool lost = k + 1 == spilled.size();
    hostTables[req * hostMax + b] = lost ? -1 : hostPerm[k];
    for (size_t e = 0; e < rowElems; ++e) {
      if (!lost) storeAs(dtype, hostBytes, lead + hostPerm[k] * rowElems + e, vals[blk * rowElems + e]);
      deviceVals[blk * rowElems + e] = NAN;  // the stale device block: never read
    }
  }
  void* host = nullptr;
  const unsigned char* hostTier = nullptr;
  if (spill != Spill::kNone) {
    HS_CHECK(cudaHostAlloc(&host, hostBytes.size(), cudaHostAllocMapped));
    std::memcpy(host, hostBytes.data(), hostBytes.size());
    hostTier = static_cast<const unsigned char*>(host) + lead * elem;  // UVA: the host address
  }
  DeviceBuffer<int32_t> dTables(deviceTables.size()), dHostTables(hostTables.size());
  dTables.upload(deviceTables);
  dHostTables.upload(hostTables);
  DeviceBuffer<float> cacheF(vals.size());
  DeviceBuffer<uint16_t> cacheB(vals.size());
  const void* cache = nullptr;
  if (dtype == HS_DTYPE_F32) {
    cacheF.upload(deviceVals);
    cache = cacheF.ptr;
  } else {
    std::vector<uint16_t> b(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) b[i] = floatToBf16(deviceVals[i]);
    cacheB.upload(b);
    cache = cacheB.ptr;
  }
  const int heads = 3, N = 5, Vd = 7, H = N + R + Vd, kvLd = heads * H + 2;
  DeviceBuffer<uint16_t> out(static_cast<size_t>(numRows) * W), kv(static_cast<size_t>(numRows) * kvLd);
  out.poison();
  kv.poison(0x11);
  HS_CHECK(hsMlaGatherLatent(cache, dtype, dTables.ptr, maxBlocks, hostTier,
                             hostTier != nullptr ? dHostTables.ptr : nullptr, hostTier != nullptr ? hostMax : 0, req,
                             bs, W, C, numRows, out.ptr, kv.ptr, kvLd, N, H, heads, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto o = out.download();
  const auto k = kv.download();
  int bad = 0;
  for (int i = 0; i < numRows; ++i) {
    const int b = i / bs;
    const bool lost = !spilled.empty() && b == spilled.back();
    const bool in = b < maxBlocks && !lost;
    const size_t slot = in ? static_cast<size_t>(tables[req * maxBlocks + b]) * bs + i % bs : 0;
    for (int e = 0; e < W; ++e) {
      const float want = in ? vals[slot * W + e] : 0.f;
      bad += bf16ToFloat(o[static_cast<size_t>(i) * W + e]) != want;
    }
    for (int c = 0; c < kvLd; ++c) {
      const int h = c / H, within = c % H;
      const bool rope = h < heads && within >= N && within < N + R;
      const uint16_t want = rope ? floatToBf16(in ? vals[slot * W + C + within - N] : 0.f) : 0x1111;
      bad += k[static_cast<size_t>(i) * kvLd + c] != want;
    }
  }
  if (host != nullptr) cudaFreeHost(host);
  tally.record(bad == 0, (std::string("gather ") + name).c_str());
  if (bad) std::printf("  gather %s: %d wrong elements\n", name, bad);
}

/** hsMlaGatherLatent's argument checks of the host source. */
void testGatherArgs() {
  DeviceBuffer<uint16_t> buf(64);
  DeviceBuffer<int32_t> tab(4);
  const auto call = [&](const void* hostCache, const int32_t* hostTables, int hostMax) {
    return hsMlaGatherLatent(buf.ptr, HS_DTYPE_BF16, tab.ptr, 2, hostCache, hostTables, hostMax, 0, 2, 8, 4,
                             /*numRows=*/0, buf.ptr, nullptr, 0, 0, 0, 0, nullptr);  // checks only
  };
  const bool ok = call(buf.ptr, nullptr, 2) == cudaErrorInvalidValue &&
                  call(buf.ptr, tab.ptr, 0) == cudaErrorInvalidValue && call(nullptr, nullptr, 0) == cudaSuccess;
  cudaGetLastError();
  tally.record(ok, "gather: a host source needs its tables and a positive width");
}

/** One softmax case: H heads x Q queries x nk keys (rows nk + 3 apart); K > 0: DSA with K entries per query. */
void testSoftmax(const char* name, int H, int Q, int nk, int firstPos, int keyLimit, int K, Rng& rng) {
  const int ld = nk + 3;
  std::vector<float> s(static_cast<size_t>(H) * Q * ld);
  for (auto& v : s) v = static_cast<float>(rng.normal() * 4.0);
  std::vector<int32_t> topk(static_cast<size_t>(std::max(Q * K, 1)), -1);
  for (int i = 0; i < Q && K > 0; ++i) {
    if (i == 1) continue;  // a row with no entry at all
    const int p = firstPos + i;
    std::vector<int> all(p + 1);
    std::iota(all.begin(), all.end(), 0);
    for (int j = p; j > 0; --j) std::swap(all[j], all[rng.below(j + 1)]);
    for (int e = 0; e < K && e <= p; ++e) {
      const int r = rng.below(10);  // distinct positions <= p, some -1 and some past p (both skipped)
      topk[static_cast<size_t>(i) * K + e] = r == 0 ? -1 : r == 1 ? p + 1 + e : all[e];
    }
  }
  DeviceBuffer<float> dS(s.size());
  dS.upload(s);
  DeviceBuffer<uint16_t> dP(s.size()), dP2(s.size());
  DeviceBuffer<int32_t> dTopk(topk.size());
  dTopk.upload(topk);
  dP.poison();
  dP2.poison();
  const int32_t* sel = K > 0 ? dTopk.ptr : nullptr;
  HS_CHECK(hsMlaPrefillSoftmax(dS.ptr, dP.ptr, H, Q, nk, ld, firstPos, keyLimit, sel, K, nullptr));
  HS_CHECK(hsMlaPrefillSoftmax(dS.ptr, dP2.ptr, H, Q, nk, ld, firstPos, keyLimit, sel, K, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto P = dP.download();
  const auto P2 = dP2.download();
  int bad = 0;
  double worst = 0;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < Q; ++i) {
      const size_t row = (static_cast<size_t>(h) * Q + i) * ld;
      for (int j = nk; j < ld; ++j) bad += P[row + j] != kBf16NaN;  // padding untouched
      const int limit = std::min({keyLimit, nk, firstPos + i + 1});
      std::vector<char> on(nk, 0);
      if (K == 0)
        for (int j = 0; j < limit; ++j) on[j] = 1;
      else
        for (int e = 0; e < K; ++e) {
          const int j = topk[static_cast<size_t>(i) * K + e];
          if (j >= 0 && j < limit) on[j] = 1;
        }
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j < nk; ++j)
        if (on[j]) mx = std::max(mx, static_cast<double>(s[row + j]));
      for (int j = 0; j < nk; ++j)
        if (on[j]) sum += std::exp(s[row + j] - mx);
      for (int j = 0; j < nk; ++j) {
        const double got = bf16ToFloat(P[row + j]);
        if (!on[j]) {
          bad += P[row + j] != 0;
          continue;
        }
        const double want = std::exp(s[row + j] - mx) / sum;
        const double err = std::fabs(got - want) / std::max(want, 1e-30);
        worst = std::max(worst, err);
        bad += err > 1.0 / 256;  // bf16 rounding (2^-9 relative) plus fp32 exp
      }
    }
  bad += P != P2;
  tally.record(bad == 0, (std::string("softmax ") + name).c_str());
  if (bad) std::printf("  softmax %s: %d bad, worst rel err %.3g\n", name, bad, worst);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  const char* only = flagValue(argc, argv, "--only");
  auto section = [&](const char* name, const std::function<void()>& f) {
    if (only == nullptr || std::string(only) == name) f();
  };
  Rng rng(2104);
  section("gather", [&] {
    testGather("bf16 cache, rows past the table", HS_DTYPE_BF16, 45, 10, 4, 16, 8, rng);
    testGather("f32 cache", HS_DTYPE_F32, 37, 10, 4, 24, 8, rng);
    if (!quick) testGather("GLM-5 row 512 + 64", HS_DTYPE_BF16, 300, 20, 16, 512, 64, rng);
    testGather("bf16, spilled pages from the host tier", HS_DTYPE_BF16, 45, 10, 4, 16, 8, rng, Spill::kHost);
    testGather("f32, spilled pages from the host tier", HS_DTYPE_F32, 37, 10, 4, 24, 8, rng, Spill::kHost);
    testGather("bf16, host tier off 16-byte alignment", HS_DTYPE_BF16, 45, 10, 4, 16, 8, rng,
               Spill::kHostMisaligned);
    if (!quick)
      testGather("GLM-5 row, spilled pages", HS_DTYPE_BF16, 300, 20, 16, 512, 64, rng, Spill::kHost);
    testGatherArgs();
  });
  section("softmax", [&] {
    testSoftmax("dense causal, firstPos 40", 3, 9, 49, 40, 1 << 30, 0, rng);
    testSoftmax("dense, key limit 45", 2, 9, 49, 40, 45, 0, rng);
    testSoftmax("DSA top-12 (-1, past p, empty row)", 3, 7, 40, 33, 1 << 30, 12, rng);
    if (!quick) testSoftmax("dense long rows", 4, 33, 3000, 2967, 1 << 30, 0, rng);
    if (!quick) testSoftmax("DSA top-600 long rows", 2, 17, 2100, 2083, 1 << 30, 600, rng);
  });
  return tally.finish("mla_prefill_test");
}
