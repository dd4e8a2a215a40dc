// MoE permutation by expert and weighted un-permute (hsMoePermute, hsMoeUnpermute; moe.h).
//
// Permutation = a stable counting sort of the T*k slots by expert id (the CPU oracle's order:
// within an expert, ascending (token, slot)). Row of slot i with expert e:
//   offsets[e] + (slots before i with expert e) = offsets[e] + before(block of i, e) + rank in block.
// Small batches (<= kSmallSlots slots: decode) run one kernel in which every CTA loads all ids into
// shared memory, histograms them (all slots, and those before its own), scans, and copies its own
// tokens' rows: one launch, a few microseconds. Larger ones (prefill) run three: per-block
// histograms, one CTA scanning them per expert (block bases and offsets), and a scatter kernel.
#include "common.cuh"
#include "moe.h"

namespace hs {
namespace {

constexpr int kPermuteThreads = 256;
/** Up to this many slots, the single-kernel path (every CTA histograms every id). */
constexpr int kSmallSlots = 4096;
/** Slots per CTA of the single-kernel path (tokens per CTA = max(1, this / k)). */
constexpr int kSmallCtaSlots = 32;
/** Slots per block of the three-kernel path (tokens per block = max(1, this / k)). */
constexpr int kLargeBlockSlots = 512;
/** Threads of the scan kernel (>= HS_MOE_MAX_EXPERTS: one per expert). */
constexpr int kScanThreads = HS_MOE_MAX_EXPERTS;

struct PermuteArgs {
  const unsigned char* x;
  const int32_t* ids;
  unsigned char* hidden;
  int32_t* offsets;
  int32_t* slotToRow;
  int32_t* blockBase;  // [numBlocks, E] (three-kernel path)
  int T, k, E;
  size_t rowBytes;
  int tokPerCta;  // tokens per CTA / block
};

__device__ __forceinline__ bool validExpert(int e, int E) { return e >= 0 && e < E; }

/**
 * Exclusive scan of counts[0..n) into out[0..n] (out[n] = total) by warp 0 of the block (each lane
 * scans a contiguous chunk, then the lane totals are scanned with shuffles). Callers
 * __syncthreads() before and after.
 */
__device__ void warpExclusiveScan(const int* counts, int* out, int n, int lane) {
  const int per = (n + 31) / 32;
  const int b = min(n, lane * per);
  const int end = min(n, b + per);
  int local = 0;
  for (int i = b; i < end; ++i) local += counts[i];
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  int run = incl - local;
  for (int i = b; i < end; ++i) {
    out[i] = run;
    run += counts[i];
  }
  if (lane == 31) out[n] = incl;
}

/** Copies each slot's token row to its destination row (-1: none), `Word`-sized accesses. */
template <typename Word>
__device__ void copyRows(const PermuteArgs& a, const int* rowOf, int s0, int nSlots) {
  const size_t words = a.rowBytes / sizeof(Word);
  const Word* src = reinterpret_cast<const Word*>(a.x);
  Word* dst = reinterpret_cast<Word*>(a.hidden);
  const size_t total = static_cast<size_t>(nSlots) * words;
  for (size_t w = threadIdx.x; w < total; w += blockDim.x) {
    const int slot = static_cast<int>(w / words);
    const size_t q = w - static_cast<size_t>(slot) * words;
    const int row = rowOf[slot];
    if (row < 0) continue;  // an id outside [0, E): no row
    const int t = (s0 + slot) / a.k;
    dst[static_cast<size_t>(row) * words + q] = src[static_cast<size_t>(t) * words + q];
  }
}

/** Rank of slot i among the earlier slots [s0, i) of ids with the same expert (linear scan). */
__device__ __forceinline__ int rankInRange(const int* ids, int s0, int i, int e) {
  int r = 0;
  for (int q = s0; q < i; ++q) r += ids[q] == e ? 1 : 0;
  return r;
}

/**
 * Single-kernel path. Shared: ids [S], counts [E], before [E], offs [E + 1], rowOf [ctaSlots].
 * CTA b owns tokens [b * tokPerCta, ...) and their slots [s0, s1).
 */
__global__ void __launch_bounds__(kPermuteThreads) permuteSmallKernel(const PermuteArgs a, bool vec16) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int S = a.T * a.k;
  const int E = a.E;
  int* ids = reinterpret_cast<int*>(smem);
  int* counts = ids + S;
  int* before = counts + E;
  int* offs = before + E;
  int* rowOf = offs + E + 1;
  const int s0 = blockIdx.x * a.tokPerCta * a.k;
  const int s1 = min(S, s0 + a.tokPerCta * a.k);
  for (int i = threadIdx.x; i < E; i += blockDim.x) {
    counts[i] = 0;
    before[i] = 0;
  }
  for (int i = threadIdx.x; i < S; i += blockDim.x) ids[i] = a.ids[i];
  __syncthreads();
  for (int i = threadIdx.x; i < S; i += blockDim.x) {
    const int e = ids[i];
    if (!validExpert(e, E)) continue;
    atomicAdd(&counts[e], 1);
    if (i < s0) atomicAdd(&before[e], 1);
  }
  __syncthreads();
  if (threadIdx.x < 32) warpExclusiveScan(counts, offs, E, threadIdx.x);
  __syncthreads();
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i <= E; i += blockDim.x) a.offsets[i] = offs[i];
  for (int i = s0 + threadIdx.x; i < s1; i += blockDim.x) {
    const int e = ids[i];
    const int row = validExpert(e, E) ? offs[e] + before[e] + rankInRange(ids, s0, i, e) : -1;
    rowOf[i - s0] = row;
    a.slotToRow[i] = row;
  }
  __syncthreads();
  if (vec16)
    copyRows<uint4>(a, rowOf, s0, s1 - s0);
  else
    copyRows<uint32_t>(a, rowOf, s0, s1 - s0);
}

/** Three-kernel path, 1/3: blockBase[b, e] = slots of block b with expert e. */
__global__ void __launch_bounds__(kPermuteThreads) permuteCountKernel(const PermuteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  int* counts = reinterpret_cast<int*>(smem);
  const int S = a.T * a.k;
  const int s0 = blockIdx.x * a.tokPerCta * a.k;
  const int s1 = min(S, s0 + a.tokPerCta * a.k);
  for (int i = threadIdx.x; i < a.E; i += blockDim.x) counts[i] = 0;
  __syncthreads();
  for (int i = s0 + threadIdx.x; i < s1; i += blockDim.x) {
    const int e = a.ids[i];
    if (validExpert(e, a.E)) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < a.E; i += blockDim.x) a.blockBase[static_cast<size_t>(blockIdx.x) * a.E + i] = counts[i];
}

/**
 * 2/3 (one CTA, thread e = expert e): blockBase[b, e] becomes offsets[e] + the slots of expert e in
 * blocks before b; offsets = exclusive scan of the expert totals.
 */
__global__ void __launch_bounds__(kScanThreads) permuteScanKernel(const PermuteArgs a, int numBlocks) {
  extern __shared__ __align__(16) unsigned char smem[];
  int* totals = reinterpret_cast<int*>(smem);
  int* offs = totals + a.E;
  const int e = threadIdx.x;
  if (e < a.E) {
    int run = 0;
    for (int b = 0; b < numBlocks; ++b) {
      int* p = a.blockBase + static_cast<size_t>(b) * a.E + e;
      const int c = *p;
      *p = run;
      run += c;
    }
    totals[e] = run;
  }
  __syncthreads();
  if (threadIdx.x < 32) warpExclusiveScan(totals, offs, a.E, threadIdx.x);
  __syncthreads();
  for (int i = threadIdx.x; i <= a.E; i += blockDim.x) a.offsets[i] = offs[i];
  if (e < a.E) {
    const int base = offs[e];
    for (int b = 0; b < numBlocks; ++b) a.blockBase[static_cast<size_t>(b) * a.E + e] += base;
  }
}

/** 3/3: rows of block b's slots (its base + rank within the block), then the row copies. */
__global__ void __launch_bounds__(kPermuteThreads) permuteScatterKernel(const PermuteArgs a, bool vec16) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int S = a.T * a.k;
  const int s0 = blockIdx.x * a.tokPerCta * a.k;
  const int s1 = min(S, s0 + a.tokPerCta * a.k);
  int* ids = reinterpret_cast<int*>(smem);  // [blockSlots], indexed by i - s0
  int* rowOf = ids + a.tokPerCta * a.k;
  for (int i = s0 + threadIdx.x; i < s1; i += blockDim.x) ids[i - s0] = a.ids[i];
  __syncthreads();
  const int32_t* base = a.blockBase + static_cast<size_t>(blockIdx.x) * a.E;
  for (int i = s0 + threadIdx.x; i < s1; i += blockDim.x) {
    const int e = ids[i - s0];
    const int row = validExpert(e, a.E) ? base[e] + rankInRange(ids, 0, i - s0, e) : -1;
    rowOf[i - s0] = row;
    a.slotToRow[i] = row;
  }
  __syncthreads();
  if (vec16)
    copyRows<uint4>(a, rowOf, s0, s1 - s0);
  else
    copyRows<uint32_t>(a, rowOf, s0, s1 - s0);
}

/** Blocks of the three-kernel path for T tokens. */
inline int largeBlocks(int T, int k, int* tokPerBlock) {
  *tokPerBlock = kLargeBlockSlots / k > 1 ? kLargeBlockSlots / k : 1;
  return ceilDiv(T, *tokPerBlock);
}

// ---- un-permute -------------------------------------------------------------------------------

constexpr int kUnpermuteThreads = 128;

/** One CTA per token; thread -> VEC consecutive elements. */
template <typename T, int VEC>
__global__ void __launch_bounds__(kUnpermuteThreads)
    unpermuteKernel(const T* __restrict__ y, const int32_t* __restrict__ slotToRow, const float* __restrict__ w,
                    const T* __restrict__ shared, T* __restrict__ out, int k, int H, int numRows) {
  const int t = blockIdx.x;
  const int32_t* rows = slotToRow + static_cast<size_t>(t) * k;
  const float* wt = w + static_cast<size_t>(t) * k;
  for (int i = threadIdx.x * VEC; i < H; i += blockDim.x * VEC) {
    float acc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; ++v) acc[v] = 0.f;
    for (int j = 0; j < k; ++j) {
      const int r = rows[j];
      if (r < 0 || r >= numRows) continue;  // no row (an invalid id upstream): adds nothing
      const float wj = wt[j];
      const Vec<T, VEC> yv = loadVec<T, VEC>(y + static_cast<size_t>(r) * H + i);
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[v] = __fadd_rn(acc[v], __fmul_rn(toFloat(yv.v[v]), wj));
    }
    if (shared != nullptr) {
      const Vec<T, VEC> sv = loadVec<T, VEC>(shared + static_cast<size_t>(t) * H + i);
#pragma unroll
      for (int v = 0; v < VEC; ++v) acc[v] = __fadd_rn(acc[v], toFloat(sv.v[v]));
    }
    Vec<T, VEC> o;
#pragma unroll
    for (int v = 0; v < VEC; ++v) o.v[v] = fromFloat<T>(acc[v]);
    storeVec<T, VEC>(out + static_cast<size_t>(t) * H + i, o);
  }
}

template <typename T>
void launchUnpermute(const T* y, const int32_t* rows, const float* w, const T* shared, T* out, int T_, int k, int H,
                     int numRows, cudaStream_t s) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  const bool vec = H % kVec == 0 && aligned(y, 16) && aligned(out, 16) && (shared == nullptr || aligned(shared, 16));
  if (vec)
    unpermuteKernel<T, kVec><<<T_, kUnpermuteThreads, 0, s>>>(y, rows, w, shared, out, k, H, numRows);
  else
    unpermuteKernel<T, 1><<<T_, kUnpermuteThreads, 0, s>>>(y, rows, w, shared, out, k, H, numRows);
}

}  // namespace
}  // namespace hs

extern "C" size_t hsMoePermuteScratchBytes(int numTokens, int topK, int numExperts) {
  if (numTokens <= 0 || topK <= 0 || numExperts <= 0) return 0;
  if (static_cast<long long>(numTokens) * topK <= hs::kSmallSlots) return 0;
  int tok = 0;
  return static_cast<size_t>(hs::largeBlocks(numTokens, topK, &tok)) * numExperts * sizeof(int32_t);
}

extern "C" cudaError_t hsMoePermute(const void* x, const int32_t* topkIds, void* hidden, int32_t* expertOffsets,
                                    int32_t* slotToRow, void* scratch, size_t scratchBytes, int numTokens,
                                    size_t rowBytes, int topK, int numExperts, cudaStream_t stream) {
  if (numTokens < 0 || topK < 1 || numExperts < 1 || numExperts > HS_MOE_MAX_EXPERTS || rowBytes % 4 != 0)
    return cudaErrorInvalidValue;
  if (expertOffsets == nullptr) return cudaErrorInvalidValue;
  if (static_cast<long long>(numTokens) * topK > (1ll << 30)) return cudaErrorInvalidValue;
  const int S = numTokens * topK;
  const int E = numExperts;
  if (S == 0) return cudaMemsetAsync(expertOffsets, 0, sizeof(int32_t) * (E + 1), stream);
  if (x == nullptr || topkIds == nullptr || hidden == nullptr || slotToRow == nullptr) return cudaErrorInvalidValue;
  const bool vec16 = rowBytes % 16 == 0 && hs::aligned(x, 16) && hs::aligned(hidden, 16);
  hs::PermuteArgs a{static_cast<const unsigned char*>(x), topkIds, static_cast<unsigned char*>(hidden),
                    expertOffsets, slotToRow, nullptr, numTokens, topK, E, rowBytes, 1};
  if (S <= hs::kSmallSlots) {
    a.tokPerCta = hs::kSmallCtaSlots / topK > 1 ? hs::kSmallCtaSlots / topK : 1;
    const int blocks = hs::ceilDiv(numTokens, a.tokPerCta);
    const size_t smem = sizeof(int) * (S + 3 * E + 1 + a.tokPerCta * topK);
    hs::permuteSmallKernel<<<blocks, hs::kPermuteThreads, smem, stream>>>(a, vec16);
    return cudaGetLastError();
  }
  const int blocks = hs::largeBlocks(numTokens, topK, &a.tokPerCta);
  if (scratch == nullptr || scratchBytes < static_cast<size_t>(blocks) * E * sizeof(int32_t))
    return cudaErrorInvalidValue;
  a.blockBase = static_cast<int32_t*>(scratch);
  hs::permuteCountKernel<<<blocks, hs::kPermuteThreads, sizeof(int) * E, stream>>>(a);
  hs::permuteScanKernel<<<1, hs::kScanThreads, sizeof(int) * (2 * E + 1), stream>>>(a, blocks);
  const size_t smem = sizeof(int) * 2 * a.tokPerCta * topK;
  hs::permuteScatterKernel<<<blocks, hs::kPermuteThreads, smem, stream>>>(a, vec16);
  return cudaGetLastError();
}

extern "C" cudaError_t hsMoeUnpermute(const void* y, const int32_t* slotToRow, const float* topkWeights,
                                      const void* shared, void* out, int numTokens, int topK, int hidden,
                                      int numRows, int dtype, cudaStream_t stream) {
  if (numTokens < 0 || topK < 1 || hidden < 1 || numRows < 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  if (y == nullptr || slotToRow == nullptr || topkWeights == nullptr || out == nullptr) return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    hs::launchUnpermute<T>(static_cast<const T*>(y), slotToRow, topkWeights, static_cast<const T*>(shared),
                           static_cast<T*>(out), numTokens, topK, hidden, numRows, stream);
    err = cudaGetLastError();
  });
  return err;
}
