// Standalone test of the DSA hot-row kernels (native/kernels/hisparse.h hsRowResolve, hsRowCopy)
// against a C++ port of the CPU oracle (LruHotRowResolver + HotBufferLru, src/attention/sparse/
// dsa.ts): a scripted multi-step sequence over several requests and two indexers (the first
// shared by two layers: one plan, two copy passes), selections drifting step to step so rows
// hit, miss and are evicted. Exact checks every step: the attention view (positions, table
// columns, lengths), the miss lists, the LRU state, held pages, hits / misses / errors and every
// byte of every layer's cache. Then the error cases (an entry past the context, a row that is not
// flagged stays untouched).
// GPU: scripts/gpu/dsa_rows_check.sh (nvcc, then compute-sanitizer memcheck);
// CPU: bash native/tests/emu/run_emu.sh rows [--quick].
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../kernels/hisparse.h"
#include "test_common.h"

using namespace hs_test;

namespace {

/** The oracle's LRU of one (request, indexer): HotBufferLru keyed by token position. */
struct RefLru {
  std::vector<int> pos, last;
  std::map<int, int> where;
  int tick = 0;
  explicit RefLru(int n) : pos(n, -1), last(n, -1) {}
  int hit(int p) {
    auto it = where.find(p);
    if (it == where.end()) return -1;
    last[it->second] = tick;
    return it->second;
  }
  /** {row, evicted position} or {-1, -1} when every row was used in this round. */
  std::pair<int, int> insert(int p) {
    int best = -1;
    for (int s = 0; s < static_cast<int>(pos.size()); ++s) {
      if (last[s] >= tick) continue;
      if (best < 0 || last[s] < last[best]) best = s;
    }
    if (best < 0) return {-1, -1};
    const int ev = pos[best];
    if (ev >= 0) where.erase(ev);
    pos[best] = p;
    last[best] = tick;
    where[p] = best;
    return {best, ev};
  }
};

/** One request of the test: its page tables (ACTIVE pages have a device block) and hot blocks. */
struct Req {
  int slot, seqLen;
  std::vector<int> block, host, hot;
};

struct World {
  int bs = 4, K = 8, stride = 24, numSlots = 3, numHotBlocks = 3, numSources = 2, W = 16;
  int numBlocks = 64, numHostBlocks = 80;
  int numHot() const { return numHotBlocks * bs; }
};

/** What the oracle says for one row: view, misses, counters. */
struct RefOut {
  std::vector<int> viewTopk, viewTable, missSrc, missDst;
  int hits = 0, errors = 0;
};

/** The oracle's resolution of one row (LruHotRowResolver.resolve, the view of DsaHiSparseAttention). */
RefOut refResolve(const World& w, const Req& q, RefLru& lru, std::map<int, int>& held, const std::vector<int>& sel) {
  RefOut o;
  o.viewTopk.assign(w.K, -1);
  o.viewTable.assign(w.K, 0);
  lru.tick++;
  std::vector<int> slots(w.K, -1);
  std::vector<int> misses;
  for (int j = 0; j < w.K; ++j) {
    const int ps = sel[j];
    if (ps < 0) continue;
    if (ps >= q.seqLen) {
      o.errors++;
      continue;
    }
    const int own = q.block[ps / w.bs];
    if (own >= 0) {
      slots[j] = own * w.bs + ps % w.bs;
      continue;
    }
    const int h = lru.hit(ps);
    if (h >= 0) {
      slots[j] = q.hot[h / w.bs] * w.bs + h % w.bs;
      o.hits++;
    } else {
      misses.push_back(j);
    }
  }
  for (int j : misses) {
    const int ps = sel[j];
    auto [row, ev] = lru.insert(ps);
    if (row < 0) {
      o.errors++;
      continue;
    }
    if (ev >= 0 && --held[ev / w.bs] == 0) held.erase(ev / w.bs);
    held[ps / w.bs]++;
    slots[j] = q.hot[row / w.bs] * w.bs + row % w.bs;
    o.missSrc.push_back(q.host[ps / w.bs] * w.bs + ps % w.bs);
    o.missDst.push_back(slots[j]);
  }
  for (int j = 0; j < w.K; ++j) {
    if (slots[j] < 0) continue;
    o.viewTopk[j] = j * w.bs + slots[j] % w.bs;
    o.viewTable[j] = slots[j] / w.bs;
  }
  return o;
}

template <typename T>
DeviceBuffer<T> dev(const std::vector<T>& h) {
  DeviceBuffer<T> d(std::max<size_t>(h.size(), 1));
  if (!h.empty()) d.upload(h);
  return d;
}

template <typename T>
std::vector<T> head(const DeviceBuffer<T>& d, size_t n) {
  auto v = d.download();
  v.resize(n);
  return v;
}

/** A selection of row q: up to K ascending positions, drifting from `prev` (each kept with probability keep). */
std::vector<int> drift(Rng& rng, const World& w, const Req& q, const std::vector<int>& prev, double keep) {
  std::set<int> s;
  for (int p : prev)
    if (p >= 0 && p < q.seqLen && rng.uniform() < keep) s.insert(p);
  s.insert(q.seqLen - 1);  // the newest row (own slot)
  const int want = std::min(w.K, q.seqLen);
  while (static_cast<int>(s.size()) < want) s.insert(rng.below(q.seqLen));
  std::vector<int> out(s.begin(), s.end());
  out.resize(w.K, -1);
  return out;
}

void sequenceCase(Tally& tally, int steps) {
  World w;
  Rng rng(2026);
  const int R = 3;
  // Slots 2, 0, 1; contexts of 70, 41 and 90 tokens (pages of 4: 18, 11, 23 of 24 columns).
  std::vector<Req> reqs = {{2, 70, {}, {}, {}}, {0, 41, {}, {}, {}}, {1, 90, {}, {}, {}}};
  int nextBlock = 0, nextHost = 0;
  std::vector<int> blockTable(w.numSlots * w.stride, -1), hostTable(w.numSlots * w.stride, -1),
      hotTable(w.numSlots * w.numHotBlocks, -1);
  for (auto& q : reqs) {
    const int pages = (q.seqLen + w.bs - 1) / w.bs;
    q.block.assign(w.stride, -1);
    q.host.assign(w.stride, -1);
    for (int pg = 0; pg < pages; ++pg) {
      q.host[pg] = nextHost++;
      // About a third of the pages stay ACTIVE, the tail page always.
      if (pg == pages - 1 || rng.below(3) == 0) q.block[pg] = nextBlock++;
    }
    for (int h = 0; h < w.numHotBlocks; ++h) q.hot.push_back(nextBlock++);
    std::copy(q.block.begin(), q.block.end(), blockTable.begin() + q.slot * w.stride);
    std::copy(q.host.begin(), q.host.end(), hostTable.begin() + q.slot * w.stride);
    std::copy(q.hot.begin(), q.hot.end(), hotTable.begin() + q.slot * w.numHotBlocks);
  }
  // Three layers: 0 and 1 share indexer 0, layer 2 has indexer 1. Caches [numBlocks * bs, W], host tiers [numHostBlocks * bs, W].
  const size_t devElems = static_cast<size_t>(w.numBlocks) * w.bs * w.W;
  const size_t hostElems = static_cast<size_t>(w.numHostBlocks) * w.bs * w.W;
  std::vector<std::vector<uint16_t>> refCache(3), hostData(3);
  std::vector<DeviceBuffer<uint16_t>> cache;
  std::vector<uint16_t*> hostPinned(3, nullptr);
  std::vector<void*> hostDev(3, nullptr);
  for (int l = 0; l < 3; ++l) {
    refCache[l].resize(devElems);
    hostData[l].resize(hostElems);
    for (auto& x : refCache[l]) x = randomBf16(rng, 0.05, 1.0);
    for (auto& x : hostData[l]) x = randomBf16(rng, 0.05, 1.0);
    cache.push_back(dev(refCache[l]));
    HS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&hostPinned[l]), hostElems * 2, cudaHostAllocMapped));
    std::copy(hostData[l].begin(), hostData[l].end(), hostPinned[l]);
    HS_CHECK(cudaHostGetDevicePointer(&hostDev[l], hostPinned[l], 0));
  }
  const int numHot = w.numHot();
  auto dBlock = dev(blockTable), dHost = dev(hostTable), dHot = dev(hotTable);
  auto dLruPos = dev(std::vector<int>(w.numSlots * w.numSources * numHot, -1));
  auto dLruLast = dev(std::vector<int>(w.numSlots * w.numSources * numHot, -1));
  auto dTick = dev(std::vector<int>(w.numSlots * w.numSources, 0));
  auto dHeld = dev(std::vector<int>(w.numSlots * w.stride, 0));
  auto dHeldPages = dev(std::vector<int>(w.numSlots, 0));
  std::vector<int> reqSlot, seqLens;
  for (auto& q : reqs) reqSlot.push_back(q.slot), seqLens.push_back(q.seqLen);
  auto dReqSlot = dev(reqSlot), dSeqLens = dev(seqLens);
  DeviceBuffer<int> dTopk(R * w.K), dViewTopk(R * w.K), dViewTable(R * w.K), dViewLen(R), dMissSrc(R * w.K),
      dMissDst(R * w.K), dMissCount(R);
  DeviceBuffer<unsigned long long> dCounters(3);
  HS_CHECK(cudaMemset(dCounters.ptr, 0, 24));
  std::vector<std::vector<RefLru>> lrus(R, std::vector<RefLru>(w.numSources, RefLru(numHot)));
  std::vector<std::map<int, int>> held(R);
  std::vector<std::vector<std::vector<int>>> prev(R, std::vector<std::vector<int>>(w.numSources));
  unsigned long long refCounters[3] = {0, 0, 0};
  bool ok = true;
  for (int step = 0; step < steps && ok; ++step) {
    for (int src = 0; src < w.numSources && ok; ++src) {
      std::vector<int> topk;
      std::vector<RefOut> ref;
      for (int r = 0; r < R; ++r) {
        prev[r][src] = drift(rng, w, reqs[r], prev[r][src], 0.7);
        topk.insert(topk.end(), prev[r][src].begin(), prev[r][src].end());
        ref.push_back(refResolve(w, reqs[r], lrus[r][src], held[r], prev[r][src]));
        refCounters[0] += ref[r].hits;
        refCounters[1] += ref[r].missSrc.size();
        refCounters[2] += ref[r].errors;
      }
      dTopk.upload(topk);
      HsRowResolveParams p{};
      p.topk = dTopk.ptr, p.K = w.K, p.tokenRow = nullptr, p.rowFlags = nullptr, p.reqSlot = dReqSlot.ptr;
      p.seqLens = dSeqLens.ptr, p.blockTable = dBlock.ptr, p.hostBlockTable = dHost.ptr, p.tableStride = w.stride;
      p.numSlots = w.numSlots, p.hotBlocks = dHot.ptr, p.numHotBlocks = w.numHotBlocks, p.lruPos = dLruPos.ptr;
      p.lruLastUse = dLruLast.ptr, p.lruTick = dTick.ptr, p.source = src, p.numSources = w.numSources;
      p.heldCount = dHeld.ptr, p.heldPages = dHeldPages.ptr, p.viewTopk = dViewTopk.ptr, p.viewTable = dViewTable.ptr;
      p.viewSeqLens = dViewLen.ptr, p.missSrc = dMissSrc.ptr, p.missDst = dMissDst.ptr, p.missCount = dMissCount.ptr;
      p.counters = dCounters.ptr, p.numReqs = R, p.blockSize = w.bs, p.numBlocks = w.numBlocks;
      p.numHostBlocks = w.numHostBlocks;
      HS_CHECK(hsRowResolve(&p, nullptr));
      // One plan, a copy pass per layer of the indexer.
      for (int l = 0; l < 3; ++l) {
        if ((l < 2 ? 0 : 1) != src) continue;
        HS_CHECK(hsRowCopy(cache[l].ptr, hostDev[l], dMissSrc.ptr, dMissDst.ptr, dMissCount.ptr, nullptr, R, w.K,
                           static_cast<size_t>(w.W) * 2, w.numBlocks * w.bs, w.numHostBlocks * w.bs, nullptr));
        for (int r = 0; r < R; ++r)
          for (size_t m = 0; m < ref[r].missSrc.size(); ++m)
            std::copy_n(hostData[l].begin() + static_cast<size_t>(ref[r].missSrc[m]) * w.W, w.W,
                        refCache[l].begin() + static_cast<size_t>(ref[r].missDst[m]) * w.W);
      }
      HS_CHECK(cudaDeviceSynchronize());
      const auto vt = dViewTopk.download(), vb = dViewTable.download(), vl = dViewLen.download();
      const auto ms = dMissSrc.download(), md = dMissDst.download(), mc = dMissCount.download();
      for (int r = 0; r < R && ok; ++r) {
        const auto& o = ref[r];
        const int n = static_cast<int>(o.missSrc.size());
        ok = ok && std::equal(o.viewTopk.begin(), o.viewTopk.end(), vt.begin() + r * w.K);
        ok = ok && std::equal(o.viewTable.begin(), o.viewTable.end(), vb.begin() + r * w.K);
        ok = ok && vl[r] == w.K * w.bs && mc[r] == n;
        ok = ok && std::equal(o.missSrc.begin(), o.missSrc.end(), ms.begin() + r * w.K);
        ok = ok && std::equal(o.missDst.begin(), o.missDst.end(), md.begin() + r * w.K);
        if (!ok) std::printf("  step %d indexer %d row %d: view or misses differ from the oracle\n", step, src, r);
      }
      // LRU state and held pages.
      const auto pos = dLruPos.download(), last = dLruLast.download(), tick = dTick.download();
      const auto hc = dHeld.download(), hp = dHeldPages.download();
      for (int r = 0; r < R && ok; ++r) {
        const int s = reqs[r].slot;
        for (int k = 0; k < w.numSources; ++k) {
          const size_t base = (static_cast<size_t>(s) * w.numSources + k) * numHot;
          ok = ok && std::equal(lrus[r][k].pos.begin(), lrus[r][k].pos.end(), pos.begin() + base);
          ok = ok && std::equal(lrus[r][k].last.begin(), lrus[r][k].last.end(), last.begin() + base);
          ok = ok && tick[s * w.numSources + k] == lrus[r][k].tick;
        }
        ok = ok && hp[s] == static_cast<int>(held[r].size());
        for (int pg = 0; pg < w.stride && ok; ++pg) {
          auto it = held[r].find(pg);
          ok = hc[s * w.stride + pg] == (it == held[r].end() ? 0 : it->second);
        }
        if (!ok) std::printf("  step %d: LRU state or held pages of row %d differ\n", step, r);
      }
    }
  }
  for (int l = 0; l < 3 && ok; ++l) ok = cache[l].download() == refCache[l];
  const auto c = dCounters.download();
  ok = ok && c[0] == refCounters[0] && c[1] == refCounters[1] && c[2] == refCounters[2];
  std::printf("rows sequence: %d steps, hits %llu misses %llu errors %llu\n", steps, c[0], c[1], c[2]);
  // The drift must have exercised hits, misses and evictions (more misses than hot rows per row).
  ok = ok && refCounters[0] > 0 && refCounters[1] > static_cast<unsigned long long>(R * numHot) && refCounters[2] == 0;
  for (auto* h : hostPinned) cudaFreeHost(h);
  tally.record(ok, "hsRowResolve + hsRowCopy vs LruHotRowResolver, scripted sequence");
}

/** Errors: an entry past the context is counted and left out; an unflagged row is not touched. */
void errorCase(Tally& tally) {
  World w;
  w.numSlots = 1, w.stride = 4, w.numHotBlocks = 1, w.numSources = 1, w.K = 4;
  const int numHot = w.numHot();
  // One request, 10 tokens: pages 0, 1 INACTIVE (host 5, 6), tail page 2 in block 9; hot block 3.
  auto dBlock = dev(std::vector<int>{-1, -1, 9, -1}), dHost = dev(std::vector<int>{5, 6, 7, -1});
  auto dHot = dev(std::vector<int>{3});
  auto dLruPos = dev(std::vector<int>(numHot, -1)), dLruLast = dev(std::vector<int>(numHot, -1));
  auto dTick = dev(std::vector<int>{0}), dHeld = dev(std::vector<int>(4, 0)), dHeldPages = dev(std::vector<int>{0});
  // Row 0 selects 1, 9, 12 (12 >= 10: an error); row 1 (same slot, not flagged) must stay untouched.
  auto dTopk = dev(std::vector<int>{1, 9, 12, -1, 0, 1, 2, 3});
  auto dFlags = dev(std::vector<int>{1, 0}), dSlot = dev(std::vector<int>{0, 0}), dLen = dev(std::vector<int>{10, 10});
  DeviceBuffer<int> vt(8), vb(8), vl(2), ms(8), md(8), mc(2);
  vt.poison(0x7f), vb.poison(0x7f), vl.poison(0x7f), mc.poison(0x7f);
  DeviceBuffer<unsigned long long> cnt(3);
  HS_CHECK(cudaMemset(cnt.ptr, 0, 24));
  HsRowResolveParams p{};
  p.topk = dTopk.ptr, p.K = 4, p.rowFlags = dFlags.ptr, p.reqSlot = dSlot.ptr, p.seqLens = dLen.ptr;
  p.blockTable = dBlock.ptr, p.hostBlockTable = dHost.ptr, p.tableStride = 4, p.numSlots = 1, p.hotBlocks = dHot.ptr;
  p.numHotBlocks = 1, p.lruPos = dLruPos.ptr, p.lruLastUse = dLruLast.ptr, p.lruTick = dTick.ptr, p.source = 0;
  p.numSources = 1, p.heldCount = dHeld.ptr, p.heldPages = dHeldPages.ptr, p.viewTopk = vt.ptr, p.viewTable = vb.ptr;
  p.viewSeqLens = vl.ptr, p.missSrc = ms.ptr, p.missDst = md.ptr, p.missCount = mc.ptr, p.counters = cnt.ptr;
  p.numReqs = 2, p.blockSize = 4, p.numBlocks = 16, p.numHostBlocks = 8;
  HS_CHECK(hsRowResolve(&p, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto t = vt.download(), b = vb.download(), m = mc.download();
  const auto c = cnt.download();
  const int poison = 0x7f7f7f7f;
  // Entry 0: position 1 misses into hot row 0 (block 3 offset 0): view 0 * 4 + 0, column block 3.
  // Entry 1: position 9, tail page block 9 offset 1: view 4 + 1. Entry 2: the error, no entry.
  const bool ok = t[0] == 0 && b[0] == 3 && t[1] == 5 && b[1] == 9 && t[2] == -1 && t[3] == -1 && m[0] == 1 &&
                  c[0] == 0 && c[1] == 1 && c[2] == 1 && t[4] == poison && b[7] == poison && m[1] == poison;
  tally.record(ok, "hsRowResolve errors: entry past the context, unflagged row untouched");
}


/**
 * hsRowViewMerge on a mixed step: row 0 a 3-token prefill chunk (tokens 0-2, not flagged), row 1
 * a resolved sparse decode (token 3), row 2 a flagged row without a slot (padding, token 4):
 * only row 1 takes the view; the others keep their tables (zero-padded to outStride), lengths
 * and top-k rows.
 */
void mergeCase(Tally& tally) {
  const int R = 3, T = 5, K = 4, W = 2, outStride = 4;
  std::vector<int> topk(T * K);
  for (int i = 0; i < T * K; ++i) topk[i] = 100 + i;
  const std::vector<int> tables{7, 8, 9, 10, 11, 12}, lens{3, 20, 1};
  const std::vector<int> flags{0, 1, 1}, slots{0, 2, -1}, tokenRow{2, 3, 4};
  std::vector<int> vTopk(R * K), vTable(R * K);
  for (int i = 0; i < R * K; ++i) vTopk[i] = 500 + i, vTable[i] = 900 + i;
  const std::vector<int> vLens{-5, 16, -6};
  auto dTopk = dev(topk), dTables = dev(tables), dLens = dev(lens), dFlags = dev(flags), dSlots = dev(slots);
  auto dTok = dev(tokenRow), dVt = dev(vTopk), dVb = dev(vTable), dVl = dev(vLens);
  DeviceBuffer<int> oTopk(T * K), oTables(R * outStride), oLens(R);
  oTopk.poison(0x7f), oTables.poison(0x7f), oLens.poison(0x7f);
  HsRowViewMergeParams p{};
  p.topk = dTopk.ptr, p.blockTables = dTables.ptr, p.seqLens = dLens.ptr, p.rowFlags = dFlags.ptr;
  p.reqSlot = dSlots.ptr, p.tokenRow = dTok.ptr, p.viewTopk = dVt.ptr, p.viewTable = dVb.ptr, p.viewSeqLens = dVl.ptr;
  p.outTopk = oTopk.ptr, p.outTables = oTables.ptr, p.outSeqLens = oLens.ptr;
  p.numReqs = R, p.numTokens = T, p.K = K, p.tableStride = W, p.outStride = outStride, p.numSlots = 3;
  HS_CHECK(hsRowViewMerge(&p, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  std::vector<int> wantTopk = topk;
  for (int j = 0; j < K; ++j) wantTopk[3 * K + j] = vTopk[1 * K + j];
  const std::vector<int> wantTables{7, 8, 0, 0, 904, 905, 906, 907, 11, 12, 0, 0}, wantLens{3, 16, 1};
  const bool ok = oTopk.download() == wantTopk && oTables.download() == wantTables && oLens.download() == wantLens;
  tally.record(ok, "hsRowViewMerge: a resolved row takes its view, prefill and padding rows keep theirs");
}


/**
 * hsRowSelectionOverlap (benchmarks only): p = 1 keeps the whole previous selection (2, 5, 9, 13)
 * and fills up with the model's picks not kept (0, 1, 3, 4), ascending; the next step with p = 0
 * takes the model's; a context that did not grow by one token (a new request) takes the model's
 * whatever p; the other token's row is copied.
 */
void overlapCase(Tally& tally) {
  const int K = 8, T = 2;
  std::vector<int> topk{50, 51, 52, 53, -1, -1, -1, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<int> prev(2 * 2 * K, -1);
  const int lane = 1 * 2 + 1;  // slot 1, source 1
  for (int j = 0; j < 4; ++j) prev[lane * K + j] = std::vector<int>{2, 5, 9, 13}[j];
  std::vector<int> prevLen{-1, -1, -1, 19};
  auto dTopk = dev(topk), dPrev = dev(prev), dPrevLen = dev(prevLen);
  auto dSlot = dev(std::vector<int>{1}), dTok = dev(std::vector<int>{1}), dFlags = dev(std::vector<int>{1});
  DeviceBuffer<int> out(T * K);
  HsRowSelectionOverlapParams p{};
  p.topk = dTopk.ptr, p.out = out.ptr, p.K = K, p.rowFlags = dFlags.ptr, p.reqSlot = dSlot.ptr, p.tokenRow = dTok.ptr;
  p.prevSelection = dPrev.ptr, p.prevSeqLen = dPrevLen.ptr, p.source = 1, p.numSources = 2, p.numSlots = 2;
  p.numReqs = 1, p.numTokens = T;
  auto runWith = [&](int seqLen, float prob) {
    auto dLen = dev(std::vector<int>{seqLen});
    p.seqLens = dLen.ptr, p.p = prob;
    HS_CHECK(hsRowSelectionOverlap(&p, nullptr));
    HS_CHECK(cudaDeviceSynchronize());
    return out.download();
  };
  const std::vector<int> row0{50, 51, 52, 53, -1, -1, -1, -1};
  auto a = runWith(20, 1.0f);
  bool ok = std::vector<int>(a.begin(), a.begin() + K) == row0 &&
            std::vector<int>(a.begin() + K, a.end()) == std::vector<int>{0, 1, 2, 3, 4, 5, 9, 13};
  auto b = runWith(21, 0.0f);
  ok = ok && std::vector<int>(b.begin() + K, b.end()) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
  auto c = runWith(40, 1.0f);  // not 22: a new request in the slot
  ok = ok && std::vector<int>(c.begin() + K, c.end()) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7};
  tally.record(ok, "hsRowSelectionOverlap: p = 1 keeps the previous rows, p = 0 and a new request take the model's");
}

/**
 * --bench: hsRowCopy's swap-in bandwidth at GLM-5's row (576 bf16 = 1,152 B), every entry of 64
 * rows x index_topk 2048 a miss from distinct random host rows (GPU only; figures, no checks).
 */
void copyBench() {
  const int R = 64, K = 2048, W = 576, hostRows = R * K * 2, devRows = R * K;
  const size_t rowBytes = static_cast<size_t>(W) * 2;
  Rng rng(7);
  std::vector<int> src(R * K), dst(R * K), count(R, K);
  for (int i = 0; i < R * K; ++i) src[i] = rng.below(hostRows), dst[i] = i;
  auto dSrc = dev(src), dDst = dev(dst), dCount = dev(count);
  DeviceBuffer<uint16_t> cache(static_cast<size_t>(devRows) * W);
  void* host = nullptr;
  void* hostDev = nullptr;
  HS_CHECK(cudaHostAlloc(&host, static_cast<size_t>(hostRows) * rowBytes, cudaHostAllocMapped));
  std::memset(host, 1, static_cast<size_t>(hostRows) * rowBytes);
  HS_CHECK(cudaHostGetDevicePointer(&hostDev, host, 0));
  cudaEvent_t a, b;
  HS_CHECK(cudaEventCreate(&a));
  HS_CHECK(cudaEventCreate(&b));
  const int iters = 20;
  HS_CHECK(hsRowCopy(cache.ptr, hostDev, dSrc.ptr, dDst.ptr, dCount.ptr, nullptr, R, K, rowBytes, devRows, hostRows, nullptr));
  HS_CHECK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i)
    HS_CHECK(hsRowCopy(cache.ptr, hostDev, dSrc.ptr, dDst.ptr, dCount.ptr, nullptr, R, K, rowBytes, devRows, hostRows, nullptr));
  HS_CHECK(cudaEventRecord(b));
  HS_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  HS_CHECK(cudaEventElapsedTime(&ms, a, b));
  const double bytes = static_cast<double>(iters) * R * K * rowBytes;
  std::printf("hsRowCopy: %d rows x %d misses x %zu B: %.3f ms per pass, %.1f GB/s (host -> device, 16-byte loads)\n", R,
              K, rowBytes, ms / iters, bytes / (ms * 1e-3) / 1e9);
  cudaFreeHost(host);
}

}  // namespace

int main(int argc, char** argv) {
  if (hasFlag(argc, argv, "--bench")) {
    copyBench();
    return 0;
  }
  const bool quick = hasFlag(argc, argv, "--quick");
  Tally tally;
  sequenceCase(tally, quick ? 12 : 200);
  errorCase(tally);
  mergeCase(tally);
  overlapCase(tally);
  return tally.finish("hisparse_rows_test");
}
