// Quest selection microbenchmark (issue 18 item 3): hsQuestSelect (scoring + radix select) at
// Llama-3.1-8B shape (Hq 32, Hkv 8, D 128, pages of 16 tokens), 32K-token rows, for batch 1 and
// 8 and a long table (128K tokens wide) with 32K live, and, for reference, the grid capped at one
// scoring CTA per (row, kv head). Prints the median time (CUDA events, 50 launches) and the
// digest bytes the scoring reads per second (4 D bytes per page and kv head: the memory bound is
// the H200's ~4.8 TB/s). Checks the selection against the C++ oracle (refSelectOne) once.
// Usage: quest_score_bench [--tokens N]
// Before this kernel (main e027014, float64, one thread per page): 82 us at 32K, B = 8 (issue 18).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

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
};

double runShape(const Shape& sh, bool check) {
  const int Hq = 32, Hkv = 8, D = 128, bs = 16;
  const int W = sh.tableTokens / bs;
  const int numHostBlocks = sh.R * W;
  Rng rng(42);
  const auto dg = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * 2 * Hkv * D, false);
  const int stride = (Hq + 2 * Hkv) * D;
  const auto qkv = randomBf16Vec(rng, static_cast<size_t>(sh.R) * stride, false);
  std::vector<int> host(static_cast<size_t>(sh.R) * W), seq(sh.R, sh.tokens), slot(sh.R);
  for (int r = 0; r < sh.R; ++r) {
    slot[r] = r;
    for (int p = 0; p < W; ++p) host[static_cast<size_t>(r) * W + p] = r * W + p;
  }
  auto dQkv = toDevice(qkv);
  auto dDg = toDevice(dg);
  auto dSeq = toDevice(seq);
  auto dSlot = toDevice(slot);
  auto dHost = toDevice(host);
  DeviceBuffer<int32_t> dSel(static_cast<size_t>(sh.R) * Hkv * W), dCnt(static_cast<size_t>(sh.R) * Hkv);
  const size_t scratch = hsQuestSelectScratchBytes(sh.R, Hkv, W);
  DeviceBuffer<unsigned char> dScratch(scratch);
  HsQuestSelectParams p{};
  p.qkv = dQkv.ptr;
  p.qkvRowStride = stride;
  p.digests = dDg.ptr;
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
  p.digestsPerPage = 1;
  p.digestDtype = HS_DIGEST_BF16;  // bf16 digests (4 D bytes per page and kv head)
  hsQuestSetScoreCtaCap(sh.ctaCap);
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
  const double gbps = pages * 4 * D / (us * 1e-6) / 1e9;
  int bad = 0;
  if (check) {
    const auto sel = fromDevice(dSel, dSel.count);
    const auto cnt = fromDevice(dCnt, dCnt.count);
    std::vector<float> dgF(dg.size());
    for (size_t i = 0; i < dg.size(); ++i) dgF[i] = bf16ToFloat(dg[i]);
    const RefSelectConfig c{Hq, Hkv, D, bs, p.budgetPages, p.sinkPages, p.windowPages};
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
  std::printf("%-44s %8.1f us  %7.0f GB/s of digests%s\n", sh.name, us, gbps,
              check ? (bad == 0 ? "  selection = oracle" : "  SELECTION MISMATCH") : "");
  hsQuestSetScoreCtaCap(0);
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
  std::printf("main e027014 (float64, one thread per page): 82 us at 32K, B=8 (issue 18)\n");
  return 0;
}
