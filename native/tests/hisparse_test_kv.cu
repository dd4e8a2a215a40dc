// HiSparse kernel test, KV write paths (part of hisparse_test; see hisparse_test.cu):
// hsReshapeAndCacheDigest (KV rows and Quest digests, bits) and hsMirrorPages (host tier layout).
#include <numeric>

#include "hisparse_test_common.h"

namespace hs_test {

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

}  // namespace hs_test
