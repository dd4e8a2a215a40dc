// C++ ports of the CPU oracles of the HiSparse kernels, line for line, for the standalone kernel
// tests (hisparse_test.cu): QuestSelector.updateDigests / select (src/attention/sparse/quest.ts)
// and HotBufferLru / LruHotBufferResolver.resolve (src/attention/sparse/hot_buffer.ts). Digests
// are f32 here as in the oracle; the kernels' bf16 digests must hold the same values, their fp8
// digests the codes of the same values (on the e4m3 grid, rounded outward by refE4m3Directed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#include "../kernels/fp8.cuh"
#include "test_common.h"

namespace hs_test {

/**
 * The e4m3 value next to x on the grid, below (up = false) or above it, by brute force over the
 * codes (the spec of src/backends/fp8.ts floatToE4m3Down / Up, independent of fp8.cuh's bit
 * arithmetic): saturating at +-448; a zero result is +0; NaN stays NaN.
 */
inline float refE4m3Directed(float x, bool up) {
  if (x != x) return x;
  if (x >= 448.f) return 448.f;
  if (x <= -448.f) return -448.f;
  float best = up ? 448.f : -448.f;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float v = hs_fp8::e4m3ToFloat(static_cast<uint8_t>(c));
    if (up ? (v >= x && v < best) : (v <= x && v > best)) best = v;
  }
  return best == 0.f ? 0.f : best;  // +0 for both zeros
}

/**
 * QuestSelector.updateDigests for one layer: digests f32 [numHostBlocks, 2, Hkv, D] (bs: tokens
 * per digest); fp8: the min rounded down and the max up after every key, as quest.ts does.
 */
inline void refUpdateDigests(std::vector<float>& dg, const std::vector<uint16_t>& qkv, int rowStride, int Hq,
                             int Hkv, int D, int bs, const std::vector<int>& hostSlots, bool fp8 = false) {
  const auto down = [fp8](float v) { return fp8 ? refE4m3Directed(v, false) : v; };
  const auto up = [fp8](float v) { return fp8 ? refE4m3Directed(v, true) : v; };
  const int kvDim = Hkv * D;
  for (size_t t = 0; t < hostSlots.size(); ++t) {
    const int slot = hostSlots[t];
    if (slot < 0) continue;
    const size_t mn = static_cast<size_t>(slot / bs) * 2 * kvDim;
    const size_t mx = mn + kvDim;
    const size_t k = t * rowStride + static_cast<size_t>(Hq) * D;
    if (slot % bs == 0) {
      for (int i = 0; i < kvDim; ++i) {
        dg[mn + i] = down(bf16ToFloat(qkv[k + i]));
        dg[mx + i] = up(bf16ToFloat(qkv[k + i]));
      }
      continue;
    }
    for (int i = 0; i < kvDim; ++i) {
      const float v = bf16ToFloat(qkv[k + i]);
      if (v < dg[mn + i]) dg[mn + i] = down(v);
      if (v > dg[mx + i]) dg[mx + i] = up(v);
    }
  }
}

/** Settings of one selection (QuestSelectorConfig in pages; S sub-page digests per page). */
struct RefSelectConfig {
  int Hq, Hkv, D, bs, budgetPages, sinkPages, windowPages;
  int S = 1;
};

/** The group's queries of kv head g as f32 [G, D] (q: the request's query row, bf16 bits, q heads first). */
inline std::vector<float> refGroupQuery(const RefSelectConfig& c, const uint16_t* q, int g) {
  const int G = c.Hq / c.Hkv;
  std::vector<float> qg(static_cast<size_t>(G) * c.D);
  for (int h = 0; h < G; ++h)
    for (int i = 0; i < c.D; ++i)
      qg[static_cast<size_t>(h) * c.D + i] = bf16ToFloat(q[static_cast<size_t>(g * G + h) * c.D + i]);
  return qg;
}

/**
 * QuestSelector's score of one page (host block hb, kv head g): the largest quest.ts questScore
 * over its S sub-page digests ([hb, S, 2, Hkv, D]) and the group's heads, NaN as -inf.
 */
inline double refPageScore(const RefSelectConfig& c, const std::vector<float>& dg, const std::vector<float>& qg,
                           int hb, int g) {
  const int G = c.Hq / c.Hkv;
  int L = 1;  // quest.ts questScoreLanes
  while (L * 8 < c.D) L *= 2;
  std::vector<float> lane(L);
  double best = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < c.S; ++j)
    for (int h = 0; h < G; ++h) {
      const size_t base = (static_cast<size_t>(hb) * c.S + j) * 2 * c.Hkv * c.D;
      const size_t mn = base + static_cast<size_t>(g) * c.D;
      const size_t mx = base + static_cast<size_t>(c.Hkv + g) * c.D;  // quest.ts questScore: f32 lanes of 8 dims, then a butterfly
      for (int l = 0; l < L; ++l) {
        float s = 0.f;
        for (int i = 8 * l; i < std::min(8 * l + 8, c.D); ++i) {
          const float v = qg[static_cast<size_t>(h) * c.D + i];
          const float qPos = v > 0 ? v : 0.f;
          const float qNeg = v > 0 ? 0.f : v;
          s = s + qPos * dg[mx + i];  // ISO C++ (-std=c++20): no contraction, each op rounded
          s = s + qNeg * dg[mn + i];
        }
        lane[l] = s;
      }
      for (int o = L / 2; o >= 1; o /= 2)
        for (int l = 0; l < L; ++l)
          if ((l & o) == 0) lane[l] = lane[l] + lane[l | o];
      double v = lane[0];
      if (v != v) v = -std::numeric_limits<double>::infinity();
      if (v > best) best = v;
    }
  return best;
}

/**
 * QuestSelector.selectOne: the pages of one request and kv head g, ascending.
 * q: the request's query row (bf16 bits, q heads first); hostRow / pinned: the request's pages.
 */
inline std::vector<int> refSelectOne(const RefSelectConfig& c, const std::vector<float>& dg, const uint16_t* q,
                                     const int* hostRow, const int* pinned, int numTokens, int g) {
  const int numPages = (numTokens + c.bs - 1) / c.bs;
  std::vector<int> all(numPages);
  for (int p = 0; p < numPages; ++p) all[p] = p;
  if (numPages <= c.budgetPages) return all;
  const int windowStart = numPages - c.windowPages;
  std::vector<uint8_t> isForced(numPages, 0);
  int numForced = 0;
  for (int p = 0; p < numPages; ++p)
    if (p < c.sinkPages || p >= windowStart || (pinned != nullptr && pinned[p] != 0)) {
      isForced[p] = 1;
      ++numForced;
    }
  const int k = c.budgetPages - numForced;
  if (k > 0) {
    const std::vector<float> qg = refGroupQuery(c, q, g);
    std::vector<std::pair<double, int>> scored;
    for (int p = 0; p < numPages; ++p)
      if (!isForced[p]) scored.emplace_back(refPageScore(c, dg, qg, hostRow[p], g), p);
    std::stable_sort(scored.begin(), scored.end(), [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (int i = 0; i < k; ++i) isForced[scored[i].second] = 1;
  }
  std::vector<int> out;
  for (int p = 0; p < numPages; ++p)
    if (isForced[p]) out.push_back(p);
  return out;
}

/** HotBufferLru: one (request, layer, kv head). */
struct RefLru {
  std::vector<int> slotPage, lastUse;
  std::map<int, int> pageToSlot;
  int tick = 0;
  explicit RefLru(int n) : slotPage(n, -1), lastUse(n, -1) {}
  void beginRound() { ++tick; }
  int hit(int page) {
    auto it = pageToSlot.find(page);
    if (it == pageToSlot.end()) return -1;
    lastUse[it->second] = tick;
    return it->second;
  }
  /** Returns {slot, evicted}; throws when every slot was used in this round. */
  std::pair<int, int> insert(int page) {
    int best = -1;
    for (int s = 0; s < static_cast<int>(slotPage.size()); ++s) {
      if (lastUse[s] >= tick) continue;
      if (best < 0 || lastUse[s] < lastUse[best]) best = s;
    }
    if (best < 0) throw std::runtime_error("hot buffer full");
    const int evicted = slotPage[best];
    if (evicted != -1) pageToSlot.erase(evicted);
    slotPage[best] = page;
    lastUse[best] = tick;
    pageToSlot[page] = best;
    return {best, evicted};
  }
};

/** One copy the resolver makes: host block `hostBlock`, kv head g -> device block `block`. */
struct RefCopy {
  int hostBlock, g, block;
};

/** Result of resolving one (request, kv head). */
struct RefResolved {
  std::vector<int> blocks;
  int seqLen = 0;
  int hits = 0;
  int misses = 0;
  std::vector<RefCopy> copies;
};

/**
 * LruHotBufferResolver.resolve for one (request, layer, kv head): own block, hit, or miss into
 * the LRU victim. held: page -> (layer, head) slots holding it, for this request.
 */
inline RefResolved refResolveOne(RefLru& lru, const std::vector<int>& sel, const int* blockRow, const int* hostRow,
                                 const int* hot, int numTokens, int bs, int g, std::map<int, int>& held) {
  RefResolved r;
  const int numPages = (numTokens + bs - 1) / bs;
  if (sel.empty() || sel.back() != numPages - 1) throw std::runtime_error("selection lacks its tail page");
  lru.beginRound();
  r.blocks.assign(sel.size(), -1);
  std::vector<int> misses;
  for (size_t j = 0; j < sel.size(); ++j) {
    const int page = sel[j];
    const int own = blockRow[page];
    if (own >= 0) {
      r.blocks[j] = own;
    } else {
      const int slot = lru.hit(page);
      if (slot < 0) {
        misses.push_back(static_cast<int>(j));
      } else {
        r.blocks[j] = hot[slot];
        ++r.hits;
      }
    }
  }
  for (int j : misses) {
    const int page = sel[j];
    const auto [slot, evicted] = lru.insert(page);
    if (evicted != -1 && --held[evicted] == 0) held.erase(evicted);
    ++held[page];
    r.blocks[j] = hot[slot];
    r.copies.push_back({hostRow[page], g, hot[slot]});
    ++r.misses;
  }
  r.seqLen = static_cast<int>(sel.size() - 1) * bs + (numTokens - (numPages - 1) * bs);
  return r;
}

}  // namespace hs_test
