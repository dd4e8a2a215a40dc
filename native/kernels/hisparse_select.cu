// Quest page selection (hisparse.h hsQuestSelect), two kernels:
// questScoreKernel, one CTA per (chunk of kScorePages pages, kv head, request), so that even one
// request with a long context spreads over the GPU:
// 1. the group's queries in float64 (shared memory, [G, D]);
// 2. one thread per page computes its score, the largest of the group's per-head Quest bounds
//    (quest.ts questScore), each sequentially over the head dim in float64 with the oracle's
//    operation order (no FMA: __dmul_rn / __dadd_rn), and stores an order-preserving 64-bit key
//    (0 marks a forced page, which is not a candidate);
// questSelectKernel, one CTA per (kv head, request):
// 3. a radix select over the keys (8 passes of 8 bits, MSB first, shared-memory histograms)
//    finds the k-th largest key T and how many keys equal to T are taken;
// 4. one ordered pass over the pages (CTA scans) takes the forced pages, the keys > T and the
//    first keys == T in page order (the oracle's tie rule: lower page first), and writes the
//    selection ascending.
// Scores read 2 * D bf16 of digest per page, once for up to kHeadTile heads, and do 4 float64
// ops per element and head: G heads per group cost about G float64 ops per digest byte, so on an
// H100/H200 class GPU (~34 TFLOP/s FP64, ~4.8 TB/s) scoring stays memory-bound up to ~7 heads
// per group and becomes FP64-bound beyond. Both grids are static (the
// chunk count comes from tableStride), rows read their lengths from device memory.
#include <cuda_bf16.h>

#include <climits>
#include <cmath>

#include "hisparse.h"
#include "hisparse_common.cuh"
#include "radix_select.cuh"

namespace hs_sparse {
namespace {

// The kernels take the launcher's HsQuestSelectParams by value (no second copy of its fields);
// these are the typed views of its untyped pointers.
/** bf16 bits of the qkv rows. */
__device__ __forceinline__ const uint16_t* qkvBits(const HsQuestSelectParams& a) {
  return static_cast<const uint16_t*>(a.qkv);
}
/** bf16 bits of the digests [numHostBlocks, 2, Hkv, D]. */
__device__ __forceinline__ const uint16_t* digestBits(const HsQuestSelectParams& a) {
  return static_cast<const uint16_t*>(a.digests);
}
/** The sort keys in the scratch: [numReqs, Hkv, tableStride]. */
__device__ __forceinline__ unsigned long long* sortKeys(const HsQuestSelectParams& a) {
  return static_cast<unsigned long long*>(a.scratch);
}

/** Pages scored by one CTA of questScoreKernel (one per thread). */
constexpr int kScorePages = kThreads;

/** Order-preserving 64-bit key of a float64 score (larger score, larger key); -0 counts as +0. */
__device__ __forceinline__ unsigned long long orderKey(double s) {
  const unsigned long long b = s == 0.0 ? 0ull : static_cast<unsigned long long>(__double_as_longlong(s));
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

/** Heads of a group whose sums stay in registers; larger groups take several passes. */
constexpr int kHeadTile = 8;

/**
 * The largest per-head Quest bound of the group over one page (quest.ts questScore):
 * max over h of sum_i (qPos[h,i] * max[i] + qNeg[h,i] * min[i]), qPos = max(q, 0), qNeg = min(q, 0);
 * a NaN head sum counts as -inf (all NaN: -inf), as in the oracle.
 * q: the group's queries [G, D] in float64 (shared memory).
 */
__device__ __forceinline__ double pageScore(const HsQuestSelectParams& a, const double* q, int G, int hb, int g) {
  const int D = a.headDim;
  const uint4* mn = reinterpret_cast<const uint4*>(digestBits(a) + (static_cast<size_t>(hb) * 2 * a.numKvHeads + g) * D);
  const uint4* mx = mn + static_cast<size_t>(a.numKvHeads) * D / 8;
  double best = -INFINITY;
  for (int h0 = 0; h0 < G; h0 += kHeadTile) {
    double s[kHeadTile];
#pragma unroll
    for (int t = 0; t < kHeadTile; ++t) s[t] = 0.0;
    for (int c = 0; c < D / 8; ++c) {
      const uint4 lo = mn[c];
      const uint4 hi = mx[c];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int i = c * 8 + e;
        const double vhi = static_cast<double>(bf16Bits(lane16(hi, e)));
        const double vlo = static_cast<double>(bf16Bits(lane16(lo, e)));
#pragma unroll
        for (int t = 0; t < kHeadTile; ++t) {
          if (h0 + t >= G) break;
          const double v = q[(h0 + t) * D + i];
          const double up = __dmul_rn(v > 0.0 ? v : 0.0, vhi);
          const double dn = __dmul_rn(v > 0.0 ? 0.0 : v, vlo);
          s[t] = __dadd_rn(s[t], __dadd_rn(up, dn));
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kHeadTile; ++t) {
      if (h0 + t >= G) break;
      const double v = s[t] != s[t] ? -INFINITY : s[t];
      if (v > best) best = v;
    }
  }
  return best;
}

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

/** Scores one chunk of pages of one (row, kv head) into the keys (step 2 of the file comment). */
__global__ void __launch_bounds__(kThreads) questScoreKernel(const HsQuestSelectParams a) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* qg = reinterpret_cast<double*>(smem);  // [G, D]
  const int chunk = blockIdx.x;
  const int g = blockIdx.y;
  const int r = blockIdx.z;
  const SelectRow row = selectRow(a, r);
  // Rows that fit the budget take every page and need no score.
  if (!row.valid || row.numPages <= a.budgetPages || chunk * kScorePages >= row.numPages) return;
  const int G = a.numHeads / a.numKvHeads;
  const uint16_t* q = qkvBits(a) + static_cast<size_t>(row.qRow) * a.qkvRowStride;
  for (int j = threadIdx.x; j < G * a.headDim; j += blockDim.x)
    qg[j] = static_cast<double>(bf16Bits(q[static_cast<size_t>(g * G) * a.headDim + j]));
  __syncthreads();
  const int p = chunk * kScorePages + static_cast<int>(threadIdx.x);
  if (p >= row.numPages) return;
  unsigned long long key = 0;  // forced: not a candidate
  if (!row.forced(a, p)) {
    const int hb = a.hostBlockTable[static_cast<size_t>(row.slot) * a.tableStride + p];
    // An invalid host block (never in a consistent table) ranks lowest instead of faulting.
    key = hb >= 0 && hb < a.numHostBlocks ? orderKey(pageScore(a, qg, G, hb, g)) : 1ull;
  }
  sortKeys(a)[(static_cast<size_t>(r) * a.numKvHeads + g) * a.tableStride + p] = key;
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
  if (numPages <= a.budgetPages) {  // the whole context fits the budget: every page
    for (int p = threadIdx.x; p < numPages; p += blockDim.x) out[p] = p;
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
    eqSoFar += eqTotal;
    selSoFar += selTotal;
  }
  if (threadIdx.x == 0) a.selCount[item] = selSoFar;
}

/** Dynamic shared memory of a scoring CTA: the group's queries, float64 [G, D]. */
size_t scoreSmemBytes(int groupSize, int headDim) { return sizeof(double) * groupSize * headDim; }

/** Dynamic shared memory of a selection CTA: histogram, scan and broadcast words. */
size_t selectSmemBytes() { return (256 + 32 + 8) * sizeof(int); }

}  // namespace
}  // namespace hs_sparse

extern "C" size_t hsQuestSelectScratchBytes(int numReqs, int numKvHeads, int tableStride) {
  if (numReqs <= 0 || numKvHeads <= 0 || tableStride <= 0) return 0;
  return static_cast<size_t>(numReqs) * numKvHeads * tableStride * sizeof(unsigned long long);
}

extern "C" cudaError_t hsQuestSelect(const HsQuestSelectParams* p, cudaStream_t stream) {
  using namespace hs_sparse;
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->numReqs < 0 || p->numReqs > 65535 || p->numKvHeads <= 0 || p->numHeads <= 0 ||
      p->numHeads % p->numKvHeads != 0 || p->headDim <= 0 || p->headDim % 8 != 0 || p->headDim > 256 ||
      p->blockSize <= 0 || p->tableStride <= 0 || p->numSlots <= 0 || p->budgetPages <= 0 || p->sinkPages < 0 ||
      p->windowPages < 1 || p->qkvRowStride < p->numHeads * p->headDim ||
      scoreSmemBytes(p->numHeads / p->numKvHeads, p->headDim) > 48 * 1024)
    return cudaErrorInvalidValue;
  if (p->numReqs == 0) return cudaSuccess;
  if (p->qkv == nullptr || p->digests == nullptr || p->seqLens == nullptr || p->reqSlot == nullptr ||
      p->hostBlockTable == nullptr || p->selPages == nullptr || p->selCount == nullptr || p->scratch == nullptr ||
      !aligned16(p->digests) || (reinterpret_cast<uintptr_t>(p->scratch) & 7) != 0 ||
      p->scratchBytes < hsQuestSelectScratchBytes(p->numReqs, p->numKvHeads, p->tableStride))
    return cudaErrorInvalidValue;
  const int chunks = (p->tableStride + kScorePages - 1) / kScorePages;
  const dim3 scoreGrid(chunks, p->numKvHeads, p->numReqs);
  if (p->numKvHeads > 65535) return cudaErrorInvalidValue;
  questScoreKernel<<<scoreGrid, kThreads, scoreSmemBytes(p->numHeads / p->numKvHeads, p->headDim), stream>>>(*p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const dim3 grid(p->numKvHeads, p->numReqs);
  questSelectKernel<<<grid, kThreads, selectSmemBytes(), stream>>>(*p);
  return cudaGetLastError();
}
