// fp8 (e4m3) KV cache cases of attention_test (`--kv-cache-dtype fp8`, HsPagedAttentionParams.kvCacheFp8):
// 1. hsReshapeAndCacheFp8 stores exactly fp8.cuh floatToE4m3 of each bf16 K/V element (the CPU
//    oracle's rounding, src/backends/fp8.ts) at the slot's K and V rows, and skips PAD slots;
// 2. attention over an fp8 cache equals, bit for bit, attention over a bf16 cache holding the
//    dequantised values (e4m3 -> bf16 is exact at scale 1), for decode and prefill, and stays within
//    the usual tolerance of the double reference computed on those values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../kernels/fp8.cuh"
#include "../kernels/kernels.h"
#include "paged_case.h"

namespace hs_test {

/** Whether a case name passes attention_test's --only filter (null: every case). */
inline bool fp8Selected(const std::string& name, const char* only) {
  return only == nullptr || name.find(only) != std::string::npos;
}

/** Case 1: reshape_and_cache into an fp8 cache against the host rounding. */
inline void fp8ReshapeCase(Tally& tally, const char* only) {
  if (!fp8Selected("fp8 reshape_and_cache", only)) return;
  const int Hq = 4, Hkv = 2, D = 64, bs = 16, numBlocks = 5, T = 7;
  const int stride = (Hq + 2 * Hkv) * D;
  Rng rng(901);
  std::vector<uint16_t> qkv(static_cast<size_t>(T) * stride);
  for (auto& v : qkv) v = randomBf16(rng, 1e-4, 600.0);  // subnormal to saturating magnitudes
  qkv[Hq * D] = 0x7fc0;                                   // a NaN key element stays NaN
  const std::vector<int> slots = {0, 17, -1, 79, 33, 5, 64};
  DeviceBuffer<uint16_t> dQkv(qkv.size());
  dQkv.upload(qkv);
  DeviceBuffer<int> dSlots(slots.size());
  dSlots.upload(slots);
  const size_t cacheBytes = static_cast<size_t>(numBlocks) * 2 * bs * Hkv * D;
  DeviceBuffer<uint8_t> dCache(cacheBytes);
  HS_CHECK(cudaMemset(dCache.ptr, 0xa5, cacheBytes));
  HS_CHECK(hsReshapeAndCacheFp8(dQkv.ptr, dCache.ptr, dSlots.ptr, T, stride, Hq, Hkv, D, bs, numBlocks, 1.f, 1.f, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = dCache.download();
  std::vector<uint8_t> want(cacheBytes, 0xa5);
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const int b = slots[t] / bs, o = slots[t] % bs;
    for (int kv = 0; kv < 2; ++kv)
      for (int e = 0; e < Hkv * D; ++e)
        want[((static_cast<size_t>(b) * 2 + kv) * bs + o) * Hkv * D + e] = hs_fp8::floatToE4m3(
            bf16ToFloat(qkv[static_cast<size_t>(t) * stride + Hq * D + kv * Hkv * D + e]));
  }
  long bad = 0;
  for (size_t i = 0; i < cacheBytes; ++i) bad += got[i] != want[i] ? 1 : 0;
  const bool nanKept = (got[0] & 0x7f) == 0x7f;
  const bool ok = bad == 0 && nanKept;
  std::printf("fp8  %-44s mismatches=%ld nanKept=%d %s\n", "reshape_and_cache e4m3 vs host rounding", bad,
              nanKept ? 1 : 0, ok ? "ok" : "FAIL");
  tally.record(ok, "fp8 reshape_and_cache");
}

/**
 * Case 3 (`--calculate-kv-scales`): hsKvAmax folds exactly the largest |k| and |v| of the tokens
 * with a slot (a PAD token's larger values are left out), flags that a token had one, and gives
 * zeros and no flag when every token is PAD; then hsReshapeAndCacheFp8 with the scales
 * amax / 200, amax / 100 stores e4m3(x * (1 / scale)) (the CPU oracle's order, src/backends/fp8.ts).
 */
inline void fp8AmaxCase(Tally& tally, const char* only) {
  if (!fp8Selected("fp8 kv amax", only)) return;
  const int Hq = 4, Hkv = 2, D = 64, bs = 16, numBlocks = 2, T = 5;
  const int stride = (Hq + 2 * Hkv) * D;
  Rng rng(907);
  std::vector<uint16_t> qkv(static_cast<size_t>(T) * stride);
  for (auto& v : qkv) v = randomBf16(rng, 1e-3, 8.0);
  const size_t kOff = static_cast<size_t>(Hq) * D, kv = static_cast<size_t>(Hkv) * D;
  qkv[2 * stride + kOff + 5] = floatToBf16(-500.f);  // token 2 is PAD: its values do not count
  qkv[2 * stride + kOff + kv + 7] = floatToBf16(300.f);
  qkv[3 * stride + kOff + 9] = floatToBf16(-11.5f);  // the K amax, negative
  qkv[4 * stride + 3] = floatToBf16(1000.f);         // a query element: not K or V
  const std::vector<int> slots = {0, 17, -1, 3, 30};
  float kMax = 0.f, vMax = 0.f;
  for (int t = 0; t < T; ++t)
    for (size_t e = 0; slots[t] >= 0 && e < kv; ++e) {
      kMax = std::max(kMax, std::fabs(bf16ToFloat(qkv[t * stride + kOff + e])));
      vMax = std::max(vMax, std::fabs(bf16ToFloat(qkv[t * stride + kOff + kv + e])));
    }
  DeviceBuffer<uint16_t> dQkv(qkv.size());
  dQkv.upload(qkv);
  DeviceBuffer<int> dSlots(slots.size());
  dSlots.upload(slots);
  DeviceBuffer<uint32_t> dOut(3);
  HS_CHECK(hsKvAmax(dQkv.ptr, dSlots.ptr, T, stride, Hq, Hkv, D, dOut.ptr, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const std::vector<uint32_t> got = dOut.download();
  float gk, gv;
  std::memcpy(&gk, &got[0], 4);
  std::memcpy(&gv, &got[1], 4);
  const bool amaxOk = gk == kMax && gv == vMax && got[2] == 1 && kMax == 11.5f;
  // Every token PAD: zeros, no flag.
  const std::vector<int> pads(T, -1);
  dSlots.upload(pads);
  HS_CHECK(hsKvAmax(dQkv.ptr, dSlots.ptr, T, stride, Hq, Hkv, D, dOut.ptr, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const std::vector<uint32_t> none = dOut.download();
  const bool padOk = none[0] == 0 && none[1] == 0 && none[2] == 0;
  // The calibrated scales through reshape_and_cache (f32 scales as the engine passes them).
  const float kScale = kMax / 200.f, vScale = vMax / 100.f;
  dSlots.upload(slots);
  const size_t cacheBytes = static_cast<size_t>(numBlocks) * 2 * bs * kv;
  DeviceBuffer<uint8_t> dCache(cacheBytes);
  HS_CHECK(cudaMemset(dCache.ptr, 0, cacheBytes));
  HS_CHECK(hsReshapeAndCacheFp8(dQkv.ptr, dCache.ptr, dSlots.ptr, T, stride, Hq, Hkv, D, bs, numBlocks, kScale,
                                vScale, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> cache = dCache.download();
  long bad = 0;
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const int b = slots[t] / bs, o = slots[t] % bs;
    for (int h = 0; h < 2; ++h)
      for (size_t e = 0; e < kv; ++e) {
        const float x = bf16ToFloat(qkv[t * stride + kOff + h * kv + e]) * (1.f / (h == 0 ? kScale : vScale));
        bad += cache[((static_cast<size_t>(b) * 2 + h) * bs + o) * kv + e] != hs_fp8::floatToE4m3(x) ? 1 : 0;
      }
  }
  const bool ok = amaxOk && padOk && bad == 0;
  std::printf("fp8  %-44s kAmax=%g vAmax=%g pad=%d mismatches=%ld %s\n", "kv amax + calibrated reshape_and_cache", gk,
              gv, padOk ? 1 : 0, bad, ok ? "ok" : "FAIL");
  tally.record(ok, "fp8 kv amax");
}

/** Case 2: one decode or prefill spec, fp8 cache vs the bf16 cache of its dequantised values. */
inline void fp8AttentionCase(const CaseSpec& spec0, bool decode, Tally& tally, const char* only) {
  if (!fp8Selected(spec0.name, only)) return;
  CaseSpec spec = spec0;
  spec.poison = false;  // e4m3 has one NaN code; masked slots are zero-filled by the loader anyway
  PagedCase c = buildCase(spec);
  // Quantise the cache, then make the bf16 cache hold exactly the dequantised values.
  std::vector<uint8_t> codes(c.cache.size());
  for (size_t i = 0; i < c.cache.size(); ++i) {
    codes[i] = hs_fp8::floatToE4m3(bf16ToFloat(c.cache[i]));
    c.cache[i] = floatToBf16(hs_fp8::e4m3ToFloat(codes[i]));
  }
  c.dCache.upload(c.cache);
  DeviceBuffer<uint8_t> dFp8(codes.size());
  dFp8.upload(codes);
  int maxQ = 0;
  for (int q : spec.qLens) maxQ = std::max(maxQ, q);
  HsPagedAttentionParams p = c.params();
  HS_CHECK(decode ? hsPagedDecodeAttention(&p, 0) : hsPagedPrefillAttention(&p, maxQ, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> bf16Out = c.dOut.download();
  c.dOut.poison();
  p.kvCache = reinterpret_cast<const __nv_bfloat16*>(dFp8.ptr);
  p.kvCacheFp8 = 1;
  p.kScale = 1.f;
  p.vScale = 1.f;
  HS_CHECK(decode ? hsPagedDecodeAttention(&p, 0) : hsPagedPrefillAttention(&p, maxQ, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> fp8Out = c.dOut.download();
  long diff = 0;
  for (size_t i = 0; i < fp8Out.size(); ++i) diff += fp8Out[i] != bf16Out[i] ? 1 : 0;
  const Comparison cmp = compareOutput(c, referenceAttention(c));
  const bool ok = diff == 0 && cmp.ok(1e-2);
  std::printf("fp8  %-44s bitDiffVsBf16=%ld relErr=%.2e worstRow=%.2e %s\n", spec.name.c_str(), diff, cmp.relErr,
              cmp.worstRow, ok ? "ok" : "FAIL");
  tally.record(ok, ("fp8 " + spec.name).c_str());
}

}  // namespace hs_test
