// Quest selection microbenchmark (issue 18 item 3): hsQuestSelect (scoring + radix select) at
// Llama-3.1-8B shape (Hq 32, Hkv 8, D 128, pages of 16 tokens), 32K-token rows (2,048 pages),
// for batch 1 and 8 and a long table (128K tokens wide) with 32K live, and, for reference, the
// grid capped at one scoring CTA per (row, kv head); then 4-token sub-page digests (S = 4) at
// B = 16, bf16 and fp8, with the sub-pages scored 4 at a time (default) and one at a time
// (hsQuestSetScoreChunkCap(1), the scoring before 620dc2e), and the step-equivalent cost of 32
// layers. Prints the median time (CUDA events, 50 launches) and the digest bytes the scoring
// reads per second (4 D S bytes per page and kv head in bf16, 2 D S in fp8: the memory bound is
// the H200's ~4.8 TB/s). Checks the selection against the C++ oracle (refSelectOne) once.
// Usage: quest_score_bench [--tokens N]
// Before this kernel (main e027014, float64, one thread per page): 82 us at 32K, B = 8 (issue 18).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../kernels/fp8.cuh"
#include "hisparse_ref.h"
#include "hisparse_test_common.h"

using namespace hs_test;

namespace {

struct Shape {
  const char* name;
  int R;
  int tokens;
  int tableTokens;
  int ctaCap;
  int S = 1;           // sub-page digests per page
  bool fp8 = false;    // e4m3 digests (else bf16)
  int chunkCap = 0;    // hsQuestSetScoreChunkCap (0: default)
};

double runShape(const Shape& sh, bool check) {
  const int Hq = 32, Hkv = 8, D = 128, bs = 16;
  const int W = sh.tableTokens / bs;
  const int numHostBlocks = sh.R * W;
  Rng rng(42);
  const auto dg = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * sh.S * 2 * Hkv * D, false);
  std::vector<uint8_t> dg8(sh.fp8 ? dg.size() : 0);  // e4m3 codes of the same values
  for (size_t i = 0; i < dg8.size(); ++i) dg8[i] = hs_fp8::floatToE4m3(bf16ToFloat(dg[i]));
  const int stride = (Hq + 2 * Hkv) * D;
  const auto qkv = randomBf16Vec(rng, static_cast<size_t>(sh.R) * stride, false);
  std::vector<int> host(static_cast<size_t>(sh.R) * W), seq(sh.R, sh.tokens), slot(sh.R);
  for (int r = 0; r < sh.R; ++r) {
    slot[r] = r;
    for (int p = 0; p < W; ++p) host[static_cast<size_t>(r) * W + p] = r * W + p;
  }
  auto dQkv = toDevice(qkv);
  auto dDg = toDevice(dg);
  auto dDg8 = toDevice(dg8);
  auto dSeq = toDevice(seq);
  auto dSlot = toDevice(slot);
  auto dHost = toDevice(host);
  DeviceBuffer<int32_t> dSel(static_cast<size_t>(sh.R) * Hkv * W), dCnt(static_cast<size_t>(sh.R) * Hkv);
  const size_t scratch = hsQuestSelectScratchBytes(sh.R, Hkv, W);
  DeviceBuffer<unsigned char> dScratch(scratch);
  HsQuestSelectParams p{};
  p.qkv = dQkv.ptr;
  p.qkvRowStride = stride;
  p.digests = sh.fp8 ? static_cast<const void*>(dDg8.ptr) : dDg.ptr;
  p.numHostBlocks = numHostBlocks;
  p.seqLens = dSeq.ptr;
  p.reqSlot = dSlot.ptr;
  p.hostBlockTable = dHost.ptr;
  p.tableStride = W;
  p.numSlots = sh.R;
  p.selPages = dSel.ptr;
  p.selCount = dCnt.ptr;
  p.scratch = dScratch.ptr;
  p.scratchBytes = scratch;
  p.numReqs = sh.R;
  p.numHeads = Hq;
  p.numKvHeads = Hkv;
  p.headDim = D;
  p.blockSize = bs;
  p.budgetPages = sh.tokens / 8 / bs;  // topk = 1/8 of the context
  p.sinkPages = 4;
  p.windowPages = 8;
  p.digestsPerPage = sh.S;
  p.digestDtype = sh.fp8 ? HS_DIGEST_FP8 : HS_DIGEST_BF16;
  hsQuestSetScoreCtaCap(sh.ctaCap);
  hsQuestSetScoreChunkCap(sh.chunkCap);
  cudaEvent_t e0, e1;
  HS_CHECK(cudaEventCreate(&e0));
  HS_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) HS_CHECK(hsQuestSelect(&p, 0));
  std::vector<float> ms;
  for (int i = 0; i < 50; ++i) {
    HS_CHECK(cudaEventRecord(e0, 0));
    HS_CHECK(hsQuestSelect(&p, 0));
    HS_CHECK(cudaEventRecord(e1, 0));
    HS_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    HS_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double us = ms[ms.size() / 2] * 1e3;
  const double pages = static_cast<double>(sh.R) * Hkv * (sh.tokens / bs);
  const double gbps = pages * (sh.fp8 ? 2 : 4) * D * sh.S / (us * 1e-6) / 1e9;
  int bad = 0;
  if (check) {
    const auto sel = fromDevice(dSel, dSel.count);
    const auto cnt = fromDevice(dCnt, dCnt.count);
    std::vector<float> dgF(dg.size());
    for (size_t i = 0; i < dg.size(); ++i) dgF[i] = sh.fp8 ? hs_fp8::e4m3ToFloat(dg8[i]) : bf16ToFloat(dg[i]);
    const RefSelectConfig c{Hq, Hkv, D, bs, p.budgetPages, p.sinkPages, p.windowPages, sh.S};
    for (int r = 0; r < sh.R; ++r)
      for (int g = 0; g < Hkv; ++g) {
        const size_t item = static_cast<size_t>(r) * Hkv + g;
        const auto want =
            refSelectOne(c, dgF, qkv.data() + static_cast<size_t>(r) * stride, &host[static_cast<size_t>(r) * W],
                         nullptr, sh.tokens, g);
        const std::vector<int> got(sel.begin() + item * W, sel.begin() + item * W + std::max(cnt[item], 0));
        bad += got == want ? 0 : 1;
      }
  }
  std::printf("%-52s %8.1f us  %7.0f GB/s of digests  %6.2f ms / 32 layers%s\n", sh.name, us, gbps, us * 32e-3,
              check ? (bad == 0 ? "  selection = oracle" : "  SELECTION MISMATCH") : "");
  hsQuestSetScoreCtaCap(0);
  hsQuestSetScoreChunkCap(0);
  if (bad != 0) std::exit(1);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  const char* t = flagValue(argc, argv, "--tokens");
  const int tokens = t != nullptr ? std::atoi(t) : 32768;
  cudaDeviceProp prop;
  HS_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("quest_score_bench on %s (%d SMs), Llama-8B shape, %d-token rows, topk 1/8\n", prop.name,
              prop.multiProcessorCount, tokens);
  runShape({"B=1", 1, tokens, tokens, 0}, true);
  runShape({"B=8", 8, tokens, tokens, 0}, true);
  runShape({"B=8, table 4x wider than the rows", 8, tokens, 4 * tokens, 0}, false);
  runShape({"B=8, 1 scoring CTA per (row, kv head)", 8, tokens, tokens, 1}, false);
  // Issue 18: 4-token digests (S = 4) at the quest_throughput.sh peak batch.
  runShape({"B=16, S=1 bf16 (page digests)", 16, tokens, tokens, 0}, false);
  runShape({"B=16, S=4 bf16, 4 sub-pages at once", 16, tokens, tokens, 0, 4, false}, true);
  runShape({"B=16, S=4 bf16, one at a time", 16, tokens, tokens, 0, 4, false, 1}, false);
  runShape({"B=16, S=4 fp8, 4 sub-pages at once", 16, tokens, tokens, 0, 4, true}, true);
  runShape({"B=16, S=4 fp8, one at a time", 16, tokens, tokens, 0, 4, true, 1}, false);
  std::printf("main e027014 (float64, one thread per page): 82 us at 32K, B=8 (issue 18)\n");
  return 0;
}
