// reshape_and_cache fused with the Quest digest update (hisparse.h hsReshapeAndCacheDigest).
// One CTA per token: it writes the token's K and V into the paged cache (16-byte vectors), and
// when the token is the first of its run (consecutive tokens of the step in one digest's
// sub-page of digestTokens tokens), it folds the run's keys into the sub-page's digest in token
// order. So each digest is touched by exactly one CTA per launch, and the result equals the CPU
// oracle's sequential fold (QuestSelector.updateDigests in src/attention/sparse/quest.ts).
// bf16 digests fold on the bits; fp8 digests (e4m3 codes) are read, converted to float, folded
// with the run's keys in float and written rounded outward (min down, max up: fp8.cuh
// floatToE4m3Down / Up), which equals the oracle's key-by-key rounded fold (rounding is monotone).
#include <cuda_bf16.h>

#include <type_traits>

#include "fp8.cuh"
#include "hisparse.h"
#include "hisparse_common.cuh"

namespace hs_sparse {
namespace {

/** Sizes of one launch, in 16-byte vectors (8 bf16) unless named otherwise. */
struct DigestArgs {
  const uint4* qkv;
  uint4* cache;
  const int32_t* slots;
  void* digests;  // 8 elements a vector: uint4 (bf16) or uint2 (e4m3)
  const int32_t* hostSlots;
  int numTokens;
  int rowVecs;  // qkv row stride
  int kVecs;    // offset of k in a row (numHeads * D / 8)
  int kvVecs;   // Hkv * D / 8: one token's K (or V) of every kv head
  int blockSize;
  int digestTokens;        // tokens per digest (a divisor of blockSize)
  long long numSlots;      // numBlocks * blockSize
  long long numHostSlots;  // numHostBlocks * blockSize
};

/** Min/max fold of 8 bf16 keys into (mn, mx), with the oracle's comparisons (v < min, v > max). */
__device__ __forceinline__ void fold(uint32_t (&mn)[8], uint32_t (&mx)[8], const uint4& key) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t b = lane16(key, e);
    const float v = bf16Bits(b);
    if (v < bf16Bits(mn[e])) mn[e] = b;
    if (v > bf16Bits(mx[e])) mx[e] = b;
  }
}

/** Float min/max fold of 8 bf16 keys into (mn, mx), the oracle's comparisons (v < min, v > max). */
__device__ __forceinline__ void foldFloat(float (&mn)[8], float (&mx)[8], const uint4& key) {
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float v = bf16Bits(lane16(key, e));
    if (v < mn[e]) mn[e] = v;
    if (v > mx[e]) mx[e] = v;
  }
}

/** 8 floats rounded onto the e4m3 grid, down (up = false) or up, packed as 8 codes. */
__device__ __forceinline__ uint2 packDirected(const float (&v)[8], bool up) {
  uint2 c{0u, 0u};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t b = hs_fp8::floatToE4m3Directed(v[e], up);
    if (e < 4) c.x |= b << (8 * e);
    else c.y |= b << (8 * (e - 4));
  }
  return c;
}

/**
 * bf16 digests: the stored (lo, hi) extended by the run's keys (key, then k[j * rowVecs] for
 * j < n), on the bits (signed zeros kept); without `extend` the digest starts over at `key`.
 */
__device__ __forceinline__ void foldRun(uint4& lo, uint4& hi, bool extend, const uint4& key, const uint4* k, int n,
                                        int rowVecs) {
  uint32_t mn[8];
  uint32_t mx[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    mn[e] = lane16(extend ? lo : key, e);
    mx[e] = lane16(extend ? hi : key, e);
  }
  if (extend) fold(mn, mx, key);
  for (int j = 1; j < n; ++j) fold(mn, mx, k[static_cast<size_t>(j) * rowVecs]);
  lo = pack16(mn);
  hi = pack16(mx);
}

/** fp8 digests: as above on float values (stored codes converted exactly), then rounded outward. */
__device__ __forceinline__ void foldRun(uint2& lo, uint2& hi, bool extend, const uint4& key, const uint4* k, int n,
                                        int rowVecs) {
  float mn[8];
  float mx[8];
  if (extend) {
    e4m3x8ToFloat(lo, mn);
    e4m3x8ToFloat(hi, mx);
    foldFloat(mn, mx, key);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) mn[e] = mx[e] = bf16Bits(lane16(key, e));
  }
  for (int j = 1; j < n; ++j) foldFloat(mn, mx, k[static_cast<size_t>(j) * rowVecs]);
  lo = packDirected(mn, false);
  hi = packDirected(mx, true);
}

/** kFp8: digests of e4m3 codes (uint2 = 8 codes a vector), else bf16 (uint4 = 8 bf16). */
template <bool kFp8>
__global__ void __launch_bounds__(256) reshapeDigestKernel(const DigestArgs a) {
  using DVec = std::conditional_t<kFp8, uint2, uint4>;
  const int t = blockIdx.x;
  const uint4* __restrict__ k = a.qkv + static_cast<size_t>(t) * a.rowVecs + a.kVecs;
  // Every index is read up front, and each thread issues its loads (K, V and the digest it
  // extends) before any store: a decode step has one CTA per token, so the kernel's time is
  // its chain of dependent global round trips, not bandwidth.
  const long long slot = a.slots[t];
  const long long hs = a.hostSlots[t];
  const long long prevHs = t > 0 ? a.hostSlots[t - 1] : -1;
  const bool cached = slot >= 0 && slot < a.numSlots;
  const int off = static_cast<int>(hs % a.digestTokens);
  // The digest is folded by the CTA of the first token of each run (consecutive tokens of the
  // step in one sub-page); padding and tokens without a page identity (hs out of range) fold nothing.
  const bool folds = hs >= 0 && hs < a.numHostSlots && (off == 0 || t == 0 || prevHs != hs - 1);
  int n = 1;
  if (folds)
    while (t + n < a.numTokens && off + n < a.digestTokens && a.hostSlots[t + n] == hs + n) ++n;
  uint4* __restrict__ kd = nullptr;
  uint4* __restrict__ vd = nullptr;
  if (cached) {
    const long long block = slot / a.blockSize;
    const long long o = slot % a.blockSize;
    kd = a.cache + static_cast<size_t>((block * 2) * a.blockSize + o) * a.kvVecs;
    vd = a.cache + static_cast<size_t>((block * 2 + 1) * a.blockSize + o) * a.kvVecs;
  }
  // Digests [numHostBlocks * S, 2, Hkv, D]: sub-page hs / digestTokens (host block * S + sub-page).
  const size_t digestAt = folds ? static_cast<size_t>(hs / a.digestTokens) * 2 * a.kvVecs : 0;
  DVec* __restrict__ dmin = folds ? static_cast<DVec*>(a.digests) + digestAt : nullptr;
  DVec* __restrict__ dmax = folds ? static_cast<DVec*>(a.digests) + digestAt + a.kvVecs : nullptr;
  const bool extend = folds && off != 0;  // else the digest starts over (the host block may be reused)
  if (!cached && !folds) return;           // padding: nothing to write
  for (int i = threadIdx.x; i < a.kvVecs; i += blockDim.x) {
    const uint4 key = k[i];
    const uint4 val = cached ? k[a.kvVecs + i] : uint4{};
    DVec lo{};
    DVec hi{};
    if (extend) {
      lo = dmin[i];
      hi = dmax[i];
    }
    if (cached) {
      kd[i] = key;
      vd[i] = val;
    }
    if (!folds) continue;
    foldRun(lo, hi, extend, key, k + i, n, a.rowVecs);
    dmin[i] = lo;
    dmax[i] = hi;
  }
}

}  // namespace
}  // namespace hs_sparse

extern "C" cudaError_t hsReshapeAndCacheDigest(const void* qkv, void* kvCache, const int32_t* slotMapping,
                                               void* digests, const int32_t* hostSlotMapping, int numTokens,
                                               int rowStride, int numHeads, int numKvHeads, int headDim,
                                               int blockSize, int digestTokens, int numBlocks, int numHostBlocks,
                                               int digestDtype, cudaStream_t stream) {
  using namespace hs_sparse;
  if (numTokens < 0 || numHeads <= 0 || numKvHeads <= 0 || headDim <= 0 || blockSize <= 0 || numBlocks < 0 ||
      numHostBlocks < 0 || digestTokens <= 0 || blockSize % digestTokens != 0 ||
      (digestDtype != HS_DIGEST_BF16 && digestDtype != HS_DIGEST_FP8))
    return cudaErrorInvalidValue;
  const int kvElems = numKvHeads * headDim;
  if (kvElems % 8 != 0 || (numHeads * headDim) % 8 != 0 || rowStride % 8 != 0 ||
      rowStride < (numHeads + 2 * numKvHeads) * headDim)
    return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  if (qkv == nullptr || kvCache == nullptr || digests == nullptr || slotMapping == nullptr ||
      hostSlotMapping == nullptr || !aligned16(qkv) || !aligned16(kvCache) || !aligned16(digests))
    return cudaErrorInvalidValue;
  DigestArgs a{};
  a.qkv = static_cast<const uint4*>(qkv);
  a.cache = static_cast<uint4*>(kvCache);
  a.slots = slotMapping;
  a.digests = digests;
  a.hostSlots = hostSlotMapping;
  a.numTokens = numTokens;
  a.rowVecs = rowStride / 8;
  a.kVecs = numHeads * headDim / 8;
  a.kvVecs = kvElems / 8;
  a.blockSize = blockSize;
  a.digestTokens = digestTokens;
  a.numSlots = static_cast<long long>(numBlocks) * blockSize;
  a.numHostSlots = static_cast<long long>(numHostBlocks) * blockSize;
  const int threads = a.kvVecs >= 256 ? 256 : (a.kvVecs + 31) / 32 * 32;
  if (digestDtype == HS_DIGEST_FP8)
    reshapeDigestKernel<true><<<numTokens, threads, 0, stream>>>(a);
  else
    reshapeDigestKernel<false><<<numTokens, threads, 0, stream>>>(a);
  return cudaGetLastError();
}
