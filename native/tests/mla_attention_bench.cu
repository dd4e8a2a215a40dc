// Microbenchmark of the absorbed MLA attention kernels (mla.h): hsMlaAttentionTc (tensor cores)
// against hsMlaAttentionSimt (its SIMT oracle) at GLM-5's per-layer shape at TP = 1 (64 heads,
// latent rows of 512 + 64 bf16, block 16, block tables over a shuffled pool), for batches of
// decode tokens x (dense 32K, dense 128K, the DSA top-2048 of 32K and of 128K contexts). Prints
// one markdown row per point: microseconds per call of each kernel (split kernel + merge), the
// speed-up, the tensor-core kernel's GB/s of must-read bytes (rows read + qAbs + oLat) and
// TFLOP/s (2 x 64 heads x (576 + 512) per row), its share of a 4.3 TB/s roofline, and the max
// relative difference of the two kernels' outputs (|tc - simt|max / |simt|max; a point over
// 1e-2 fails the run). Exit 0 iff every point agrees.
// Usage: mla_attention_bench [--batches 1,8,32,64] [--contexts 32768,131072] [--topk 2048]
//                           [--ms 150] (time spent measuring each kernel at each point)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "../kernels/kernels.h"
#include "../kernels/mla.h"
#include "test_common.h"

using namespace hs_test;

namespace {

constexpr int kHeads = 64;
constexpr int kRank = 512;
constexpr int kRope = 64;
constexpr int kRow = kRank + kRope;
constexpr int kBlock = 16;

__device__ __forceinline__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

/** Uniform values in [-amp, amp): bf16 bits (rounded toward zero) or f32. */
__global__ void fillKernel(uint16_t* bf, float* f, size_t n, float amp, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float u = (mix(i * 0x9e3779b97f4a7c15ULL + seed) >> 8) * (1.f / 16777216.f);
    const float v = (2.f * u - 1.f) * amp;
    if (bf != nullptr) bf[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
    if (f != nullptr) f[i] = v;
  }
}

std::vector<int> parseList(const char* s, std::vector<int> dflt) {
  if (s == nullptr) return dflt;
  std::vector<int> v;
  for (const char* p = s; *p != 0;) {
    v.push_back(std::atoi(p));
    while (*p != 0 && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

/** Mean microseconds of fn over enough calls to fill `ms` milliseconds (at least 3). */
template <typename F>
double timeUs(F fn, double ms) {
  cudaEvent_t e0, e1;
  HS_CHECK(cudaEventCreate(&e0));
  HS_CHECK(cudaEventCreate(&e1));
  fn();  // warm-up (raises the shared-memory limit on the first call)
  HS_CHECK(cudaEventRecord(e0));
  fn();
  HS_CHECK(cudaEventRecord(e1));
  HS_CHECK(cudaEventSynchronize(e1));
  float one = 0.f;
  HS_CHECK(cudaEventElapsedTime(&one, e0, e1));
  const int iters = std::max(3, std::min(200, static_cast<int>(ms / std::max(one, 1e-3f))));
  HS_CHECK(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i) fn();
  HS_CHECK(cudaEventRecord(e1));
  HS_CHECK(cudaEventSynchronize(e1));
  float total = 0.f;
  HS_CHECK(cudaEventElapsedTime(&total, e0, e1));
  HS_CHECK(cudaEventDestroy(e0));
  HS_CHECK(cudaEventDestroy(e1));
  return 1e3 * total / iters;
}

}  // namespace

int main(int argc, char** argv) {
  const auto batches = parseList(flagValue(argc, argv, "--batches"), {1, 8, 32, 64});
  const auto contexts = parseList(flagValue(argc, argv, "--contexts"), {32768, 131072});
  const int topk = flagValue(argc, argv, "--topk") ? std::atoi(flagValue(argc, argv, "--topk")) : 2048;
  const double ms = flagValue(argc, argv, "--ms") ? std::atof(flagValue(argc, argv, "--ms")) : 150.0;
  const int maxB = *std::max_element(batches.begin(), batches.end());
  const int maxCtx = *std::max_element(contexts.begin(), contexts.end());
  const int mbpr = maxCtx / kBlock;
  const size_t numBlocks = static_cast<size_t>(maxB) * mbpr;
  cudaDeviceProp prop{};
  HS_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("mla_attention_bench: %s, %d SMs; GLM-5 absorbed attention, %d heads, rows %d + %d bf16, block %d\n",
              prop.name, prop.multiProcessorCount, kHeads, kRank, kRope, kBlock);

  // Latent pool of maxB requests x maxCtx rows; each request's blocks are a shuffled slice.
  DeviceBuffer<uint16_t> cache(numBlocks * kBlock * kRow);
  DeviceBuffer<float> qAbs(static_cast<size_t>(maxB) * kHeads * kRow);
  DeviceBuffer<float> oTc(static_cast<size_t>(maxB) * kHeads * kRank), oSimt(oTc.count);
  fillKernel<<<1024, 256>>>(cache.ptr, nullptr, cache.count, 1.f, 1);
  fillKernel<<<256, 256>>>(nullptr, qAbs.ptr, qAbs.count, 0.5f, 2);
  HS_CHECK(cudaGetLastError());
  Rng rng(7);
  std::vector<int32_t> perm(numBlocks);
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t i = numBlocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(static_cast<int>(i + 1))]);
  DeviceBuffer<int32_t> tables(numBlocks);
  tables.upload(perm);
  // Top-k rows: `topk` distinct positions of [0, ctx) per token, ascending (hsMlaTopk's order).
  auto makeTopk = [&](int B, int ctx) {
    std::vector<int32_t> sel(static_cast<size_t>(B) * topk);
    std::vector<char> taken(ctx);
    for (int b = 0; b < B; ++b) {
      std::fill(taken.begin(), taken.end(), 0);
      int n = 0;
      while (n < std::min(topk, ctx)) {
        const int pos = rng.below(ctx);
        if (!taken[pos]) taken[pos] = 1, ++n;
      }
      int j = 0;
      for (int pos = 0; pos < ctx; ++pos)
        if (taken[pos]) sel[static_cast<size_t>(b) * topk + j++] = pos;
      for (; j < topk; ++j) sel[static_cast<size_t>(b) * topk + j] = -1;
    }
    return sel;
  };

  std::printf("\n| B | context | rows read | simt us | tc us | tc speed-up | tc GB/s | tc TFLOP/s | tc %% of 4.3 TB/s | max rel diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  int bad = 0;
  for (int sparse = 0; sparse < 2; ++sparse)
    for (int ctx : contexts)
      for (int B : batches) {
        std::vector<int32_t> qsl(B + 1), seqLens(B, ctx);
        for (int b = 0; b <= B; ++b) qsl[b] = b;
        DeviceBuffer<int32_t> dQsl(B + 1), dSeq(B);
        dQsl.upload(qsl);
        dSeq.upload(seqLens);
        DeviceBuffer<int32_t> dTopk(sparse ? static_cast<size_t>(B) * topk : 1);
        if (sparse) dTopk.upload(makeTopk(B, ctx));
        const int entries = sparse ? topk : ctx;
        const size_t wsBytes = hsMlaAttentionWorkspaceBytes(B, kHeads, kRank, entries);
        DeviceBuffer<unsigned char> ws(std::max<size_t>(wsBytes, 16));
        HsMlaAttentionParams p{};
        p.qAbs = qAbs.ptr;
        p.latentCache = cache.ptr;
        p.cacheDtype = HS_DTYPE_BF16;
        p.queryStartLoc = dQsl.ptr;
        p.seqLens = dSeq.ptr;
        p.blockTables = tables.ptr;  // request b's row: blocks [b * mbpr, ...) of the shuffled pool
        p.maxBlocksPerReq = mbpr;
        p.numReqs = B;
        p.numTokens = B;
        p.numHeads = kHeads;
        p.rank = kRank;
        p.ropeDim = kRope;
        p.blockSize = kBlock;
        p.scale = 1.f / std::sqrt(256.f);
        p.topkIndices = sparse ? dTopk.ptr : nullptr;
        p.topkStride = sparse ? topk : 0;
        p.maxContext = ctx;  // dense: splits over the context, not the table's full width
        p.workspace = ws.ptr;
        p.workspaceBytes = wsBytes;
        HsMlaAttentionParams pt = p, ps = p;
        pt.oLat = oTc.ptr;
        ps.oLat = oSimt.ptr;
        const double usTc = timeUs([&] { HS_CHECK(hsMlaAttentionTc(&pt, nullptr)); }, ms);
        const double usSimt = timeUs([&] { HS_CHECK(hsMlaAttentionSimt(&ps, nullptr)); }, ms);
        HS_CHECK(cudaDeviceSynchronize());
        const auto a = oTc.download();
        const auto b = oSimt.download();
        double num = 0, den = 1e-30;
        for (size_t i = 0; i < static_cast<size_t>(B) * kHeads * kRank; ++i) {
          num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
          den = std::max(den, std::fabs(static_cast<double>(b[i])));
        }
        const double diff = num / den;
        const bool ok = diff < 1e-2 && std::isfinite(diff);
        bad += !ok;
        const double rows = static_cast<double>(B) * entries;
        const double bytes = rows * kRow * 2 + static_cast<double>(B) * kHeads * (kRow + kRank) * 4;
        const double flops = rows * kHeads * 2.0 * (kRow + kRank);
        const char* what = sparse ? "top-" : "dense ";
        std::printf("| %d | %s%d of %dK | %.0f | %.1f | %.1f | %.2fx | %.0f | %.1f | %.1f%% | %.2e%s |\n", B, what,
                    sparse ? topk : ctx, ctx / 1024, rows, usSimt, usTc, usSimt / usTc, bytes / usTc * 1e-3,
                    flops / usTc * 1e-6, 100.0 * (bytes / 4.3e12) / (usTc * 1e-6), diff, ok ? "" : " FAIL");
        std::fflush(stdout);
      }
  std::printf("\nmla_attention_bench: %s (%d point(s) over 1e-2)\n", bad == 0 ? "PASS" : "FAIL", bad);
  return bad == 0 ? 0 : 1;
}
