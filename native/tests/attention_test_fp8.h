// fp8 (e4m3) KV cache cases of attention_test (`--kv-cache-dtype fp8`, HsPagedAttentionParams.kvCacheFp8):
// 1. hsReshapeAndCacheFp8 stores exactly fp8.cuh floatToE4m3 of each bf16 K/V element (the CPU
//    oracle's rounding, src/backends/fp8.ts) at the slot's K and V rows, and skips PAD slots;
// 2. attention over an fp8 cache equals, bit for bit, attention over a bf16 cache holding the
//    dequantised values (e4m3 -> bf16 is exact at scale 1), for decode and prefill, and stays within
//    the usual tolerance of the double reference computed on those values.
#pragma once

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
