// Shared pieces of the HiSparse kernel test: hisparse_test.cu (main, the --only filter) and its
// case files, one per kernel group, linked into one program (hisparse_test):
//   hisparse_test_kv.cu         hsReshapeAndCacheDigest (KV rows + digests), fp8.cuh directed
//                               rounding, hsMirrorPages
//   hisparse_test_select.cu     hsQuestSelect
//   hisparse_test_resolve.cu    hsResolve (scripted sequence: fused, split, fp8 host; error case)
//   hisparse_test_attention.cu  hsSparseDecodeAttention
// Here: random data, host <-> device vector copies, per-request tables, the case entry points.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../kernels/hisparse.h"
#include "hisparse_ref.h"
#include "paged_case.h"

namespace hs_test {

/** True when the case `name` passes the --only filter (contains its text, or no filter given). */
bool selected(const char* name);

/** n random bf16 values in +-[0.05, 1], with a few exact zeros of both signs. */
inline std::vector<uint16_t> randomBf16Vec(Rng& rng, size_t n, bool zeros = true) {
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

/** Per-request tables of a batch: slots, host blocks, device blocks, pins, hot blocks. */
struct Tables {
  int numSlots = 0, stride = 0, numHot = 0;
  std::vector<int> hostTable, blockTable, pinned, hot;
  int* host(int slot) { return hostTable.data() + static_cast<size_t>(slot) * stride; }
  int* block(int slot) { return blockTable.data() + static_cast<size_t>(slot) * stride; }
  int* pin(int slot) { return pinned.data() + static_cast<size_t>(slot) * stride; }
  int* hotRow(int slot) { return hot.data() + static_cast<size_t>(slot) * numHot; }
};

// ---- the cases, in the order main() runs them ------------------------------------------------------

/**
 * hsReshapeAndCacheDigest: KV rows and digests against refUpdateDigests (hisparse_test_kv.cu);
 * fp8: e4m3 digests rounded outward, keys in the subnormal and saturating ranges too.
 */
void digestCase(Tally& tally, int Hq, int Hkv, int D, int bs, int dt = 0, bool fp8 = false);
/** floatToE4m3Down / Up (fp8.cuh) against refE4m3Directed over every bf16 value (hisparse_test_kv.cu). */
void directedRoundingCase(Tally& tally);
/** hsQuestSelect against refSelectOne, ties included, over bf16 or fp8 digests (hisparse_test_select.cu). */
void selectCase(Tally& tally, int Hq, int Hkv, int D, int bs, uint64_t seed, int digestsPerPage = 1,
                bool fp8 = false);
/** hsQuestSelect's benchmark overlap knob (prevSelected) at p = 1 and 0 (hisparse_test_select.cu). */
void overlapCase(Tally& tally);
/** Resolver variants: the fused copy, the split plan + copy pass (bf16 host tier), split with an fp8 host tier. */
enum class ResolveMode { kFused, kSplit, kSplitFp8 };
/** hsResolve over a scripted multi-step sequence against refResolveOne (hisparse_test_resolve.cu). */
void resolveCase(Tally& tally, int Hkv, int D, int bs, int steps, ResolveMode mode);
/** hsResolve: a selection without its tail page (hisparse_test_resolve.cu). */
void resolveErrorCase(Tally& tally);
/** hsMirrorPages: the host tier's head-major layout (hisparse_test_kv.cu). */
void mirrorCase(Tally& tally, int Hkv, int D, int bs, bool fp8);
/** hsSparseDecodeAttention: dense-equal bits, per-head tables vs float64, mixed batches (hisparse_test_attention.cu). */
void sparseAttentionCase(Tally& tally, int Hq, int Hkv, int D, int bs, std::vector<int> lens, int maxModelLen);

}  // namespace hs_test
