// Standalone correctness test of the HiSparse kernels (native/kernels/hisparse.h and
// hsSparseDecodeAttention) against the C++ ports of the CPU oracles (hisparse_ref.h) and a
// float64 attention reference. Runs on a GPU (scripts/gpu/hisparse_check.sh builds it with nvcc)
// and on the CPU through the emulator (bash native/tests/emu/run_emu.sh hisparse --quick).
// Usage: hisparse_test [--quick] [--only TEXT] | hisparse_test --bench (resolver swap-in GB/s, GPU only)
// Exact checks: KV rows and digests written by hsReshapeAndCacheDigest (bits), selections of
// hsQuestSelect (pages, ties included), hsResolve over a scripted multi-step sequence (blocks,
// lengths, LRU state, hits / misses, held pages, every copied byte), the mirror's host layout,
// sparse attention with dense-equal tables (bits equal to hsPagedDecodeAttention). Tolerance
// checks: sparse attention with per-head tables against float64 (relative error < 1e-2).
#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "../kernels/hisparse.h"
#include "hisparse_ref.h"
#include "paged_case.h"

using namespace hs_test;

namespace {

const char* gOnly = nullptr;
bool selected(const char* name) { return gOnly == nullptr || std::string(name).find(gOnly) != std::string::npos; }

/** n random bf16 values in +-[0.05, 1], with a few exact zeros of both signs. */
std::vector<uint16_t> randomBf16Vec(Rng& rng, size_t n, bool zeros = true) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const int z = zeros ? rng.below(40) : 1;
    x = z == 0 ? 0x0000 : z == 1 && zeros ? 0x8000 : randomBf16(rng, 0.05, 1.0);
  }
  return v;
}

template <typename T>
DeviceBuffer<T> toDevice(const std::vector<T>& h) {
  DeviceBuffer<T> d(std::max<size_t>(h.size(), 1));
  if (!h.empty()) HS_CHECK(cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> fromDevice(const DeviceBuffer<T>& d, size_t n) {
  std::vector<T> h(n);
  if (n > 0) HS_CHECK(cudaMemcpy(h.data(), d.ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// ---- 1. reshape_and_cache + digests ---------------------------------------------------------------

void digestCase(Tally& tally, int Hq, int Hkv, int D, int bs) {
  char name[96];
  std::snprintf(name, sizeof name, "digest Hq%d Hkv%d D%d bs%d", Hq, Hkv, D, bs);
  if (!selected(name)) return;
  Rng rng(1000 + D + bs);
  const int stride = (Hq + 2 * Hkv) * D;
  const int numBlocks = 16, numHostBlocks = 12;
  // Tokens: a prefill run over host block 3 from offset 0 into host block 5; a decode at offset 5 of
  // host block 1; padding; a run at the end of host block 2 then the start of host block 6; a
  // main-pool-only token (host slot -1) and a host-only token (slot -1).
  std::vector<int> hostSlots, slots;
  for (int i = 0; i < bs + 5; ++i) hostSlots.push_back((i < bs ? 3 * bs + i : 5 * bs + (i - bs)));
  hostSlots.push_back(1 * bs + 5);
  hostSlots.push_back(-1);
  hostSlots.push_back(2 * bs + bs - 2);
  hostSlots.push_back(2 * bs + bs - 1);
  hostSlots.push_back(6 * bs + 0);
  hostSlots.push_back(6 * bs + 1);
  hostSlots.push_back(-1);
  hostSlots.push_back(7 * bs + 3);
  const int T = static_cast<int>(hostSlots.size());
  std::vector<int> perm(numBlocks * bs);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = static_cast<int>(perm.size()) - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
  for (int t = 0; t < T; ++t) slots.push_back(t == T - 2 ? perm[t] : (t == T - 1 || t == bs + 6 ? -1 : perm[t]));
  const auto qkv = randomBf16Vec(rng, static_cast<size_t>(T) * stride);
  const auto dg0 = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * 2 * Hkv * D, false);
  const size_t cacheElems = static_cast<size_t>(numBlocks) * 2 * bs * Hkv * D;
  std::vector<uint16_t> cache0(cacheElems, kBf16NaN);
  auto dQkv = toDevice(qkv);
  auto dCache = toDevice(cache0);
  auto dDg = toDevice(dg0);
  auto dSlots = toDevice(slots);
  auto dHost = toDevice(hostSlots);
  HS_CHECK(hsReshapeAndCacheDigest(dQkv.ptr, dCache.ptr, dSlots.ptr, dDg.ptr, dHost.ptr, T, stride, Hq, Hkv, D, bs,
                                   numBlocks, numHostBlocks, 0));
  HS_CHECK(cudaDeviceSynchronize());
  std::vector<float> ref(dg0.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = bf16ToFloat(dg0[i]);
  refUpdateDigests(ref, qkv, stride, Hq, Hkv, D, bs, hostSlots);
  const auto dg = fromDevice(dDg, dg0.size());
  long bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) bad += dg[i] != floatToBf16(ref[i]) ? 1 : 0;
  std::vector<uint16_t> cacheRef = cache0;
  const size_t kv = static_cast<size_t>(Hkv) * D;
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const size_t b = slots[t] / bs, o = slots[t] % bs;
    for (int which = 0; which < 2; ++which)
      std::copy_n(qkv.begin() + static_cast<size_t>(t) * stride + Hq * D + which * kv, kv,
                  cacheRef.begin() + ((b * 2 + which) * bs + o) * kv);
  }
  const auto cache = fromDevice(dCache, cacheElems);
  long badKv = 0;
  for (size_t i = 0; i < cacheElems; ++i) badKv += cache[i] != cacheRef[i] ? 1 : 0;
  const bool ok = bad == 0 && badKv == 0;
  std::printf("%-52s digest mismatches=%ld kv mismatches=%ld %s\n", name, bad, badKv, ok ? "ok" : "FAIL");
  tally.record(ok, name);
}

// ---- 2. Quest selection ----------------------------------------------------------------------------

/** Per-request tables of a batch: slots, host blocks, device blocks, pins, hot blocks. */
struct Tables {
  int numSlots = 0, stride = 0, numHot = 0;
  std::vector<int> hostTable, blockTable, pinned, hot;
  int* host(int slot) { return hostTable.data() + static_cast<size_t>(slot) * stride; }
  int* block(int slot) { return blockTable.data() + static_cast<size_t>(slot) * stride; }
  int* pin(int slot) { return pinned.data() + static_cast<size_t>(slot) * stride; }
  int* hotRow(int slot) { return hot.data() + static_cast<size_t>(slot) * numHot; }
};

void selectCase(Tally& tally, int Hq, int Hkv, int D, int bs, uint64_t seed) {
  char name[96];
  std::snprintf(name, sizeof name, "select Hq%d Hkv%d D%d bs%d", Hq, Hkv, D, bs);
  if (!selected(name)) return;
  Rng rng(seed);
  const RefSelectConfig c{Hq, Hkv, D, bs, 8, 1, 2};
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
  const auto dg = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * 2 * Hkv * D);
  const int stride = (Hq + 2 * Hkv) * D;
  const int T = R + 3;
  const auto qkv = randomBf16Vec(rng, static_cast<size_t>(T) * stride);
  std::vector<int> tokenRow(R);
  for (int r = 0; r < R; ++r) tokenRow[r] = (r * 5 + 2) % T;
  auto dQkv = toDevice(qkv);
  auto dDg = toDevice(dg);
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
  p.digests = dDg.ptr;
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
  HS_CHECK(hsQuestSelect(&p, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto sel = fromDevice(dSel, dSel.count);
  const auto cnt = fromDevice(dCnt, dCnt.count);
  std::vector<float> dgF(dg.size());
  for (size_t i = 0; i < dg.size(); ++i) dgF[i] = bf16ToFloat(dg[i]);
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
  std::printf("%-52s mismatching (row, head)=%d %s\n", name, bad, bad == 0 ? "ok" : "FAIL");
  tally.record(bad == 0, name);
}

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

void resolveCase(Tally& tally, int Hkv, int D, int bs, int steps) {
  char name[96];
  std::snprintf(name, sizeof name, "resolve Hkv%d D%d bs%d, %d steps", Hkv, D, bs, steps);
  if (!selected(name)) return;
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
  HS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&w.hostTier), w.hostData.size() * 2, cudaHostAllocMapped));
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
    DeviceBuffer<int32_t> dOut(sel.size()), dHeadSeq(cnt.size());
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
          for (int row = 0; row < 2 * bs; ++row)
            std::copy_n(w.hostData.begin() + ((static_cast<size_t>(cp.hostBlock) * Hkv + g) * 2 * bs + row) * D, D,
                        cacheRef.begin() + ((static_cast<size_t>(cp.block) * 2 * bs + row) * Hkv + g) * D);
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

// ---- 4. mirror -------------------------------------------------------------------------------------

void mirrorCase(Tally& tally, int Hkv, int D, int bs) {
  char name[96];
  std::snprintf(name, sizeof name, "mirror Hkv%d D%d bs%d", Hkv, D, bs);
  if (!selected(name)) return;
  Rng rng(5 + D);
  const int numLayers = 2, numBlocks = 10, numHostBlocks = 12;
  const size_t page = static_cast<size_t>(2) * bs * Hkv * D;
  std::vector<DeviceBuffer<uint16_t>> caches;
  std::vector<std::vector<uint16_t>> cacheData;
  std::vector<uint16_t*> hosts(numLayers);
  std::vector<uint64_t> cachePtrs, hostPtrs;
  for (int l = 0; l < numLayers; ++l) {
    cacheData.push_back(randomBf16Vec(rng, numBlocks * page, false));
    caches.push_back(toDevice(cacheData.back()));
    HS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&hosts[l]), numHostBlocks * page * 2, cudaHostAllocMapped));
    std::fill(hosts[l], hosts[l] + numHostBlocks * page, kBf16NaN);
    void* dev = nullptr;
    HS_CHECK(cudaHostGetDevicePointer(&dev, hosts[l], 0));
    cachePtrs.push_back(reinterpret_cast<uint64_t>(caches[l].ptr));
    hostPtrs.push_back(reinterpret_cast<uint64_t>(dev));
  }
  const std::vector<int> blocks = {3, 7, 0, -1, 9}, hostBlocks = {11, 2, 5, 4, 40};
  auto dCaches = toDevice(cachePtrs), dHosts = toDevice(hostPtrs);
  auto dB = toDevice(blocks), dH = toDevice(hostBlocks);
  HS_CHECK(hsMirrorPages(dCaches.ptr, dHosts.ptr, dB.ptr, dH.ptr, static_cast<int>(blocks.size()), numLayers, Hkv, D,
                         bs, numBlocks, numHostBlocks, 0));
  HS_CHECK(cudaDeviceSynchronize());
  long bad = 0;
  for (int l = 0; l < numLayers; ++l) {
    std::vector<uint16_t> want(numHostBlocks * page, kBf16NaN);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i] < 0 || hostBlocks[i] >= numHostBlocks) continue;
      for (int g = 0; g < Hkv; ++g)
        for (int row = 0; row < 2 * bs; ++row)
          std::copy_n(cacheData[l].begin() + blocks[i] * page + (static_cast<size_t>(row) * Hkv + g) * D, D,
                      want.begin() + hostBlocks[i] * page + (static_cast<size_t>(g) * 2 * bs + row) * D);
    }
    for (size_t i = 0; i < want.size(); ++i) bad += hosts[l][i] != want[i] ? 1 : 0;
    HS_CHECK(cudaFreeHost(hosts[l]));
  }
  std::printf("%-52s mismatches=%ld %s\n", name, bad, bad == 0 ? "ok" : "FAIL");
  tally.record(bad == 0, name);
}

// ---- 5. sparse decode attention ---------------------------------------------------------------------

/** float64 attention of one query row over explicit (block, offset) key positions of kv head kvh. */
void refRowAttention(const PagedCase& c, int t, int h, int kvh, const std::vector<std::pair<int, int>>& keys,
                     std::vector<double>& out) {
  const CaseSpec& s = c.spec;
  std::vector<double> q(s.headDim), acc(s.headDim, 0.0), sc(keys.size());
  for (int d = 0; d < s.headDim; ++d) q[d] = bf16ToFloat(c.qkv[static_cast<size_t>(t) * c.stride + h * s.headDim + d]);
  double mx = -1e300;
  for (size_t k = 0; k < keys.size(); ++k) {
    const uint16_t* kp = c.cache.data() + c.cacheIndex(keys[k].first, 0, keys[k].second, kvh);
    double dot = 0;
    for (int d = 0; d < s.headDim; ++d) dot += q[d] * bf16ToFloat(kp[d]);
    sc[k] = dot / std::sqrt(static_cast<double>(s.headDim));
    mx = std::max(mx, sc[k]);
  }
  double sum = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const double pr = std::exp(sc[k] - mx);
    sum += pr;
    const uint16_t* vp = c.cache.data() + c.cacheIndex(keys[k].first, 1, keys[k].second, kvh);
    for (int d = 0; d < s.headDim; ++d) acc[d] += pr * bf16ToFloat(vp[d]);
  }
  out.assign(s.headDim, 0.0);
  if (!keys.empty())
    for (int d = 0; d < s.headDim; ++d) out[d] = acc[d] / sum;
}

void sparseAttentionCase(Tally& tally, int Hq, int Hkv, int D, int bs, std::vector<int> lens, int maxModelLen) {
  char name[96];
  std::snprintf(name, sizeof name, "sparse attention Hq%d Hkv%d D%d bs%d", Hq, Hkv, D, bs);
  if (!selected(name)) return;
  CaseSpec spec{name, Hq, Hkv, D, bs, std::vector<int>(lens.size(), 1), lens, maxModelLen, 900 + static_cast<uint64_t>(D)};
  spec.poison = false;
  PagedCase c = buildCase(spec);
  const int R = c.numReqs, W = c.maxBlocksPerReq;
  HsPagedAttentionParams base = c.params();
  const size_t outElems = static_cast<size_t>(c.numTokens) * Hq * D;
  // (a) per-head tables equal to the dense rows: the same bits as hsPagedDecodeAttention.
  HS_CHECK(hsPagedDecodeAttention(&base, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto dense = c.dOut.download();
  std::vector<int> headT(static_cast<size_t>(R) * Hkv * W), headSeq(static_cast<size_t>(R) * Hkv);
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < Hkv; ++g) {
      std::copy_n(c.blockTables.begin() + static_cast<size_t>(r) * W, W, headT.begin() + (static_cast<size_t>(r) * Hkv + g) * W);
      headSeq[static_cast<size_t>(r) * Hkv + g] = c.seqLens[r];
    }
  std::vector<int> flags(R);
  for (int r = 0; r < R; ++r) flags[r] = r % 2;
  auto dHeadT = toDevice(headT), dHeadSeq = toDevice(headSeq), dFlags = toDevice(flags);
  HsSparseDecodeParams sp{};
  sp.base = base;
  sp.headBlockTables = dHeadT.ptr;
  sp.headSeqLens = dHeadSeq.ptr;
  sp.headTableStride = W;
  sp.rowFlags = dFlags.ptr;
  c.dOut.poison();
  HS_CHECK(hsSparseDecodeAttention(&sp, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto same = c.dOut.download();
  long diffBits = 0;
  for (size_t i = 0; i < outElems; ++i) diffBits += same[i] != dense[i] ? 1 : 0;
  // (b) per-head subsets of each request's pages (the tail last), every row flagged.
  Rng rng(31 + D);
  std::vector<std::vector<std::vector<std::pair<int, int>>>> keys(R, std::vector<std::vector<std::pair<int, int>>>(Hkv));
  for (int r = 0; r < R; ++r) {
    const int pages = (c.seqLens[r] + bs - 1) / bs;
    for (int g = 0; g < Hkv; ++g) {
      std::vector<int> pick;
      for (int p = 0; p + 1 < pages; ++p)
        if (rng.below(2) == 0) pick.push_back(p);
      if (pages > 0) pick.push_back(pages - 1);
      const size_t item = static_cast<size_t>(r) * Hkv + g;
      std::fill_n(headT.begin() + item * W, W, 0);
      for (size_t j = 0; j < pick.size(); ++j) {
        const int b = c.blockTables[static_cast<size_t>(r) * W + pick[j]];
        headT[item * W + j] = b;
        const int n = pick[j] == pages - 1 ? c.seqLens[r] - (pages - 1) * bs : bs;
        for (int o = 0; o < n; ++o) keys[r][g].emplace_back(b, o);
      }
      headSeq[item] = static_cast<int>(keys[r][g].size());
    }
  }
  dHeadT.upload(headT);
  dHeadSeq.upload(headSeq);
  sp.rowFlags = nullptr;
  c.dOut.poison();
  HS_CHECK(hsSparseDecodeAttention(&sp, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto got = c.dOut.download();
  std::vector<double> ref(outElems, 0.0), row;
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < Hq; ++h) {
      refRowAttention(c, r, h, h / (Hq / Hkv), keys[r][h / (Hq / Hkv)], row);
      std::copy(row.begin(), row.end(), ref.begin() + (static_cast<size_t>(r) * Hq + h) * D);
    }
  double num = 0, den = 0;
  long nonFinite = 0;
  for (size_t i = 0; i < outElems; ++i) {
    const double g = bf16ToFloat(got[i]);
    if (!std::isfinite(g)) {
      ++nonFinite;
      continue;
    }
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  // (c) a mixed batch: only flagged rows written, at the rows tokenRow names (reversed order).
  std::vector<int> tokenRow(R);
  for (int r = 0; r < R; ++r) tokenRow[r] = R - 1 - r;
  auto dTok = toDevice(tokenRow);
  dFlags.upload(flags);
  sp.rowFlags = dFlags.ptr;
  sp.tokenRow = dTok.ptr;
  sp.onlyFlaggedRows = 1;
  // q rows must follow the rows: permute qkv accordingly.
  std::vector<uint16_t> qkvPerm(c.qkv.size());
  for (int r = 0; r < R; ++r)
    std::copy_n(c.qkv.begin() + static_cast<size_t>(r) * c.stride, c.stride,
                qkvPerm.begin() + static_cast<size_t>(tokenRow[r]) * c.stride);
  c.dQkv.upload(qkvPerm);
  c.dOut.poison(0x3c);
  HS_CHECK(hsSparseDecodeAttention(&sp, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto mixed = c.dOut.download();
  long badMixed = 0;
  const size_t rowElems = static_cast<size_t>(Hq) * D;
  for (int r = 0; r < R; ++r)
    for (size_t e = 0; e < rowElems; ++e) {
      const uint16_t v = mixed[static_cast<size_t>(tokenRow[r]) * rowElems + e];
      const uint16_t want = flags[r] ? got[static_cast<size_t>(r) * rowElems + e] : 0x3c3c;
      badMixed += v != want ? 1 : 0;
    }
  c.dQkv.upload(c.qkv);
  const bool ok = diffBits == 0 && nonFinite == 0 && rel < 1e-2 && badMixed == 0;
  std::printf("%-52s dense-equal bit diffs=%ld per-head relErr=%.2e nonFinite=%ld mixed diffs=%ld %s\n", name,
              diffBits, rel, nonFinite, badMixed, ok ? "ok" : "FAIL");
  tally.record(ok, name);
}

/**
 * Swap-in bandwidth of the fused resolver (GPU only, --bench): 32 rows at Llama-3.1-8B head
 * geometry, 127 INACTIVE pages + the tail selected per (row, kv head), empty LRUs, so every
 * selected slice (8 KiB: K and V of 16 tokens of one head) is a miss read from a 4 GiB mapped
 * pinned host pool. Median of 10 launches (CUDA events); the LRU state is reset between them.
 */
void resolveBench() {
  const int R = 32, Hkv = 8, D = 128, bs = 16, W = 8192, numHot = 256, sel = 128;
  const int numHostBlocks = 65536;  // 4 GiB of [Hkv, 2, bs, D] bf16 pages
  const int numBlocks = R * numHot + R + 16;
  Rng rng(3);
  std::vector<int> blockT(static_cast<size_t>(R) * W, -1), hostT(static_cast<size_t>(R) * W), hot(static_cast<size_t>(R) * numHot);
  std::vector<int> selPages(static_cast<size_t>(R) * Hkv * W, 0), selCount(static_cast<size_t>(R) * Hkv, sel);
  std::vector<int> seq(R, W * bs), flags(R, 1), slot(R);
  for (int r = 0; r < R; ++r) {
    slot[r] = r;
    for (int p = 0; p < W; ++p) hostT[static_cast<size_t>(r) * W + p] = rng.below(numHostBlocks);
    blockT[static_cast<size_t>(r) * W + W - 1] = R * numHot + r;  // the tail page is ACTIVE
    for (int s = 0; s < numHot; ++s) hot[static_cast<size_t>(r) * numHot + s] = r * numHot + s;
    for (int g = 0; g < Hkv; ++g) {
      std::vector<int> pick;
      for (int i = 0; i < sel - 1; ++i) pick.push_back(rng.below(W - 1));
      std::sort(pick.begin(), pick.end());
      pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
      while (static_cast<int>(pick.size()) < sel - 1) {  // top up after duplicates, keeping it sorted
        const int p = rng.below(W - 1);
        if (!std::binary_search(pick.begin(), pick.end(), p)) pick.insert(std::lower_bound(pick.begin(), pick.end(), p), p);
      }
      pick.push_back(W - 1);
      std::copy(pick.begin(), pick.end(), selPages.begin() + (static_cast<size_t>(r) * Hkv + g) * W);
    }
  }
  void* host = nullptr;
  const size_t hostBytes = static_cast<size_t>(numHostBlocks) * Hkv * 2 * bs * D * 2;
  HS_CHECK(cudaHostAlloc(&host, hostBytes, cudaHostAllocMapped));
  std::memset(host, 0x3c, hostBytes);
  void* hostDev = nullptr;
  HS_CHECK(cudaHostGetDevicePointer(&hostDev, host, 0));
  auto dSel = toDevice(selPages), dCnt = toDevice(selCount), dSeq = toDevice(seq), dFlags = toDevice(flags);
  auto dSlot = toDevice(slot), dBlockT = toDevice(blockT), dHostT = toDevice(hostT), dHot = toDevice(hot);
  const size_t lru = static_cast<size_t>(R) * Hkv * numHot;
  DeviceBuffer<int32_t> page(lru), last(lru), tick(static_cast<size_t>(R) * Hkv), held(static_cast<size_t>(R) * W), heldPages(R);
  DeviceBuffer<int32_t> out(selPages.size()), outSeq(selCount.size());
  DeviceBuffer<unsigned long long> counters(3);
  DeviceBuffer<uint16_t> cache(static_cast<size_t>(numBlocks) * 2 * bs * Hkv * D);
  HsResolveParams p{};
  p.selPages = dSel.ptr, p.selCount = dCnt.ptr, p.selStride = W, p.rowFlags = dFlags.ptr, p.seqLens = dSeq.ptr;
  p.reqSlot = dSlot.ptr, p.blockTable = dBlockT.ptr, p.hostBlockTable = dHostT.ptr, p.tableStride = W, p.numSlots = R;
  p.hotBlocks = dHot.ptr, p.numHot = numHot, p.lruPage = page.ptr, p.lruLastUse = last.ptr, p.lruTick = tick.ptr;
  p.layer = 0, p.numLayers = 1, p.heldCount = held.ptr, p.heldPages = heldPages.ptr, p.headBlockTables = out.ptr;
  p.headSeqLens = outSeq.ptr, p.counters = counters.ptr, p.kvCache = cache.ptr, p.numBlocks = numBlocks;
  p.hostKv = hostDev, p.numHostBlocks = numHostBlocks, p.numReqs = R, p.numKvHeads = Hkv, p.headDim = D, p.blockSize = bs;
  cudaEvent_t e0, e1;
  HS_CHECK(cudaEventCreate(&e0));
  HS_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 12; ++it) {
    page.poison(0xff);
    last.poison(0xff);
    HS_CHECK(cudaMemset(tick.ptr, 0, tick.bytes()));
    HS_CHECK(cudaMemset(held.ptr, 0, held.bytes()));
    HS_CHECK(cudaMemset(counters.ptr, 0, counters.bytes()));
    HS_CHECK(cudaEventRecord(e0, 0));
    HS_CHECK(hsResolve(&p, 0));
    HS_CHECK(cudaEventRecord(e1, 0));
    HS_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    HS_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 2) ms.push_back(t);
  }
  const auto c = fromDevice(counters, 3);
  std::sort(ms.begin(), ms.end());
  const double bytes = static_cast<double>(c[1]) * 2 * bs * D * 2;
  std::printf("resolver swap-in: %llu misses of %d KiB in %.3f ms (median of %zu): %.1f GB/s (hsSwapInPages measured 51.3)\n",
              c[1], 2 * bs * D * 2 / 1024, ms[ms.size() / 2], ms.size(), bytes / (ms[ms.size() / 2] * 1e-3) / 1e9);
  HS_CHECK(cudaFreeHost(host));
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  gOnly = flagValue(argc, argv, "--only");
  cudaDeviceProp prop;
  HS_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (hasFlag(argc, argv, "--bench")) {
    resolveBench();
    return 0;
  }
  Tally tally;
  digestCase(tally, 4, 2, 64, 8);
  selectCase(tally, 8, 2, 64, 16, 11);
  resolveCase(tally, 2, 64, 8, quick ? 6 : 40);
  resolveErrorCase(tally);
  mirrorCase(tally, 2, 64, 8);
  sparseAttentionCase(tally, 8, 2, 64, 16, {300, 1, 0, 777, 64}, 1024);
  if (!quick) {
    digestCase(tally, 32, 8, 128, 16);
    selectCase(tally, 32, 8, 128, 16, 12);
    selectCase(tally, 28, 4, 128, 32, 13);
    resolveCase(tally, 8, 128, 16, 60);
    mirrorCase(tally, 8, 128, 16);
    sparseAttentionCase(tally, 32, 8, 128, 16, {4000, 1, 0, 777, 2048, 16, 17, 9000}, 16384);
    sparseAttentionCase(tally, 40, 2, 128, 64, {5000, 1, 700}, 8192);
  }
  return tally.finish("hisparse_test");
}
