// Quest page selection (hisparse.h hsQuestSelect), two kernels:
// questScoreKernel, kScoreCtasPerItem(..) CTAs per (kv head, request), each looping over the
// row's live pages (a grid-stride loop bounded by the row's page count, read on the device;
// the grid itself is static, sized for about 4 waves of CTAs, so the launch can be captured):
// 1. the group's queries split as qPos = max(q, 0) and qNeg = min(q, 0) in float32 shared
//    memory, laid out per (head, half-chunk, lane) so that a lane's 16-byte loads are
//    conflict-free;
// 2. L = questScoreLanes(D) lanes per page (8 head dims each; 2 pages per warp at D = 128): lane
//    l loads its 8 elements of the page's min digest and 8 of its max (16 bytes each in bf16, 8
//    in e4m3, converted exactly to float; the lanes of a page read 2 x D elements contiguously:
//    coalesced), sums qPos*max + qNeg*min over its 8 dims in float32
//    without FMA, then a butterfly of shuffles over the L lanes; the page's score is the
//    largest head bound (quest.ts questScore: the same operation order, so the same ranks), and
//    lane 0 stores an order-preserving 64-bit key of it (0 marks a forced page); with
//    digestsPerPage S > 1 the page's score is the largest of its S sub-pages' scores, each as
//    above: the lanes load kN = scoreChunk(S, L) (4 when 4 | S) sub-pages at once and score them
//    together (each q load from shared memory serves kN sub-pages, kN independent sums in flight,
//    a transpose-reduce butterfly of kN - 1 + log2(L) shuffles instead of kN log2(L); max is
//    exact, so the order over sub-pages and heads does not change the score);
// questSelectKernel, one CTA per (kv head, request):
// 3. a radix select over the keys (8 passes of 8 bits, MSB first, shared-memory histograms)
//    finds the k-th largest key T and how many keys equal to T are taken;
// 4. one ordered pass over the pages (CTA scans) takes the forced pages, the keys > T and the
//    first keys == T in page order (the oracle's tie rule: lower page first), and writes the
//    selection ascending.
// Scoring reads 4 * D * S bytes of bf16 digest (2 * D * S of e4m3) per page and kv head and does
// 4 * D * S float32 operations per q head of the group: memory-bound with one digest per page at
// any group size on an H100/H200 class GPU (bench: native/tests/quest_score_bench.cu); with S = 4
// the sub-pages, scored one at a time, cost ~0.3 ms per layer at 16 x 32K requests
// (bench/results/gpu_session4_20261202_h200.md: shared-memory q loads and shuffles, not FP32,
// bound that loop; kN sub-pages at once divide both by kN).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "hisparse.h"
#include "hisparse_common.cuh"
#include "quest_score.cuh"
#include "radix_select.cuh"

namespace hs_sparse {
namespace {

// The kernels take the launcher's HsQuestSelectParams by value (no second copy of its fields);
// these are the typed views of its untyped pointers.
/** bf16 bits of the qkv rows. */
__device__ __forceinline__ const uint16_t* qkvBits(const HsQuestSelectParams& a) {
  return static_cast<const uint16_t*>(a.qkv);
}
/** The sort keys in the scratch: [numReqs, Hkv, tableStride]. */
__device__ __forceinline__ unsigned long long* sortKeys(const HsQuestSelectParams& a) {
  return static_cast<unsigned long long*>(a.scratch);
}

/** Order-preserving 64-bit key of a float64 score (larger score, larger key); -0 counts as +0. */
__device__ __forceinline__ unsigned long long orderKey(double s) {
  const unsigned long long b = s == 0.0 ? 0ull : static_cast<unsigned long long>(__double_as_longlong(s));
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

/** Lanes per page (quest.ts questScoreLanes): ceil(D / 8) rounded up to a power of two, <= 32. */
__host__ __device__ inline int scoreLanes(int headDim) {
  int l = 1;
  while (l * 8 < headDim) l *= 2;
  return l;
}

/** Key of a page kept from the previous selection (HsQuestSelectParams.prevSelected): above every score's. */
constexpr unsigned long long kKeptKey = 0xfffffffffffffffeull;

/**
 * Whether a previously selected page is kept this step (benchmark overlap knob): a hash of the
 * query's first two elements (they change every step), the kv head and the page, below overlapP.
 */
__device__ __forceinline__ bool keepPrevious(uint32_t qSeed, int g, int p, float overlapP) {
  uint32_t h = qSeed ^ (static_cast<uint32_t>(p) * 0x9e3779b1u) ^ (static_cast<uint32_t>(g) << 24);
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return static_cast<float>(h >> 8) < overlapP * 16777216.f;  // 24 uniform bits
}

/** Warps of a scoring CTA. */
constexpr int kScoreWarps = kThreads / 32;

/** A row's selection context: its slot, q row and page count, or !valid when it is skipped. */
struct SelectRow {
  bool valid;
  int slot;
  int qRow;
  int numPages;
  int windowStart;
  const int32_t* pinRow;
  __device__ bool forced(const HsQuestSelectParams& a, int p) const {
    return p < a.sinkPages || p >= windowStart || (pinRow != nullptr && pinRow[p] != 0);
  }
};

__device__ __forceinline__ SelectRow selectRow(const HsQuestSelectParams& a, int r) {
  SelectRow row{};
  const bool active = a.rowFlags == nullptr || a.rowFlags[r] != 0;
  row.slot = a.reqSlot[r];
  row.qRow = a.tokenRow != nullptr ? a.tokenRow[r] : r;
  row.valid = active && row.slot >= 0 && row.slot < a.numSlots && row.qRow >= 0;
  const int seqLen = max(a.seqLens[r], 0);
  row.numPages = min((seqLen + a.blockSize - 1) / a.blockSize, a.tableStride);
  row.windowStart = row.numPages - a.windowPages;
  row.pinRow = row.valid && a.pinnedTable != nullptr ? a.pinnedTable + static_cast<size_t>(row.slot) * a.tableStride
                                                     : nullptr;
  return row;
}

/**
 * Scores the live pages of one (row, kv head) into the keys (steps 1-2 of the file comment); the
 * S = digestsPerPage sub-pages of a page go kN at a time (kN divides S, kN <= L: scoreChunk).
 */
template <bool kFp8, int kN>
__global__ void __launch_bounds__(kThreads) questScoreKernel(const HsQuestSelectParams a) {
  extern __shared__ __align__(16) unsigned char smem[];
  float4* qs = reinterpret_cast<float4*>(smem);  // [2 (pos, neg)][G][2][L] float4
  const int g = blockIdx.y;
  const int r = blockIdx.z;
  const SelectRow row = selectRow(a, r);
  // Rows that fit the budget take every page and need no score.
  if (!row.valid || row.numPages <= a.budgetPages) return;
  const int D = a.headDim;
  const int L = scoreLanes(D);
  const int pagesPerWarp = 32 / L;
  const int pagesPerIter = kScoreWarps * pagesPerWarp;
  const int first = blockIdx.x * pagesPerIter;
  const int stride = gridDim.x * pagesPerIter;
  if (first >= row.numPages) return;
  const int G = a.numHeads / a.numKvHeads;
  const uint16_t* q = qkvBits(a) + static_cast<size_t>(row.qRow) * a.qkvRowStride + static_cast<size_t>(g * G) * D;
  float* qf = reinterpret_cast<float*>(qs);
  const int padded = 8 * L;  // dims per head with the lanes past D
  for (int j = threadIdx.x; j < G * padded; j += blockDim.x) {
    const int h = j / padded;
    const int i = j - h * padded;
    const float v = i < D ? bf16Bits(q[static_cast<size_t>(h) * D + i]) : 0.f;
    // float4 (h, half, lane) holds dims 8 lane + 4 half .. + 3.
    const int l = i >> 3;
    const int half = (i >> 2) & 1;
    const size_t at = static_cast<size_t>(((h * 2 + half) * L + l) * 4 + (i & 3));
    qf[at] = v > 0.f ? v : 0.f;
    qf[static_cast<size_t>(G) * 2 * L * 4 + at] = v > 0.f ? 0.f : v;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int sub = lane / L;  // page of this lane within the warp's group
  const int l = lane - sub * L;
  const uint8_t* prev = a.prevSelected != nullptr
                            ? a.prevSelected + (static_cast<size_t>(row.slot) * a.numKvHeads + g) * a.tableStride
                            : nullptr;
  const uint32_t qSeed = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16);
  unsigned long long* keys = sortKeys(a) + (static_cast<size_t>(r) * a.numKvHeads + g) * a.tableStride;
  // The loop bound is uniform over the CTA (every warp runs the same iterations: shuffles stay full-warp).
  for (int base = first; base < row.numPages; base += stride) {
    const int p = base + warp * pagesPerWarp + sub;
    const bool live = p < row.numPages;
    const bool forced = live && row.forced(a, p);
    const int hb = live && !forced ? a.hostBlockTable[static_cast<size_t>(row.slot) * a.tableStride + p] : -1;
    // An invalid host block (never in a consistent table) ranks lowest instead of faulting.
    const bool scored = hb >= 0 && hb < a.numHostBlocks;
    // The page's score: the largest bound of its S sub-page digests, kN loaded and scored together
    // (S uniform: full-warp shuffles), then the largest over the lanes that hold the sub-pages.
    float best = -INFINITY;
    for (int j0 = 0; j0 < a.digestsPerPage; j0 += kN) {
      float mn[kN][8];
      float mx[kN][8];
#pragma unroll
      for (int j = 0; j < kN; ++j)
        loadDigest<kFp8>(a, static_cast<size_t>(hb) * a.digestsPerPage + j0 + j, g, l, scored && 8 * l < D, mn[j],
                         mx[j]);
      const float v = laneScores<kN>(qs, G, L, l, mn, mx);
      if (v > best) best = v;
    }
#pragma unroll
    for (int n = kN, o = L >> 1; n > 1; n >>= 1, o >>= 1) {  // max is exact: any order
      const float w = __shfl_xor_sync(0xffffffffu, best, o);
      if (w > best) best = w;
    }
    if (live && l == 0) {
      const bool kept = prev != nullptr && scored && prev[p] != 0 && keepPrevious(qSeed, g, p, a.overlapP);
      keys[p] = forced ? 0ull : kept ? kKeptKey : scored ? orderKey(static_cast<double>(best)) : 1ull;
    }
  }
}

__global__ void __launch_bounds__(kThreads) questSelectKernel(const HsQuestSelectParams a) {
  extern __shared__ __align__(16) unsigned char smem[];
  int* hist = reinterpret_cast<int*>(smem);
  int* warpSums = hist + 256;
  int* bc = warpSums + 32;
  const int g = blockIdx.x;
  const int r = blockIdx.y;
  const size_t item = static_cast<size_t>(r) * a.numKvHeads + g;
  int32_t* out = a.selPages + item * a.tableStride;
  const SelectRow row = selectRow(a, r);
  if (!row.valid) {
    if (threadIdx.x == 0) a.selCount[item] = 0;
    return;
  }
  const int numPages = row.numPages;
  uint8_t* prev = a.prevSelected != nullptr
                      ? a.prevSelected + (static_cast<size_t>(row.slot) * a.numKvHeads + g) * a.tableStride
                      : nullptr;
  if (numPages <= a.budgetPages) {  // the whole context fits the budget: every page
    for (int p = threadIdx.x; p < numPages; p += blockDim.x) out[p] = p;
    if (prev != nullptr)
      for (int p = threadIdx.x; p < a.tableStride; p += blockDim.x) prev[p] = p < numPages ? 1 : 0;
    if (threadIdx.x == 0) a.selCount[item] = numPages;
    return;
  }
  int myForced = 0;
  for (int p = threadIdx.x; p < numPages; p += blockDim.x) myForced += row.forced(a, p) ? 1 : 0;
  const int k = a.budgetPages - blockSum(myForced, warpSums);
  unsigned long long threshold = ~0ull;  // k <= 0: no score is taken
  int take = 0;
  const unsigned long long* keys = sortKeys(a) + item * a.tableStride;
  if (k > 0)
    threshold = radixSelect<unsigned long long>([keys](int p) { return keys[p]; }, numPages, k, hist, bc, &take);
  // Ordered pass: forced pages, keys above the threshold, then the first `take` keys equal to it.
  int eqSoFar = 0;
  int selSoFar = 0;
  for (int base = 0; base < numPages; base += blockDim.x) {
    const int p = base + threadIdx.x;
    const bool in = p < numPages;
    const bool f = in && row.forced(a, p);
    const unsigned long long key = in && !f && k > 0 ? keys[p] : 0ull;
    const bool eq = key != 0 && key == threshold;
    int eqTotal = 0;
    const int eqRank = eqSoFar + blockExclusiveScan(eq ? 1 : 0, &eqTotal, warpSums);
    const bool sel = f || (key != 0 && key > threshold) || (eq && eqRank < take);
    int selTotal = 0;
    const int idx = selSoFar + blockExclusiveScan(sel ? 1 : 0, &selTotal, warpSums);
    if (sel) out[idx] = p;
    if (prev != nullptr && in) prev[p] = sel ? 1 : 0;  // read by the next step's scoring (stream order)
    eqSoFar += eqTotal;
    selSoFar += selTotal;
  }
  if (prev != nullptr)
    for (int p = numPages + threadIdx.x; p < a.tableStride; p += blockDim.x) prev[p] = 0;
  if (threadIdx.x == 0) a.selCount[item] = selSoFar;
}

/**
 * Sub-pages a scoring warp takes at once (questScoreKernel's kN): the largest of 4, 2, 1 that
 * divides S = digestsPerPage and is at most L lanes (butterflySums splits one lane bit per halving).
 */
int gScoreChunkCap = 0;  // hsQuestSetScoreChunkCap's value (0: none)
int scoreChunk(int digestsPerPage, int lanes) {
  for (int n = 4; n > 1; n >>= 1)
    if (digestsPerPage % n == 0 && n <= lanes && (gScoreChunkCap == 0 || n <= gScoreChunkCap)) return n;
  return 1;
}

/** Dynamic shared memory of a scoring CTA: the group's qPos and qNeg, float32 [2, G, 8 L]. */
size_t scoreSmemBytes(int groupSize, int headDim) {
  return sizeof(float) * 2 * static_cast<size_t>(groupSize) * 8 * scoreLanes(headDim);
}

/** hsQuestSetScoreCtaCap's value (0: none). */
int gScoreCtaCap = 0;

/** SM count of the current device (132 if it cannot be read; a host query, capture-safe). */
int smCount() {
  int dev = 0;
  int sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return 132;
  return sms;
}

/**
 * Scoring CTAs per (kv head, request): enough to cover tableStride pages in one pass, at most
 * about 4 waves of CTAs over the SMs in all (and at least 1); each CTA loops over the row's live
 * pages with this stride, so a short row ends early whatever the table width.
 */
int scoreCtasPerItem(const HsQuestSelectParams* p) {
  const int L = scoreLanes(p->headDim);
  const int pagesPerIter = kScoreWarps * (32 / L);
  const long long cover = (p->tableStride + pagesPerIter - 1) / pagesPerIter;
  const long long items = static_cast<long long>(p->numReqs) * p->numKvHeads;
  const long long waves = 4LL * smCount() * (2048 / kThreads);
  const long long cap = std::max(1LL, waves / std::max(1LL, items));
  const long long n = std::min(cover, cap);
  return static_cast<int>(gScoreCtaCap > 0 ? std::min<long long>(n, gScoreCtaCap) : n);
}

/** Dynamic shared memory of a selection CTA: histogram, scan and broadcast words. */
size_t selectSmemBytes() { return (256 + 32 + 8) * sizeof(int); }

}  // namespace
}  // namespace hs_sparse

extern "C" size_t hsQuestSelectScratchBytes(int numReqs, int numKvHeads, int tableStride) {
  if (numReqs <= 0 || numKvHeads <= 0 || tableStride <= 0) return 0;
  return static_cast<size_t>(numReqs) * numKvHeads * tableStride * sizeof(unsigned long long);
}

extern "C" void hsQuestSetScoreCtaCap(int maxCtasPerItem) { hs_sparse::gScoreCtaCap = std::max(0, maxCtasPerItem); }

extern "C" void hsQuestSetScoreChunkCap(int maxSubPagesAtOnce) {
  hs_sparse::gScoreChunkCap = std::max(0, maxSubPagesAtOnce);
}

extern "C" cudaError_t hsQuestSelect(const HsQuestSelectParams* p, cudaStream_t stream) {
  using namespace hs_sparse;
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->numReqs < 0 || p->numReqs > 65535 || p->numKvHeads <= 0 || p->numHeads <= 0 ||
      p->numHeads % p->numKvHeads != 0 || p->headDim <= 0 || p->headDim % 8 != 0 || p->headDim > 256 ||
      p->blockSize <= 0 || p->tableStride <= 0 || p->numSlots <= 0 || p->budgetPages <= 0 || p->sinkPages < 0 ||
      p->windowPages < 1 || p->digestsPerPage < 1 || p->qkvRowStride < p->numHeads * p->headDim ||
      (p->digestDtype != HS_DIGEST_BF16 && p->digestDtype != HS_DIGEST_FP8) ||
      scoreSmemBytes(p->numHeads / p->numKvHeads, p->headDim) > 48 * 1024)
    return cudaErrorInvalidValue;
  if (p->numReqs == 0) return cudaSuccess;
  if (p->qkv == nullptr || p->digests == nullptr || p->seqLens == nullptr || p->reqSlot == nullptr ||
      p->hostBlockTable == nullptr || p->selPages == nullptr || p->selCount == nullptr || p->scratch == nullptr ||
      !aligned16(p->digests) || (reinterpret_cast<uintptr_t>(p->scratch) & 7) != 0 ||
      p->scratchBytes < hsQuestSelectScratchBytes(p->numReqs, p->numKvHeads, p->tableStride))
    return cudaErrorInvalidValue;
  const dim3 scoreGrid(scoreCtasPerItem(p), p->numKvHeads, p->numReqs);
  if (p->numKvHeads > 65535) return cudaErrorInvalidValue;
  const size_t smem = scoreSmemBytes(p->numHeads / p->numKvHeads, p->headDim);
  const bool fp8 = p->digestDtype == HS_DIGEST_FP8;
  switch (scoreChunk(p->digestsPerPage, scoreLanes(p->headDim))) {
    case 4:
      if (fp8) questScoreKernel<true, 4><<<scoreGrid, kThreads, smem, stream>>>(*p);
      else questScoreKernel<false, 4><<<scoreGrid, kThreads, smem, stream>>>(*p);
      break;
    case 2:
      if (fp8) questScoreKernel<true, 2><<<scoreGrid, kThreads, smem, stream>>>(*p);
      else questScoreKernel<false, 2><<<scoreGrid, kThreads, smem, stream>>>(*p);
      break;
    default:
      if (fp8) questScoreKernel<true, 1><<<scoreGrid, kThreads, smem, stream>>>(*p);
      else questScoreKernel<false, 1><<<scoreGrid, kThreads, smem, stream>>>(*p);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const dim3 grid(p->numKvHeads, p->numReqs);
  questSelectKernel<<<grid, kThreads, selectSmemBytes(), stream>>>(*p);
  return cudaGetLastError();
}
