// HiSparse kernel test, the resolver (part of hisparse_test; see hisparse_test.cu): hsResolve
// (fused, split, split with an fp8 host tier) over a scripted multi-step sequence against
// refResolveOne, and its error case. Its swap-in bandwidth: resolver_bench.cu.
#include <cstring>
#include <map>
#include <numeric>

#include "../kernels/fp8.cuh"
#include "hisparse_test_common.h"

namespace hs_test {
namespace {

// ---- 3. resolver over a scripted sequence ---------------------------------------------------------

/** Device state of the resolver test: tables, LRU, held counts, cache and host tier of one layer. */
struct ResolveWorld {
  int Hkv, D, bs, numLayers, layer, numSlots, stride, numHot, numBlocks, numHostBlocks;
  Tables tb;
  DeviceBuffer<int32_t> lruPage, lruLast, lruTick, heldCount, heldPages;
  DeviceBuffer<uint16_t> cache;
  uint16_t* hostTier = nullptr;  // mapped pinned
  void* hostTierDev = nullptr;
  std::vector<uint16_t> hostData;
  DeviceBuffer<unsigned long long> counters;
  ~ResolveWorld() {
    if (hostTier != nullptr) cudaFreeHost(hostTier);
  }
  size_t lruSize() const { return static_cast<size_t>(numSlots) * numLayers * Hkv * numHot; }
  /** Resets the LRU state and held counts of one request slot (what the worker does for a new hot buffer). */
  void resetSlot(int slot) {
    std::vector<int32_t> minus(static_cast<size_t>(numLayers) * Hkv * numHot, -1);
    const size_t off = static_cast<size_t>(slot) * numLayers * Hkv * numHot;
    HS_CHECK(cudaMemcpy(lruPage.ptr + off, minus.data(), minus.size() * 4, cudaMemcpyHostToDevice));
    HS_CHECK(cudaMemcpy(lruLast.ptr + off, minus.data(), minus.size() * 4, cudaMemcpyHostToDevice));
    HS_CHECK(cudaMemset(lruTick.ptr + static_cast<size_t>(slot) * numLayers * Hkv, 0, numLayers * Hkv * 4));
    HS_CHECK(cudaMemset(heldCount.ptr + static_cast<size_t>(slot) * stride, 0, stride * 4));
    HS_CHECK(cudaMemset(heldPages.ptr + slot, 0, 4));
  }
};

/** One reference request: its LRUs (per kv head, the tested layer) and held pages. */
struct RefReq {
  std::vector<RefLru> lrus;
  std::map<int, int> held;
};

}  // namespace

void resolveCase(Tally& tally, int Hkv, int D, int bs, int steps, ResolveMode mode) {
  static const char* const kModeNames[] = {"fused", "split", "split fp8 host"};
  char name[96];
  std::snprintf(name, sizeof name, "resolve %s Hkv%d D%d bs%d, %d steps", kModeNames[static_cast<int>(mode)], Hkv, D,
                bs, steps);
  if (!selected(name)) return;
  const bool split = mode != ResolveMode::kFused;
  const bool fp8 = mode == ResolveMode::kSplitFp8;
  const float kScale = fp8 ? 0.5f : 1.f, vScale = fp8 ? 1.5f : 1.f;
  Rng rng(77 + D);
  ResolveWorld w;
  w.Hkv = Hkv, w.D = D, w.bs = bs, w.numLayers = 3, w.layer = 1, w.numSlots = 4, w.stride = 48, w.numHot = 6;
  w.numBlocks = 64, w.numHostBlocks = 200;
  Tables& tb = w.tb;
  tb.numSlots = w.numSlots, tb.stride = w.stride, tb.numHot = w.numHot;
  tb.hostTable.assign(static_cast<size_t>(w.numSlots) * w.stride, -1);
  tb.blockTable.assign(tb.hostTable.size(), -1);
  tb.hot.assign(static_cast<size_t>(w.numSlots) * w.numHot, -1);
  // Rows: request A (slot 2) and B (slot 0) sparse, C (slot 3) dense (flag 0), a padded row.
  const std::vector<int> reqSlot = {2, 0, 3, -1};
  const std::vector<int> flags = {1, 1, 0, 1};
  std::vector<int> seqLens = {20 * bs + 3, 31 * bs + 7, 10 * bs, 0};
  const int R = static_cast<int>(reqSlot.size());
  std::vector<int> freeBlocks(w.numBlocks);
  std::iota(freeBlocks.begin(), freeBlocks.end(), 0);
  for (int i = w.numBlocks - 1; i > 0; --i) std::swap(freeBlocks[i], freeBlocks[rng.below(i + 1)]);
  std::vector<int> hostPerm(w.numHostBlocks);
  std::iota(hostPerm.begin(), hostPerm.end(), 0);
  for (int i = w.numHostBlocks - 1; i > 0; --i) std::swap(hostPerm[i], hostPerm[rng.below(i + 1)]);
  int nextBlock = 0, nextHost = 0;
  auto takeHot = [&](int slot) {
    for (int s = 0; s < w.numHot; ++s) tb.hotRow(slot)[s] = freeBlocks[nextBlock++];
  };
  // Pages: every page has a host block; the first pages stay ACTIVE (sinks), the last two (window) too.
  for (int r = 0; r < 3; ++r) {
    const int slot = reqSlot[r];
    const int pages = (seqLens[r] + bs - 1) / bs;
    for (int p = 0; p < pages + steps / bs + 2; ++p) tb.host(slot)[p] = hostPerm[nextHost++];
    for (int p = 0; p < pages; ++p) {
      const bool active = flags[r] == 0 || p == 0 || p >= pages - 2 || p % 7 == 3;
      if (active) tb.block(slot)[p] = freeBlocks[nextBlock++];
    }
    if (flags[r] != 0) takeHot(slot);
  }
  w.hostData = randomBf16Vec(rng, static_cast<size_t>(w.numHostBlocks) * Hkv * 2 * bs * D, false);
  // An fp8 host tier holds e4m3 codes (random bytes, NaN codes avoided); the hot block reads bf16(code * scale).
  std::vector<uint8_t> codes(fp8 ? w.hostData.size() : 0);
  for (auto& c : codes) {
    c = static_cast<uint8_t>(rng.below(256));
    if ((c & 0x7f) == 0x7f) c ^= 1;
  }
  HS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&w.hostTier), w.hostData.size() * 2, cudaHostAllocMapped));
  if (fp8)
    std::memcpy(w.hostTier, codes.data(), codes.size());
  else
    std::copy(w.hostData.begin(), w.hostData.end(), w.hostTier);
  HS_CHECK(cudaHostGetDevicePointer(&w.hostTierDev, w.hostTier, 0));
  const size_t cacheElems = static_cast<size_t>(w.numBlocks) * 2 * bs * Hkv * D;
  std::vector<uint16_t> cacheRef(cacheElems, kBf16NaN);
  w.cache = toDevice(cacheRef);
  w.lruPage = DeviceBuffer<int32_t>(w.lruSize());
  w.lruLast = DeviceBuffer<int32_t>(w.lruSize());
  w.lruTick = DeviceBuffer<int32_t>(static_cast<size_t>(w.numSlots) * w.numLayers * Hkv);
  w.heldCount = DeviceBuffer<int32_t>(static_cast<size_t>(w.numSlots) * w.stride);
  w.heldPages = DeviceBuffer<int32_t>(w.numSlots);
  w.counters = DeviceBuffer<unsigned long long>(3);
  for (int s = 0; s < w.numSlots; ++s) w.resetSlot(s);
  std::map<int, RefReq> ref;  // by row
  auto freshRef = [&](int r) {
    ref[r] = RefReq{};
    for (int g = 0; g < Hkv; ++g) ref[r].lrus.emplace_back(w.numHot);
  };
  for (int r = 0; r < 2; ++r) freshRef(r);
  int bad = 0;
  unsigned long long wantHits = 0, wantMisses = 0;
  HS_CHECK(cudaMemset(w.counters.ptr, 0, 3 * sizeof(unsigned long long)));
  for (int step = 0; step < steps; ++step) {
    if (step == steps / 2) {  // request B gets a new hot buffer: both sides start its LRUs over
      takeHot(reqSlot[1]);
      w.resetSlot(reqSlot[1]);
      freshRef(1);
    }
    // Each sparse row grows by one token (a new ACTIVE page when it crosses a page boundary).
    for (int r = 0; r < 2; ++r) {
      const int slot = reqSlot[r];
      if (seqLens[r] % bs == 0) tb.block(slot)[seqLens[r] / bs] = freeBlocks[nextBlock++ % w.numBlocks];
      ++seqLens[r];
    }
    // Selections: the tail, random other pages (at most numHot INACTIVE ones), ascending.
    std::vector<int> sel(static_cast<size_t>(R) * Hkv * w.stride, -7), cnt(static_cast<size_t>(R) * Hkv, 0);
    for (int r = 0; r < R; ++r) {
      if (reqSlot[r] < 0) continue;
      const int pages = (seqLens[r] + bs - 1) / bs;
      for (int g = 0; g < Hkv; ++g) {
        std::vector<int> pick;
        int inactive = 0;
        for (int p = 0; p + 1 < pages; ++p) {
          const bool isInactive = tb.block(reqSlot[r])[p] < 0;
          if (rng.below(3) == 0 && (!isInactive || inactive < w.numHot)) {
            pick.push_back(p);
            inactive += isInactive ? 1 : 0;
          }
        }
        pick.push_back(pages - 1);
        const size_t item = static_cast<size_t>(r) * Hkv + g;
        std::copy(pick.begin(), pick.end(), sel.begin() + item * w.stride);
        cnt[item] = static_cast<int>(pick.size());
      }
    }
    auto dSel = toDevice(sel);
    auto dCnt = toDevice(cnt);
    auto dSeq = toDevice(seqLens);
    auto dFlags = toDevice(flags);
    auto dSlot = toDevice(reqSlot);
    auto dBlockT = toDevice(tb.blockTable);
    auto dHostT = toDevice(tb.hostTable);
    auto dHot = toDevice(tb.hot);
    DeviceBuffer<int32_t> dOut(sel.size()), dHeadSeq(cnt.size()), dMissSrc(sel.size()), dMissDst(sel.size()),
        dMissCount(cnt.size());
    dMissCount.poison(0x7f);  // the plan writes every item's count, 0 for rows not resolved
    dOut.poison(0x7f);
    dHeadSeq.poison(0x7f);
    HsResolveParams p{};
    p.selPages = dSel.ptr;
    p.selCount = dCnt.ptr;
    p.selStride = w.stride;
    p.rowFlags = dFlags.ptr;
    p.seqLens = dSeq.ptr;
    p.reqSlot = dSlot.ptr;
    p.blockTable = dBlockT.ptr;
    p.hostBlockTable = dHostT.ptr;
    p.tableStride = w.stride;
    p.numSlots = w.numSlots;
    p.hotBlocks = dHot.ptr;
    p.numHot = w.numHot;
    p.lruPage = w.lruPage.ptr;
    p.lruLastUse = w.lruLast.ptr;
    p.lruTick = w.lruTick.ptr;
    p.layer = w.layer;
    p.numLayers = w.numLayers;
    p.heldCount = w.heldCount.ptr;
    p.heldPages = w.heldPages.ptr;
    p.headBlockTables = dOut.ptr;
    p.headSeqLens = dHeadSeq.ptr;
    p.counters = w.counters.ptr;
    p.kvCache = w.cache.ptr;
    p.numBlocks = w.numBlocks;
    p.hostKv = w.hostTierDev;
    p.numHostBlocks = w.numHostBlocks;
    p.numReqs = R;
    p.numKvHeads = Hkv;
    p.headDim = D;
    p.blockSize = bs;
    if (split) p.missSrc = dMissSrc.ptr, p.missDst = dMissDst.ptr, p.missCount = dMissCount.ptr;
    p.hostKvDtype = fp8 ? HS_HOST_KV_FP8 : HS_HOST_KV_BF16, p.kScale = kScale, p.vScale = vScale;
    HS_CHECK(hsResolve(&p, 0));
    HS_CHECK(cudaDeviceSynchronize());
    const auto out = fromDevice(dOut, sel.size());
    const auto headSeq = fromDevice(dHeadSeq, cnt.size());
    for (int r = 0; r < 2; ++r) {
      const int slot = reqSlot[r];
      for (int g = 0; g < Hkv; ++g) {
        const size_t item = static_cast<size_t>(r) * Hkv + g;
        const std::vector<int> s(sel.begin() + item * w.stride, sel.begin() + item * w.stride + cnt[item]);
        const RefResolved rr =
            refResolveOne(ref[r].lrus[g], s, tb.block(slot), tb.host(slot), tb.hotRow(slot), seqLens[r], bs, g, ref[r].held);
        wantHits += rr.hits;
        wantMisses += rr.misses;
        for (const RefCopy& cp : rr.copies)
          for (int row = 0; row < 2 * bs; ++row) {
            const size_t src = ((static_cast<size_t>(cp.hostBlock) * Hkv + g) * 2 * bs + row) * D;
            const size_t dst = ((static_cast<size_t>(cp.block) * 2 * bs + row) * Hkv + g) * D;
            for (int d = 0; d < D; ++d)
              cacheRef[dst + d] = fp8 ? floatToBf16(hs_fp8::e4m3ToFloat(codes[src + d]) * (row < bs ? kScale : vScale))
                                      : w.hostData[src + d];
          }
        const std::vector<int> got(out.begin() + item * w.stride, out.begin() + item * w.stride + cnt[item]);
        if (got != rr.blocks || headSeq[item] != rr.seqLen) {
          if (bad++ < 4) std::printf("  step %d row %d head %d: blocks or length differ\n", step, r, g);
        }
      }
    }
    // Rows not resolved keep the poison (nothing written for flag 0 / slot -1).
    for (int r = 2; r < R; ++r)
      for (int g = 0; g < Hkv; ++g)
        if (headSeq[static_cast<size_t>(r) * Hkv + g] != 0x7f7f7f7f) ++bad;
  }
  // Final state: LRU slots and last uses of the tested layer, held pages, counters, cache bytes.
  const auto lruPage = fromDevice(w.lruPage, w.lruSize());
  const auto lruLast = fromDevice(w.lruLast, w.lruSize());
  const auto held = fromDevice(w.heldPages, w.numSlots);
  const auto counters = fromDevice(w.counters, 3);
  for (int r = 0; r < 2; ++r)
    for (int g = 0; g < Hkv; ++g) {
      const size_t base = ((static_cast<size_t>(reqSlot[r]) * w.numLayers + w.layer) * Hkv + g) * w.numHot;
      for (int s = 0; s < w.numHot; ++s)
        if (lruPage[base + s] != ref[r].lrus[g].slotPage[s] || lruLast[base + s] != ref[r].lrus[g].lastUse[s]) ++bad;
    }
  for (int r = 0; r < 2; ++r)
    if (held[reqSlot[r]] != static_cast<int>(ref[r].held.size())) ++bad;
  const auto cache = fromDevice(w.cache, cacheElems);
  long badBytes = 0;
  for (size_t i = 0; i < cacheElems; ++i) badBytes += cache[i] != cacheRef[i] ? 1 : 0;
  const bool ok = bad == 0 && badBytes == 0 && counters[0] == wantHits && counters[1] == wantMisses && counters[2] == 0;
  std::printf("%-52s mismatches=%d cacheElems=%ld hits=%llu/%llu misses=%llu/%llu errors=%llu %s\n", name, bad,
              badBytes, counters[0], wantHits, counters[1], wantMisses, counters[2], ok ? "ok" : "FAIL");
  tally.record(ok, name);
  if (wantMisses == 0 || wantHits == 0) {
    std::printf("  (the script made no %s: the test is too weak)\n", wantMisses == 0 ? "miss" : "hit");
    tally.record(false, "resolver script coverage");
  }
}

/** A selection without its tail page is counted as an error and its length is 0. */
void resolveErrorCase(Tally& tally) {
  const char* name = "resolve error: selection without its tail";
  if (!selected(name)) return;
  const int Hkv = 1, D = 16, bs = 4, stride = 8, numHot = 2;
  std::vector<int> sel = {0, 1, 0, 0, 0, 0, 0, 0}, cnt = {2}, seq = {4 * bs}, flags = {1}, slot = {0};
  std::vector<int> blockT = {0, 1, 2, 3, -1, -1, -1, -1}, hostT = {0, 1, 2, 3, 4, 5, 6, 7}, hot = {4, 5};
  std::vector<int> minus(numHot, -1), zero(stride, 0);
  auto dSel = toDevice(sel), dCnt = toDevice(cnt), dSeq = toDevice(seq), dFlags = toDevice(flags), dSlot = toDevice(slot);
  auto dBlockT = toDevice(blockT), dHostT = toDevice(hostT), dHot = toDevice(hot);
  auto dPage = toDevice(minus), dLast = toDevice(minus), dTick = toDevice(std::vector<int>{0});
  auto dHeld = toDevice(zero), dHeldPages = toDevice(std::vector<int>{0});
  DeviceBuffer<int32_t> dOut(stride), dHeadSeq(1);
  DeviceBuffer<unsigned long long> dCounters(3);
  HS_CHECK(cudaMemset(dCounters.ptr, 0, 24));
  DeviceBuffer<uint16_t> cache(static_cast<size_t>(6) * 2 * bs * Hkv * D);
  HsResolveParams p{};
  p.selPages = dSel.ptr, p.selCount = dCnt.ptr, p.selStride = stride, p.rowFlags = dFlags.ptr, p.seqLens = dSeq.ptr;
  p.reqSlot = dSlot.ptr, p.blockTable = dBlockT.ptr, p.hostBlockTable = dHostT.ptr, p.tableStride = stride;
  p.numSlots = 1, p.hotBlocks = dHot.ptr, p.numHot = numHot, p.lruPage = dPage.ptr, p.lruLastUse = dLast.ptr;
  p.lruTick = dTick.ptr, p.layer = 0, p.numLayers = 1, p.heldCount = dHeld.ptr, p.heldPages = dHeldPages.ptr;
  p.headBlockTables = dOut.ptr, p.headSeqLens = dHeadSeq.ptr, p.counters = dCounters.ptr, p.kvCache = cache.ptr;
  p.numBlocks = 6, p.hostKv = nullptr, p.numHostBlocks = 0, p.numReqs = 1, p.numKvHeads = Hkv, p.headDim = D;
  p.blockSize = bs;
  HS_CHECK(hsResolve(&p, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto c = fromDevice(dCounters, 3);
  const auto hs = fromDevice(dHeadSeq, 1);
  const bool ok = c[2] == 1 && hs[0] == 0;
  std::printf("%-52s errors=%llu length=%d %s\n", name, c[2], hs[0], ok ? "ok" : "FAIL");
  tally.record(ok, name);
}

}  // namespace hs_test
