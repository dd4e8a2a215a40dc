// HiSparse kernel test, KV write paths (part of hisparse_test; see hisparse_test.cu):
// hsReshapeAndCacheDigest (KV rows and Quest digests, bits; bf16 and fp8 digests), the directed
// e4m3 rounding of fp8 digests (fp8.cuh, exhaustive over bf16 inputs) and hsMirrorPages (host tier layout).
#include <numeric>

#include <cstring>

#include "../kernels/fp8.cuh"
#include "hisparse_test_common.h"

namespace hs_test {

// ---- 1. reshape_and_cache + digests ---------------------------------------------------------------

namespace {

/**
 * Keys for the fp8 digest case: `v` with every 5th value moved to the e4m3 subnormal range
 * (|x| < 2^-6) and every 7th beyond saturation (|x| in [300, 600]), signs kept.
 */
void stretchKeys(Rng& rng, std::vector<uint16_t>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const float sign = (v[i] & 0x8000) ? -1.f : 1.f;
    if (i % 5 == 3) v[i] = floatToBf16(sign * static_cast<float>(0.0005 + 0.012 * rng.uniform()));
    if (i % 7 == 5) v[i] = floatToBf16(sign * static_cast<float>(300 + 300 * rng.uniform()));
  }
}

/** Stored fp8 digest code c holds ref value v: same value, and +0 as code 0x00 (no -0, no NaN). */
bool codeHolds(uint8_t c, float v) { return c != 0x80 && (c & 0x7f) != 0x7f && hs_fp8::e4m3ToFloat(c) == v; }

}  // namespace

void digestCase(Tally& tally, int Hq, int Hkv, int D, int bs, int dt, bool fp8) {
  if (dt <= 0) dt = bs;
  char name[96];
  std::snprintf(name, sizeof name, "digest Hq%d Hkv%d D%d bs%d dt%d %s", Hq, Hkv, D, bs, dt, fp8 ? "fp8" : "bf16");
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
  auto qkv = randomBf16Vec(rng, static_cast<size_t>(T) * stride);
  if (fp8) stretchKeys(rng, qkv);
  // [numHostBlocks, bs / dt, 2, Hkv, D]: one digest per sub-page of dt tokens; fp8: random codes
  // of those values (rounded to nearest: any grid value will do as the stored digest).
  const auto dg0 = randomBf16Vec(rng, static_cast<size_t>(numHostBlocks) * (bs / dt) * 2 * Hkv * D, false);
  std::vector<uint8_t> dg0Fp8(dg0.size());
  for (size_t i = 0; i < dg0.size(); ++i) dg0Fp8[i] = hs_fp8::floatToE4m3(bf16ToFloat(dg0[i]));
  const size_t cacheElems = static_cast<size_t>(numBlocks) * 2 * bs * Hkv * D;
  std::vector<uint16_t> cache0(cacheElems, kBf16NaN);
  auto dQkv = toDevice(qkv);
  auto dCache = toDevice(cache0);
  auto dDg = toDevice(dg0);
  auto dDg8 = toDevice(dg0Fp8);
  auto dSlots = toDevice(slots);
  auto dHost = toDevice(hostSlots);
  HS_CHECK(hsReshapeAndCacheDigest(dQkv.ptr, dCache.ptr, dSlots.ptr, fp8 ? static_cast<void*>(dDg8.ptr) : dDg.ptr,
                                   dHost.ptr, T, stride, Hq, Hkv, D, bs, dt, numBlocks, numHostBlocks,
                                   fp8 ? HS_DIGEST_FP8 : HS_DIGEST_BF16, 0));
  HS_CHECK(cudaDeviceSynchronize());
  std::vector<float> ref(dg0.size());
  for (size_t i = 0; i < ref.size(); ++i) ref[i] = fp8 ? hs_fp8::e4m3ToFloat(dg0Fp8[i]) : bf16ToFloat(dg0[i]);
  refUpdateDigests(ref, qkv, stride, Hq, Hkv, D, dt, hostSlots, fp8);  // digest index = host slot / dt
  long bad = 0;
  if (fp8) {
    const auto dg = fromDevice(dDg8, dg0.size());
    for (size_t i = 0; i < ref.size(); ++i) bad += codeHolds(dg[i], ref[i]) ? 0 : 1;
  } else {
    const auto dg = fromDevice(dDg, dg0.size());
    for (size_t i = 0; i < ref.size(); ++i) bad += dg[i] != floatToBf16(ref[i]) ? 1 : 0;
  }
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

// ---- 1b. directed e4m3 rounding (fp8 digests) ------------------------------------------------------

void directedRoundingCase(Tally& tally) {
  const char* name = "fp8 directed rounding (every bf16 value, down and up)";
  if (!selected(name)) return;
  long bad = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = bf16ToFloat(static_cast<uint16_t>(b));
    if (x != x) continue;
    for (const bool up : {false, true}) {
      const uint8_t c = hs_fp8::floatToE4m3Directed(x, up);
      if (!codeHolds(c, refE4m3Directed(x, up)) && bad++ < 4)
        std::printf("  %s(%g) = code 0x%02x, want %g\n", up ? "up" : "down", x, c, refE4m3Directed(x, up));
    }
  }
  // Pinned from src/backends/fp8.ts (test/unit/backends/fp8_directed.test.ts): the same codes.
  const struct { float x; uint8_t down, up; } pins[] = {
      {0.1f, 0x1c, 0x1d}, {0.3f, 0x29, 0x2a}, {-2.f, 0xc0, 0xc0}, {1000.f, 0x7e, 0x7e},
      {-0.f, 0x00, 0x00}, {-0.0001f, 0x81, 0x00}, {1.9f, 0x3f, 0x40}, {7.5f / 512, 0x07, 0x08},
      {-600.f, 0xfe, 0xfe}, {0.0009765625f, 0x00, 0x01}};
  for (const auto& p : pins)
    bad += hs_fp8::floatToE4m3Down(p.x) == p.down && hs_fp8::floatToE4m3Up(p.x) == p.up ? 0 : 1;
  std::printf("%-52s mismatches=%ld %s\n", name, bad, bad == 0 ? "ok" : "FAIL");
  tally.record(bad == 0, name);
}

// ---- 4. mirror and load ------------------------------------------------------------------------------

namespace {

/** What an fp8 host tier holds for bf16 value b: e4m3(b / scale) (hisparse_copy.cuh). */
uint8_t quantRef(uint16_t b, float scale) { return hs_fp8::floatToE4m3(bf16ToFloat(b) * (1.f / scale)); }
/** What the hot block reads back: bf16(e4m3 * scale). */
uint16_t dequantRef(uint8_t c, float scale) { return floatToBf16(hs_fp8::e4m3ToFloat(c) * scale); }

}  // namespace

/**
 * hsMirrorPages into the head-major host layout (bf16 bits, or e4m3 codes with per-tensor K / V
 * scales when fp8), then hsLoadPages back into a cleared cache (the bits, or the dequantised
 * values).
 */
void mirrorCase(Tally& tally, int Hkv, int D, int bs, bool fp8) {
  char name[96];
  std::snprintf(name, sizeof name, "mirror+load Hkv%d D%d bs%d %s", Hkv, D, bs, fp8 ? "fp8 host" : "bf16 host");
  if (!selected(name)) return;
  Rng rng(5 + D);
  const int numLayers = 2, numBlocks = 10, numHostBlocks = 12;
  const int dtype = fp8 ? HS_HOST_KV_FP8 : HS_HOST_KV_BF16;
  const float kScale = fp8 ? 0.5f : 1.f, vScale = fp8 ? 1.5f : 1.f;
  const size_t elemBytes = fp8 ? 1 : 2;
  const size_t page = static_cast<size_t>(2) * bs * Hkv * D;
  std::vector<DeviceBuffer<uint16_t>> caches;
  std::vector<std::vector<uint16_t>> cacheData;
  std::vector<unsigned char*> hosts(numLayers);
  std::vector<uint64_t> cachePtrs, hostPtrs;
  for (int l = 0; l < numLayers; ++l) {
    cacheData.push_back(randomBf16Vec(rng, numBlocks * page, false));
    caches.push_back(toDevice(cacheData.back()));
    HS_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&hosts[l]), numHostBlocks * page * elemBytes, cudaHostAllocMapped));
    std::fill(hosts[l], hosts[l] + numHostBlocks * page * elemBytes, static_cast<unsigned char>(0x7f));
    void* dev = nullptr;
    HS_CHECK(cudaHostGetDevicePointer(&dev, hosts[l], 0));
    cachePtrs.push_back(reinterpret_cast<uint64_t>(caches[l].ptr));
    hostPtrs.push_back(reinterpret_cast<uint64_t>(dev));
  }
  const std::vector<int> blocks = {3, 7, 0, -1, 9}, hostBlocks = {11, 2, 5, 4, 40};
  auto dCaches = toDevice(cachePtrs), dHosts = toDevice(hostPtrs);
  auto dB = toDevice(blocks), dH = toDevice(hostBlocks);
  const int n = static_cast<int>(blocks.size());
  HS_CHECK(hsMirrorPages(dCaches.ptr, dHosts.ptr, dB.ptr, dH.ptr, n, numLayers, Hkv, D, bs, numBlocks, numHostBlocks,
                         dtype, kScale, vScale, 0));
  HS_CHECK(cudaDeviceSynchronize());
  for (int l = 0; l < numLayers; ++l)  // the load writes back into a cleared cache
    HS_CHECK(cudaMemset(caches[l].ptr, 0xff, numBlocks * page * 2));
  HS_CHECK(hsLoadPages(dCaches.ptr, dHosts.ptr, dB.ptr, dH.ptr, n, numLayers, Hkv, D, bs, numBlocks, numHostBlocks,
                       dtype, kScale, vScale, 0));
  HS_CHECK(cudaDeviceSynchronize());
  long bad = 0, badLoad = 0;
  for (int l = 0; l < numLayers; ++l) {
    std::vector<unsigned char> want(numHostBlocks * page * elemBytes, 0x7f);
    std::vector<uint16_t> wantCache(numBlocks * page, 0xffff);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i] < 0 || hostBlocks[i] >= numHostBlocks) continue;
      for (int g = 0; g < Hkv; ++g)
        for (int row = 0; row < 2 * bs; ++row)
          for (int d = 0; d < D; ++d) {
            const size_t di = blocks[i] * page + (static_cast<size_t>(row) * Hkv + g) * D + d;
            const size_t hi = hostBlocks[i] * page + (static_cast<size_t>(g) * 2 * bs + row) * D + d;
            const uint16_t v = cacheData[l][di];
            if (fp8) {
              const float scale = row < bs ? kScale : vScale;
              want[hi] = quantRef(v, scale);
              wantCache[di] = dequantRef(want[hi], scale);
            } else {
              std::memcpy(&want[hi * 2], &v, 2);
              wantCache[di] = v;
            }
          }
    }
    for (size_t i = 0; i < want.size(); ++i) bad += hosts[l][i] != want[i] ? 1 : 0;
    const auto got = fromDevice(caches[l], numBlocks * page);
    for (size_t i = 0; i < got.size(); ++i) badLoad += got[i] != wantCache[i] ? 1 : 0;
    HS_CHECK(cudaFreeHost(hosts[l]));
  }
  const bool ok = bad == 0 && badLoad == 0;
  std::printf("%-52s host mismatches=%ld load mismatches=%ld %s\n", name, bad, badLoad, ok ? "ok" : "FAIL");
  tally.record(ok, name);
}

}  // namespace hs_test
