// HiSparse kernel test, Quest selection (part of hisparse_test; see hisparse_test.cu):
// hsQuestSelect against refSelectOne (pages per (row, kv head), ties included), over bf16 and
// fp8 (e4m3) digests.
#include <cmath>
#include <cstring>

#include "../kernels/fp8.cuh"
#include "hisparse_test_common.h"

namespace hs_test {

// ---- 2. Quest selection ----------------------------------------------------------------------------

/** hisparse_select.cu orderKey on the host: the sort key of a float64 score (-0 as +0). */
uint64_t refOrderKey(double s) {
  uint64_t b = 0;
  if (s != 0.0) std::memcpy(&b, &s, sizeof b);
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

/**
 * Pages of row r whose score key in the selection's scratch (hisparse_select.cu sortKeys:
 * [R, Hkv, stride] u64, a white-box read) differs from the oracle's score: every sub-page bound
 * bit for bit, not only the ranks near the threshold. Rows that take every page are not scored.
 */
int scoreKeyMismatches(const RefSelectConfig& c, const std::vector<uint64_t>& keys, const std::vector<float>& dg,
                       const uint16_t* q, const int* hostRow, const int* pinned, int numTokens, int r, int stride) {
  const int numPages = (numTokens + c.bs - 1) / c.bs;
  if (numPages <= c.budgetPages) return 0;
  int bad = 0;
  for (int g = 0; g < c.Hkv; ++g) {
    const std::vector<float> qg = refGroupQuery(c, q, g);
    const uint64_t* row = keys.data() + (static_cast<size_t>(r) * c.Hkv + g) * stride;
    for (int p = 0; p < numPages; ++p) {
      const bool forced = p < c.sinkPages || p >= numPages - c.windowPages || (pinned != nullptr && pinned[p] != 0);
      const uint64_t want = forced ? 0 : refOrderKey(refPageScore(c, dg, qg, hostRow[p], g));
      bad += row[p] == want ? 0 : 1;
    }
  }
  return bad;
}

void selectCase(Tally& tally, int Hq, int Hkv, int D, int bs, uint64_t seed, int S, bool fp8) {
  char name[96];
  std::snprintf(name, sizeof name, "select Hq%d Hkv%d D%d bs%d S%d %s", Hq, Hkv, D, bs, S, fp8 ? "fp8" : "bf16");
  if (!selected(name)) return;
  Rng rng(seed);
  const RefSelectConfig c{Hq, Hkv, D, bs, 8, 1, 2, S};
  // Rows: fits the budget; long with pins; pins exceed the budget (k <= 0); skipped (flag 0); long
  // with many pages sharing host blocks (equal scores: the tie rule); padding (slot -1).
  const std::vector<int> seqLens = {7 * bs - 3, 63 * bs + 5, 30 * bs, 40 * bs, 70 * bs + 1, 0};
  const std::vector<int> flags = {1, 1, 1, 0, 1, 1};
  const std::vector<int> reqSlot = {2, 0, 4, 1, 3, -1};
  const int R = static_cast<int>(seqLens.size());
  Tables tb;
  tb.numSlots = 5;
  tb.stride = 80;
  const int numHostBlocks = 300;
  tb.hostTable.assign(static_cast<size_t>(tb.numSlots) * tb.stride, 0);
  tb.pinned.assign(tb.hostTable.size(), 0);
  for (auto& h : tb.hostTable) h = rng.below(numHostBlocks);
  for (int p = 0; p < tb.stride; ++p) tb.host(3)[p] = rng.below(6);  // many equal digests
  for (int p : {10, 11, 40}) tb.pin(0)[p] = 1;
  for (int p = 3; p < 12; ++p) tb.pin(4)[p] = 1;
  const auto dg = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * S * 2 * Hkv * D);
  // fp8: the e4m3 codes of those values (both zeros among them), read by the kernel as their values.
  std::vector<uint8_t> dg8(dg.size());
  for (size_t i = 0; i < dg.size(); ++i) dg8[i] = hs_fp8::floatToE4m3(bf16ToFloat(dg[i]));
  const int stride = (Hq + 2 * Hkv) * D;
  const int T = R + 3;
  auto qkv = randomBf16Vec(rng, static_cast<size_t>(T) * stride);
  // Queries over 2^-8 .. 2^8 (exact exponent shifts): the float32 sums round often, so a score
  // computed in another operation order than the oracle's shows in the score keys.
  for (auto& x : qkv) x = floatToBf16(std::ldexp(bf16ToFloat(x), static_cast<int>(rng.below(17)) - 8));
  std::vector<int> tokenRow(R);
  for (int r = 0; r < R; ++r) tokenRow[r] = (r * 5 + 2) % T;
  auto dQkv = toDevice(qkv);
  auto dDg = toDevice(dg);
  auto dDg8 = toDevice(dg8);
  auto dSeq = toDevice(seqLens);
  auto dFlags = toDevice(flags);
  auto dSlot = toDevice(reqSlot);
  auto dHostT = toDevice(tb.hostTable);
  auto dPin = toDevice(tb.pinned);
  auto dTok = toDevice(tokenRow);
  DeviceBuffer<int32_t> dSel(static_cast<size_t>(R) * Hkv * tb.stride), dCnt(static_cast<size_t>(R) * Hkv);
  dSel.poison(0x7f);
  dCnt.poison(0x7f);
  const size_t scratch = hsQuestSelectScratchBytes(R, Hkv, tb.stride);
  DeviceBuffer<unsigned char> dScratch(scratch);
  HsQuestSelectParams p{};
  p.qkv = dQkv.ptr;
  p.qkvRowStride = stride;
  p.tokenRow = dTok.ptr;
  p.digests = fp8 ? static_cast<const void*>(dDg8.ptr) : dDg.ptr;
  p.digestDtype = fp8 ? HS_DIGEST_FP8 : HS_DIGEST_BF16;
  p.numHostBlocks = numHostBlocks;
  p.seqLens = dSeq.ptr;
  p.rowFlags = dFlags.ptr;
  p.reqSlot = dSlot.ptr;
  p.hostBlockTable = dHostT.ptr;
  p.pinnedTable = dPin.ptr;
  p.tableStride = tb.stride;
  p.numSlots = tb.numSlots;
  p.selPages = dSel.ptr;
  p.selCount = dCnt.ptr;
  p.scratch = dScratch.ptr;
  p.scratchBytes = scratch;
  p.numReqs = R;
  p.numHeads = Hq;
  p.numKvHeads = Hkv;
  p.headDim = D;
  p.blockSize = bs;
  p.budgetPages = c.budgetPages;
  p.sinkPages = c.sinkPages;
  p.windowPages = c.windowPages;
  p.digestsPerPage = S;
  HS_CHECK(hsQuestSelect(&p, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto sel = fromDevice(dSel, dSel.count);
  const auto cnt = fromDevice(dCnt, dCnt.count);
  std::vector<float> dgF(dg.size());
  for (size_t i = 0; i < dg.size(); ++i) dgF[i] = fp8 ? hs_fp8::e4m3ToFloat(dg8[i]) : bf16ToFloat(dg[i]);
  int bad = 0;
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < Hkv; ++g) {
      const size_t item = static_cast<size_t>(r) * Hkv + g;
      std::vector<int> want;
      if (flags[r] != 0 && reqSlot[r] >= 0)
        want = refSelectOne(c, dgF, qkv.data() + static_cast<size_t>(tokenRow[r]) * stride, tb.host(reqSlot[r]),
                            tb.pin(reqSlot[r]), seqLens[r], g);
      std::vector<int> got(sel.begin() + item * tb.stride, sel.begin() + item * tb.stride + std::max(cnt[item], 0));
      if (cnt[item] != static_cast<int>(want.size()) || got != want) {
        if (bad++ < 4) std::printf("  row %d head %d: %d pages, want %zu\n", r, g, cnt[item], want.size());
      }
    }
  std::vector<uint64_t> keys(scratch / sizeof(uint64_t));
  HS_CHECK(cudaMemcpy(keys.data(), dScratch.ptr, keys.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  int badKeys = 0;
  for (int r = 0; r < R; ++r)
    if (flags[r] != 0 && reqSlot[r] >= 0)
      badKeys += scoreKeyMismatches(c, keys, dgF, qkv.data() + static_cast<size_t>(tokenRow[r]) * stride,
                                    tb.host(reqSlot[r]), tb.pin(reqSlot[r]), seqLens[r], r, tb.stride);
  std::printf("%-52s mismatching (row, head)=%d score keys=%d %s\n", name, bad, badKeys,
              bad == 0 && badKeys == 0 ? "ok" : "FAIL");
  tally.record(bad == 0 && badKeys == 0, name);
}

}  // namespace hs_test

namespace hs_test {

// ---- 2b. the benchmark's selection-overlap knob (HsQuestSelectParams.prevSelected) -----------------

void overlapCase(Tally& tally) {
  const char* name = "select overlap knob (prevSelected, p = 0 / 1)";
  if (!selected(name)) return;
  const int Hq = 4, Hkv = 2, D = 64, bs = 16, W = 64, R = 2;
  Rng rng(31);
  const RefSelectConfig c{Hq, Hkv, D, bs, 12, 1, 2};
  const std::vector<int> seqLens = {60 * bs + 3, 40 * bs};
  const std::vector<int> reqSlot = {1, 0};
  const int numHostBlocks = 2 * W;
  std::vector<int> hostTable(static_cast<size_t>(2) * W);
  for (size_t i = 0; i < hostTable.size(); ++i) hostTable[i] = static_cast<int>(i);
  const auto dg = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * 2 * Hkv * D);
  std::vector<float> dgF(dg.size());
  for (size_t i = 0; i < dg.size(); ++i) dgF[i] = bf16ToFloat(dg[i]);
  const int stride = (Hq + 2 * Hkv) * D;
  auto dDg = toDevice(dg);
  auto dSeq = toDevice(seqLens);
  auto dSlot = toDevice(reqSlot);
  auto dHostT = toDevice(hostTable);
  DeviceBuffer<int32_t> dSel(static_cast<size_t>(R) * Hkv * W), dCnt(static_cast<size_t>(R) * Hkv);
  DeviceBuffer<uint8_t> dPrev(static_cast<size_t>(2) * Hkv * W);
  HS_CHECK(cudaMemset(dPrev.ptr, 0, dPrev.bytes()));
  const size_t scratch = hsQuestSelectScratchBytes(R, Hkv, W);
  DeviceBuffer<unsigned char> dScratch(scratch);
  // Runs one selection with fresh random queries; returns the pages per (row, head) and the oracle's.
  auto run = [&](float p, std::vector<std::vector<int>>& want) {
    const auto qkv = randomBf16Vec(rng, static_cast<size_t>(R) * stride);
    auto dQkv = toDevice(qkv);
    HsQuestSelectParams a{};
    a.qkv = dQkv.ptr;
    a.qkvRowStride = stride;
    a.digests = dDg.ptr;
    a.digestDtype = HS_DIGEST_BF16;
    a.numHostBlocks = numHostBlocks;
    a.seqLens = dSeq.ptr;
    a.reqSlot = dSlot.ptr;
    a.hostBlockTable = dHostT.ptr;
    a.tableStride = W;
    a.numSlots = 2;
    a.selPages = dSel.ptr;
    a.selCount = dCnt.ptr;
    a.scratch = dScratch.ptr;
    a.scratchBytes = scratch;
    a.numReqs = R;
    a.numHeads = Hq;
    a.numKvHeads = Hkv;
    a.headDim = D;
    a.blockSize = bs;
    a.budgetPages = c.budgetPages;
    a.sinkPages = c.sinkPages;
    a.windowPages = c.windowPages;
    a.digestsPerPage = 1;
    a.prevSelected = dPrev.ptr;
    a.overlapP = p;
    HS_CHECK(hsQuestSelect(&a, 0));
    HS_CHECK(cudaDeviceSynchronize());
    const auto sel = fromDevice(dSel, dSel.count);
    const auto cnt = fromDevice(dCnt, dCnt.count);
    std::vector<std::vector<int>> got(R * Hkv);
    want.assign(R * Hkv, {});
    for (int r = 0; r < R; ++r)
      for (int g = 0; g < Hkv; ++g) {
        const size_t item = static_cast<size_t>(r) * Hkv + g;
        got[item].assign(sel.begin() + item * W, sel.begin() + item * W + std::max(cnt[item], 0));
        want[item] = refSelectOne(c, dgF, qkv.data() + static_cast<size_t>(r) * stride,
                                  hostTable.data() + static_cast<size_t>(reqSlot[r]) * W, nullptr, seqLens[r], g);
      }
    return got;
  };
  std::vector<std::vector<int>> want1, want2, want3;
  // Step 1, no flags yet: the oracle's selection; the flags then hold it.
  const auto s1 = run(1.f, want1);
  int bad = s1 == want1 ? 0 : 1;
  const auto flags = dPrev.download();
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < Hkv; ++g) {
      std::vector<int> fromFlags;
      for (int p = 0; p < W; ++p)
        if (flags[(static_cast<size_t>(reqSlot[r]) * Hkv + g) * W + p] != 0) fromFlags.push_back(p);
      bad += fromFlags == s1[r * Hkv + g] ? 0 : 1;
    }
  // Step 2, new queries, p = 1: every page of step 1 is kept (same count as the budget's k).
  const auto s2 = run(1.f, want2);
  bad += s2 == s1 ? 0 : 1;
  bad += want2 != s1 ? 0 : 1;  // the queries did change the oracle's choice
  // Step 3, p = 0: the oracle's selection for the new queries.
  const auto s3 = run(0.f, want3);
  bad += s3 == want3 ? 0 : 1;
  std::printf("%-52s failures=%d %s\n", name, bad, bad == 0 ? "ok" : "FAIL");
  tally.record(bad == 0, name);
}

}  // namespace hs_test
