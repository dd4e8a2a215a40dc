// Benchmark of the paged attention kernels (CUDA events, warm-up, median of many launches,
// rotating KV copies so that every launch reads more than the L2 holds).
//   decode : Llama-3.1-8B heads (32 q / 8 kv, D 128, block 16) at batch {1, 16, 64} x context
//            {1K, 8K, 32K} and batch 1 x 128K; GB/s of KV read against 4.3 TB/s.
//   prefill: one request of 8K and 32K tokens (no cached prefix); TFLOP/s counting
//            4 * T^2 / 2 * Hq * D flops (causal).
// Variants built from the same sources with other tile settings (see scripts/gpu/attn_check.sh)
// are linked under suffixed names and timed side by side. Prints a summary table last.
// Usage: attention_bench [--quick]   (--quick: fewer sizes and repetitions)
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../kernels/attention.h"
#include "test_common.h"

extern "C" {
cudaError_t hsPagedDecodeAttention_s2(const HsPagedAttentionParams* p, cudaStream_t s);
int hsPagedDecodeNumSplits_s2(const HsPagedAttentionParams* p);
size_t hsPagedAttentionWorkspaceBytes_s2(int, int, int, int, int, int);
cudaError_t hsPagedDecodeAttention_s4(const HsPagedAttentionParams* p, cudaStream_t s);
int hsPagedDecodeNumSplits_s4(const HsPagedAttentionParams* p);
size_t hsPagedAttentionWorkspaceBytes_s4(int, int, int, int, int, int);
cudaError_t hsPagedPrefillAttention_k64(const HsPagedAttentionParams* p, int maxQueryLen, cudaStream_t s);
}

using namespace hs_test;

namespace {

constexpr double kDeviceBandwidth = 4.3e12;  // bytes/s, measured device copy ceiling (cuda_common.md)
constexpr int kHq = 32, kHkv = 8, kD = 128, kBlock = 16;

/** Fills n bf16 values with hashed random values in +-[0.05, 1) (never zero). */
__global__ void fillRandomBf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float mag = 0.05f + 0.95f * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16((z & 1) ? -mag : mag);
  }
}

void fillRandom(void* p, size_t n, uint64_t seed) {
  fillRandomBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  HS_CHECK(cudaGetLastError());
}

/** Device problem with `copies` disjoint block-table sets over one cache (rotation vs L2). */
struct BenchProblem {
  int numReqs, ctx, qLen, copies, maxBlocksPerReq, numBlocks;
  DeviceBuffer<uint16_t> qkv, cache, out;
  DeviceBuffer<int> qsl, seqLens, blockTables;  // blockTables: [copies][numReqs][maxBlocksPerReq]
  DeviceBuffer<unsigned char> workspace;
  size_t kvBytes;  // K+V bytes one launch reads

  BenchProblem(int reqs, int context, int queryLen, size_t wsBytes, double minRotateBytes) {
    numReqs = reqs;
    ctx = context;
    qLen = queryLen;
    const int pages = (ctx + kBlock - 1) / kBlock;
    maxBlocksPerReq = pages;
    kvBytes = static_cast<size_t>(numReqs) * ctx * kHkv * kD * 2 * 2;
    copies = std::max(1, std::min(64, static_cast<int>(minRotateBytes / kvBytes + 0.999)));
    numBlocks = copies * numReqs * pages;
    Rng rng(1234 + reqs * 7 + ctx);
    std::vector<int> perm(numBlocks);
    for (int i = 0; i < numBlocks; ++i) perm[i] = i;
    for (int i = numBlocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    blockTables = DeviceBuffer<int>(perm.size());
    blockTables.upload(perm);  // copy c, request r, page i = perm[(c * numReqs + r) * pages + i]
    const int T = numReqs * qLen;
    const int stride = (kHq + 2 * kHkv) * kD;
    qkv = DeviceBuffer<uint16_t>(static_cast<size_t>(T) * stride * copies);
    fillRandom(qkv.ptr, qkv.count, 11);
    cache = DeviceBuffer<uint16_t>(static_cast<size_t>(numBlocks) * 2 * kBlock * kHkv * kD);
    fillRandom(cache.ptr, cache.count, 12);
    out = DeviceBuffer<uint16_t>(static_cast<size_t>(T) * kHq * kD);
    std::vector<int> q(numReqs + 1), s(numReqs, ctx);
    for (int r = 0; r <= numReqs; ++r) q[r] = r * qLen;
    qsl = DeviceBuffer<int>(q.size());
    qsl.upload(q);
    seqLens = DeviceBuffer<int>(s.size());
    seqLens.upload(s);
    workspace = DeviceBuffer<unsigned char>(wsBytes);
    HS_CHECK(cudaDeviceSynchronize());
  }

  HsPagedAttentionParams params(int copy, int maxModelLen) const {
    HsPagedAttentionParams p{};
    const int stride = (kHq + 2 * kHkv) * kD;
    p.qkv = reinterpret_cast<const __nv_bfloat16*>(qkv.ptr) + static_cast<size_t>(copy) * numReqs * qLen * stride;
    p.qkvRowStride = stride;
    p.kvCache = reinterpret_cast<const __nv_bfloat16*>(cache.ptr);
    p.out = reinterpret_cast<__nv_bfloat16*>(out.ptr);
    p.queryStartLoc = qsl.ptr;
    p.seqLens = seqLens.ptr;
    p.blockTables = blockTables.ptr + static_cast<size_t>(copy) * numReqs * maxBlocksPerReq;
    p.maxBlocksPerReq = maxBlocksPerReq;
    p.numReqs = numReqs;
    p.numTokens = numReqs * qLen;
    p.numHeads = kHq;
    p.numKvHeads = kHkv;
    p.headDim = kD;
    p.blockSize = kBlock;
    p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
    p.maxModelLen = maxModelLen;
    p.workspace = workspace.ptr;
    p.workspaceBytes = workspace.bytes();
    return p;
  }
};

/** Median milliseconds of `iters` launches (after `warmup`), each timed with events. */
template <typename Launch>
float medianMs(int warmup, int iters, Launch launch) {
  for (int i = 0; i < warmup; ++i) HS_CHECK(launch(i));
  HS_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  HS_CHECK(cudaEventCreate(&a));
  HS_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    HS_CHECK(cudaEventRecord(a));
    HS_CHECK(launch(warmup + i));
    HS_CHECK(cudaEventRecord(b));
    HS_CHECK(cudaEventSynchronize(b));
    float ms;
    HS_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  HS_CHECK(cudaEventDestroy(a));
  HS_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string kernel, shape, variant;
  int splits;
  float ms;
  double rate;  // GB/s or TFLOP/s
  double pct;   // of 4.3 TB/s (decode) or of 990 TFLOP/s dense bf16 (prefill)
};

using DecodeFn = cudaError_t (*)(const HsPagedAttentionParams*, cudaStream_t);
using SplitsFn = int (*)(const HsPagedAttentionParams*);
using WsFn = size_t (*)(int, int, int, int, int, int);

void benchDecode(int batch, int ctx, bool quick, std::vector<Row>& rows) {
  constexpr int kMaxModelLen = 131072;
  struct Variant {
    const char* name;
    DecodeFn fn;
    SplitsFn splits;
    WsFn ws;
  };
  const Variant variants[] = {
      {"default (2 stages)", hsPagedDecodeAttention, hsPagedDecodeNumSplits, hsPagedAttentionWorkspaceBytes},
      {"3 stages", hsPagedDecodeAttention_s2, hsPagedDecodeNumSplits_s2, hsPagedAttentionWorkspaceBytes_s2},
      {"4 stages", hsPagedDecodeAttention_s4, hsPagedDecodeNumSplits_s4, hsPagedAttentionWorkspaceBytes_s4},
  };
  size_t ws = 0;
  for (const auto& v : variants) ws = std::max(ws, v.ws(batch, batch, kHq, kD, kMaxModelLen, kBlock));
  BenchProblem prob(batch, ctx, 1, ws, 512.0 * (1 << 20));
  char shape[64];
  std::snprintf(shape, sizeof shape, "b%d x %dK", batch, ctx / 1024);
  for (const auto& v : variants) {
    const int iters = quick ? 10 : (prob.kvBytes > (1u << 30) ? 20 : 50);
    const float ms = medianMs(3, iters, [&](int i) {
      const HsPagedAttentionParams p = prob.params(i % prob.copies, kMaxModelLen);
      return v.fn(&p, 0);
    });
    const HsPagedAttentionParams p = prob.params(0, kMaxModelLen);
    const double gbps = prob.kvBytes / (ms * 1e-3) / 1e9;
    rows.push_back({"decode", shape, v.name, v.splits(&p), ms, gbps, 100.0 * gbps * 1e9 / kDeviceBandwidth});
    std::printf("decode  %-10s %-20s splits=%-4d %8.3f ms %8.1f GB/s (%.1f%% of 4.3 TB/s), copies=%d\n", shape,
                v.name, v.splits(&p), ms, gbps, rows.back().pct, prob.copies);
  }
}

void benchPrefill(int T, bool quick, std::vector<Row>& rows) {
  BenchProblem prob(1, T, T, 0, 0.0);
  const double flops = 4.0 * static_cast<double>(T) * T / 2.0 * kHq * kD;
  char shape[64];
  std::snprintf(shape, sizeof shape, "1 x %dK", T / 1024);
  struct Variant {
    const char* name;
    cudaError_t (*fn)(const HsPagedAttentionParams*, int, cudaStream_t);
  };
  const Variant variants[] = {{"default (64 keys, 2 st)", hsPagedPrefillAttention},
                              {"32 keys, 3 stages", hsPagedPrefillAttention_k64}};
  for (const auto& v : variants) {
    const float ms = medianMs(2, quick ? 3 : (T > 16384 ? 5 : 15), [&](int) {
      const HsPagedAttentionParams p = prob.params(0, T);
      return v.fn(&p, T, 0);
    });
    const double tflops = flops / (ms * 1e-3) / 1e12;
    rows.push_back({"prefill", shape, v.name, 0, ms, tflops, 100.0 * tflops / 990.0});
    std::printf("prefill %-10s %-24s %8.3f ms %8.1f TFLOP/s\n", shape, v.name, ms, tflops);
  }
}

/**
 * A prefill chunk of qLen tokens over a ctx-token context (a prefix-cache hit, a preheated
 * document, a later conversation turn), one request: one pass vs split-KV (the default launch).
 */
void benchPrefillChunk(int qLen, int ctx, bool quick, std::vector<Row>& rows) {
  const size_t ws = hsPagedPrefillWorkspaceBytes(1, qLen, kHq, kHkv, kD, qLen, ctx);
  BenchProblem prob(1, ctx, qLen, ws, 0.0);
  const double flops = 4.0 * static_cast<double>(qLen) * (ctx - qLen / 2.0) * kHq * kD;
  char shape[64];
  std::snprintf(shape, sizeof shape, "%d on %dK", qLen, ctx / 1024);
  for (int split = 0; split < 2; ++split) {
    const float ms = medianMs(2, quick ? 5 : 20, [&](int) {
      HsPagedAttentionParams p = prob.params(0, ctx);
      if (split == 0) p.workspaceBytes = 0;
      return hsPagedPrefillAttention(&p, qLen, 0);
    });
    const double tflops = flops / (ms * 1e-3) / 1e12;
    const char* name = split == 0 ? "one pass" : (ws > 0 ? "split-KV" : "split-KV (not split)");
    rows.push_back({"prefill", shape, name, split, ms, tflops, 100.0 * tflops / 990.0});
    std::printf("prefill %-12s %-22s %8.3f ms %8.1f TFLOP/s\n", shape, name, ms, tflops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  cudaDeviceProp prop;
  HS_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::vector<Row> rows;
  const int batches[] = {1, 16, 64};
  const int ctxs[] = {1024, 8192, 32768};
  for (int b : batches)
    for (int c : ctxs) {
      if (quick && (b == 16 || c == 32768)) continue;
      benchDecode(b, c, quick, rows);
    }
  benchDecode(1, 131072, quick, rows);
  benchPrefill(8192, quick, rows);
  if (!quick) benchPrefill(32768, quick, rows);
  benchPrefillChunk(128, 32768, quick, rows);
  benchPrefillChunk(785, 13568, quick, rows);

  std::printf("\n%-8s %-11s %-24s %6s %10s %12s %8s\n", "kernel", "shape", "variant", "splits", "ms", "rate",
              "%peak");
  for (const auto& r : rows)
    std::printf("%-8s %-11s %-24s %6d %10.3f %9.1f %s %7.1f%%\n", r.kernel.c_str(), r.shape.c_str(),
                r.variant.c_str(), r.splits, r.ms, r.rate, r.kernel == "decode" ? "GB/s" : "TF/s", r.pct);
  std::printf("(decode %%peak: KV bytes / time vs 4.3 TB/s; prefill %%peak: vs 990 TFLOP/s dense bf16)\n");
  return 0;
}
