// The token-granular hot buffer of DSA models (hisparse.h hsRowResolve, hsRowCopy; issue 15):
// one CTA per row resolves an indexer's selected token positions to device slots (own page,
// hot row, or an LRU victim row that receives the row from the host tier), writes the view that
// Backend.mla.attention reads and the miss list; hsRowCopy then copies the misses of every
// layer that shares the indexer from mapped pinned host memory with 16-byte loads. Results equal
// the CPU oracle's (LruHotRowResolver + HotBufferLru in src/attention/sparse/dsa.ts): the oracle
// inserts misses one at a time, each taking the least recently used row not used in the round
// (ties: lowest row), so the victims are the free rows in (lastUse, row) order.
#include "hisparse.h"
#include "hisparse_common.cuh"

#include <algorithm>

namespace hs_sparse {
namespace {

/** Largest hot buffer (rows) one CTA handles: 2 x index_topk 2048 = 4096 rows, with room. */
constexpr int kMaxHotRows = 16384;
/** Largest top-k (entries per row). */
constexpr int kMaxTopk = 8192;
/** Vectors each thread keeps in flight in hsRowCopy. */
constexpr int kCopyUnroll = 4;
/** CTAs per row in hsRowCopy. */
constexpr int kCopySplit = 8;

/** Shared-memory layout (ints): per hot row position / lastUse, per entry victim / miss / rank list, hit bits. */
struct RowSmem {
  int* pos;
  int* lastUse;
  int* victim;
  int* missJ;
  int* listA;
  unsigned* hitBits;
  int* warpSums;
  int* bc;
  __device__ RowSmem(unsigned char* smem, int numHot, int K) {
    pos = reinterpret_cast<int*>(smem);
    lastUse = pos + numHot;
    victim = lastUse + numHot;
    missJ = victim + K;
    listA = missJ + K;
    hitBits = reinterpret_cast<unsigned*>(listA + K);
    warpSums = reinterpret_cast<int*>(hitBits + (K + 31) / 32);
    bc = warpSums + 32;
  }
};

size_t rowSmemBytes(int numHot, int K) {
  return (2 * static_cast<size_t>(numHot) + 3 * static_cast<size_t>(K) + (K + 31) / 32 + 48) * sizeof(int);
}

/** Free rows (not used in round `tick`) with lastUse <= v, over the CTA (every thread gets it). */
__device__ int countFreeAtMost(const RowSmem& s, int numHot, int tick, int v) {
  int c = 0;
  for (int i = threadIdx.x; i < numHot; i += blockDim.x) c += (s.lastUse[i] < tick && s.lastUse[i] <= v) ? 1 : 0;
  return blockSum(c, s.warpSums);
}

/**
 * victim[0 .. M) = the M free rows first in (lastUse, row) order. Threshold v: the smallest lastUse
 * with at least M free rows at or below it (binary search over [-1, tick - 1]); rows below v are
 * ranked pairwise (fewer than M), rows at v follow in row order.
 */
__device__ void chooseVictims(const RowSmem& s, int numHot, int tick, int M) {
  int lo = -1;
  int hi = tick - 1;
  while (lo < hi) {
    const int mid = lo + ((hi - lo) >> 1);
    if (countFreeAtMost(s, numHot, tick, mid) >= M)
      hi = mid;
    else
      lo = mid + 1;
  }
  const int v = lo;
  // Fewer than M free rows lie below v (v is the smallest with at least M at or below it).
  const int cLess = v > -1 ? countFreeAtMost(s, numHot, tick, v - 1) : 0;
  // Group A (lastUse < v) compacted in row order, then ranked; group B (lastUse == v) in row order after it.
  int numA = 0;
  int numB = 0;
  for (int base = 0; base < numHot; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const int lu = i < numHot ? s.lastUse[i] : tick;
    const bool a = lu < v;
    const bool b = lu == v && lu < tick;
    int totalA = 0;
    int totalB = 0;
    const int ia = numA + blockExclusiveScan(a ? 1 : 0, &totalA, s.warpSums);
    const int ib = numB + blockExclusiveScan(b ? 1 : 0, &totalB, s.warpSums);
    if (a) s.listA[ia] = i;  // ia < cLess < M <= K
    if (b && cLess + ib < M) s.victim[cLess + ib] = i;
    numA += totalA;
    numB += totalB;
  }
  __syncthreads();
  for (int a = threadIdx.x; a < cLess; a += blockDim.x) {
    const int i = s.listA[a];
    const int lu = s.lastUse[i];
    int rank = 0;
    for (int b = 0; b < cLess; ++b) {
      const int o = s.listA[b];
      const int lo2 = s.lastUse[o];
      rank += (lo2 < lu || (lo2 == lu && o < i)) ? 1 : 0;
    }
    s.victim[rank] = i;
  }
  __syncthreads();
}

/** Writes entry j's view: device slot `slot` (or -1: no entry) as position j * bs + offset in table column j. */
__device__ __forceinline__ void writeView(const HsRowResolveParams& p, size_t rowBase, int j, int slot) {
  if (slot < 0) {
    p.viewTopk[rowBase + j] = -1;
    p.viewTable[rowBase + j] = 0;
  } else {
    p.viewTopk[rowBase + j] = j * p.blockSize + slot % p.blockSize;
    p.viewTable[rowBase + j] = slot / p.blockSize;
  }
}

__global__ void __launch_bounds__(kThreads) rowResolveKernel(const HsRowResolveParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int r = blockIdx.x;
  const bool active = p.rowFlags == nullptr || p.rowFlags[r] != 0;
  const int slot = p.reqSlot[r];
  if (!active || slot < 0 || slot >= p.numSlots) return;
  const int bs = p.blockSize;
  const int K = p.K;
  const int numHot = p.numHotBlocks * bs;
  const RowSmem s(smem, numHot, K);
  const int tokRow = p.tokenRow == nullptr ? r : p.tokenRow[r];
  const int32_t* sel = p.topk + static_cast<size_t>(tokRow) * K;
  const size_t rowBase = static_cast<size_t>(r) * K;
  const int32_t* blockRow = p.blockTable + static_cast<size_t>(slot) * p.tableStride;
  const int32_t* hostRow = p.hostBlockTable + static_cast<size_t>(slot) * p.tableStride;
  const int32_t* hotRow = p.hotBlocks + static_cast<size_t>(slot) * p.numHotBlocks;
  const size_t lru = static_cast<size_t>(slot) * p.numSources + p.source;
  int32_t* posG = p.lruPos + lru * numHot;
  int32_t* lastG = p.lruLastUse + lru * numHot;
  const int seqLen = p.seqLens[r];
  if (threadIdx.x == 0) {
    const int t = p.lruTick[lru] + 1;  // the round starts (HotBufferLru.beginRound)
    p.lruTick[lru] = t;
    s.bc[0] = t;
  }
  for (int i = threadIdx.x; i < numHot; i += blockDim.x) {
    s.pos[i] = posG[i];
    s.lastUse[i] = lastG[i];
  }
  for (int i = threadIdx.x; i < (K + 31) / 32; i += blockDim.x) s.hitBits[i] = 0;
  int mine = 0;
  for (int j = threadIdx.x; j < K; j += blockDim.x) mine += sel[j] >= 0 ? 1 : 0;
  const int n = blockSum(mine, s.warpSums);  // entries: the non-negative prefix of the row
  const int tick = s.bc[0];
  // Hits: each hot row looks its position up in the selection (the oracle's pageToSlot, inverted).
  for (int i = threadIdx.x; i < numHot; i += blockDim.x) {
    const int ps = s.pos[i];
    if (ps < 0 || ps >= seqLen || ps / bs >= p.tableStride) continue;
    const int j = lowerBound(sel, n, ps);
    if (j < n && sel[j] == ps && blockRow[ps / bs] < 0) {
      s.lastUse[i] = tick;
      writeView(p, rowBase, j, hotRow[i / bs] * bs + i % bs);
      atomicOr(&s.hitBits[j >> 5], 1u << (j & 31));
    }
  }
  __syncthreads();
  // Own slots, hits, and misses numbered in selection order.
  int hits = 0;
  int errors = 0;
  int numMisses = 0;
  for (int base = 0; base < K; base += blockDim.x) {
    const int j = base + threadIdx.x;
    bool miss = false;
    if (j < K) {
      const int ps = j < n ? sel[j] : -1;
      if (ps < 0) {
        writeView(p, rowBase, j, -1);
      } else if (ps >= seqLen || ps / bs >= p.tableStride) {
        writeView(p, rowBase, j, -1);  // the oracle throws: counted as an error, attention skips it
        ++errors;
      } else if (blockRow[ps / bs] >= 0) {
        writeView(p, rowBase, j, blockRow[ps / bs] * bs + ps % bs);
      } else if (s.hitBits[j >> 5] & (1u << (j & 31))) {
        ++hits;
      } else {
        miss = true;
      }
    }
    int total = 0;
    const int m = numMisses + blockExclusiveScan(miss ? 1 : 0, &total, s.warpSums);
    if (miss) s.missJ[m] = j;  // m < K: at most one miss per entry
    numMisses += total;
  }
  __syncthreads();
  int freeRows = 0;
  for (int i = threadIdx.x; i < numHot; i += blockDim.x) freeRows += s.lastUse[i] < tick ? 1 : 0;
  const int M = min(numMisses, blockSum(freeRows, s.warpSums));
  // The misses beyond the free rows (the oracle throws): no entry, one error each.
  for (int m = M + threadIdx.x; m < numMisses; m += blockDim.x) {
    writeView(p, rowBase, s.missJ[m], -1);
    ++errors;
  }
  __syncthreads();
  if (M > 0) chooseVictims(s, numHot, tick, M);
  int32_t* held = p.heldCount + static_cast<size_t>(slot) * p.tableStride;
  for (int m = threadIdx.x; m < M; m += blockDim.x) {
    const int i = s.victim[m];
    const int j = s.missJ[m];
    const int ps = sel[j];
    const int evicted = s.pos[i];
    s.pos[i] = ps;
    s.lastUse[i] = tick;
    const int hot = hotRow[i / bs];
    const int dslot = hot * bs + i % bs;
    if (evicted >= 0 && evicted / bs < p.tableStride && atomicSub(&held[evicted / bs], 1) == 1)
      atomicSub(&p.heldPages[slot], 1);
    if (atomicAdd(&held[ps / bs], 1) == 0) atomicAdd(&p.heldPages[slot], 1);
    const int hb = hostRow[ps / bs];
    const bool ok = hb >= 0 && hb < p.numHostBlocks && hot >= 0 && hot < p.numBlocks;
    if (!ok) ++errors;  // not copied (hsRowCopy skips slot -1)
    p.missSrc[rowBase + m] = ok ? hb * bs + ps % bs : -1;
    p.missDst[rowBase + m] = ok ? dslot : -1;
    writeView(p, rowBase, j, ok ? dslot : -1);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < numHot; i += blockDim.x) {
    posG[i] = s.pos[i];
    lastG[i] = s.lastUse[i];
  }
  const int totalHits = blockSum(hits, s.warpSums);
  const int totalErrors = blockSum(errors, s.warpSums);
  if (threadIdx.x == 0) {
    p.viewSeqLens[r] = K * bs;
    p.missCount[r] = M;
    atomicAdd(&p.counters[0], static_cast<unsigned long long>(totalHits));
    atomicAdd(&p.counters[1], static_cast<unsigned long long>(M));
    if (totalErrors > 0) atomicAdd(&p.counters[2], static_cast<unsigned long long>(totalErrors));
  }
}

/** hsRowCopy: CTA (r, y) copies every kCopySplit-th chunk of row r's misses. */
__global__ void __launch_bounds__(kThreads) rowCopyKernel(uint4* cache, const uint4* host, const int32_t* missSrc,
                                                        const int32_t* missDst, const int32_t* missCount,
                                                        const int32_t* rowFlags, int K, int vecsPerRow,
                                                        int numDeviceSlots, int numHostSlots) {
  const int r = blockIdx.x;
  if (rowFlags != nullptr && rowFlags[r] == 0) return;
  const int count = min(max(missCount[r], 0), K);
  const long long total = static_cast<long long>(count) * vecsPerRow;
  const size_t rowBase = static_cast<size_t>(r) * K;
  const long long stride = static_cast<long long>(gridDim.y) * blockDim.x * kCopyUnroll;
  for (long long base = static_cast<long long>(blockIdx.y) * blockDim.x * kCopyUnroll; base < total; base += stride) {
    uint4 v[kCopyUnroll];
    uint4* dst[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      dst[u] = nullptr;
      const long long i = base + static_cast<long long>(u) * blockDim.x + threadIdx.x;
      if (i >= total) continue;
      const int m = static_cast<int>(i / vecsPerRow);
      const int c = static_cast<int>(i - static_cast<long long>(m) * vecsPerRow);
      const int src = missSrc[rowBase + m];
      const int d = missDst[rowBase + m];
      if (src < 0 || src >= numHostSlots || d < 0 || d >= numDeviceSlots) continue;  // counted by hsRowResolve
      v[u] = __ldcs(host + static_cast<size_t>(src) * vecsPerRow + c);  // read once, over the host link
      dst[u] = cache + static_cast<size_t>(d) * vecsPerRow + c;
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      if (dst[u] != nullptr) *dst[u] = v[u];
  }
}


/** Whether hsRowResolve resolved row r (its rule: flagged, or every row without flags, and a valid slot). */
__device__ __forceinline__ bool rowResolved(const int32_t* rowFlags, const int32_t* reqSlot, int r, int numSlots) {
  const int slot = reqSlot[r];
  return (rowFlags == nullptr || rowFlags[r] != 0) && slot >= 0 && slot < numSlots;
}

/** hsRowViewMerge, pass 1: every row's own top-k, table (zero-padded to outStride) and length; resolved rows' view. */
__global__ void __launch_bounds__(kThreads) rowViewMergeKernel(const HsRowViewMergeParams a) {
  const long long nTopk = static_cast<long long>(a.numTokens) * a.K;
  const long long nTables = static_cast<long long>(a.numReqs) * a.outStride;
  const long long n = max(max(nTopk, nTables), static_cast<long long>(a.numReqs));
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    if (i < nTopk) a.outTopk[i] = a.topk[i];
    if (i < nTables) {
      const int r = static_cast<int>(i / a.outStride);
      const int c = static_cast<int>(i - static_cast<long long>(r) * a.outStride);
      int v = 0;
      if (rowResolved(a.rowFlags, a.reqSlot, r, a.numSlots))
        v = c < a.K ? a.viewTable[static_cast<size_t>(r) * a.K + c] : 0;
      else if (c < a.tableStride)
        v = a.blockTables[static_cast<size_t>(r) * a.tableStride + c];
      a.outTables[i] = v;
    }
    if (i < a.numReqs) {
      const int r = static_cast<int>(i);
      a.outSeqLens[r] = rowResolved(a.rowFlags, a.reqSlot, r, a.numSlots) ? a.viewSeqLens[r] : a.seqLens[r];
    }
  }
}

/** hsRowViewMerge, pass 2: CTA r writes resolved row r's view positions over its token's top-k row. */
__global__ void __launch_bounds__(kThreads) rowViewTopkKernel(const HsRowViewMergeParams a) {
  const int r = blockIdx.x;
  if (!rowResolved(a.rowFlags, a.reqSlot, r, a.numSlots)) return;
  const int t = a.tokenRow == nullptr ? r : a.tokenRow[r];
  if (t < 0 || t >= a.numTokens) return;
  for (int j = threadIdx.x; j < a.K; j += blockDim.x)
    a.outTopk[static_cast<size_t>(t) * a.K + j] = a.viewTopk[static_cast<size_t>(r) * a.K + j];
}

}  // namespace
}  // namespace hs_sparse

extern "C" cudaError_t hsRowResolve(const HsRowResolveParams* p, cudaStream_t stream) {
  using namespace hs_sparse;
  if (p == nullptr) return cudaErrorInvalidValue;
  const long long numHot = static_cast<long long>(p->numHotBlocks) * p->blockSize;
  if (p->numReqs < 0 || p->K <= 0 || p->K > kMaxTopk || p->blockSize <= 0 || p->tableStride <= 0 ||
      p->numSlots <= 0 || p->numHotBlocks <= 0 || numHot > kMaxHotRows || p->source < 0 ||
      p->source >= p->numSources || p->numBlocks <= 0 || p->numHostBlocks < 0)
    return cudaErrorInvalidValue;
  if (p->numReqs == 0) return cudaSuccess;
  if (p->topk == nullptr || p->reqSlot == nullptr || p->seqLens == nullptr || p->blockTable == nullptr ||
      p->hostBlockTable == nullptr || p->hotBlocks == nullptr || p->lruPos == nullptr || p->lruLastUse == nullptr ||
      p->lruTick == nullptr || p->heldCount == nullptr || p->heldPages == nullptr || p->viewTopk == nullptr ||
      p->viewTable == nullptr || p->viewSeqLens == nullptr || p->missSrc == nullptr || p->missDst == nullptr ||
      p->missCount == nullptr || p->counters == nullptr)
    return cudaErrorInvalidValue;
  const size_t smem = rowSmemBytes(static_cast<int>(numHot), p->K);
  static std::atomic<unsigned long long> smemSet{0};
  cudaError_t err = ensureSmem(rowResolveKernel, smem, smemSet);
  if (err != cudaSuccess) return err;
  rowResolveKernel<<<p->numReqs, kThreads, smem, stream>>>(*p);
  return cudaGetLastError();
}

extern "C" cudaError_t hsRowCopy(void* cache, const void* hostRows, const int32_t* missSrc, const int32_t* missDst,
                                 const int32_t* missCount, const int32_t* rowFlags, int numReqs, int K,
                                 size_t rowBytes, int numDeviceSlots, int numHostSlots, cudaStream_t stream) {
  using namespace hs_sparse;
  if (numReqs < 0 || K <= 0 || rowBytes == 0 || rowBytes % 16 != 0 || numDeviceSlots <= 0 || numHostSlots < 0)
    return cudaErrorInvalidValue;
  if (numReqs == 0) return cudaSuccess;
  if (cache == nullptr || missSrc == nullptr || missDst == nullptr || missCount == nullptr || !aligned16(cache) ||
      (numHostSlots > 0 && (hostRows == nullptr || !aligned16(hostRows))))
    return cudaErrorInvalidValue;
  const dim3 grid(numReqs, kCopySplit);
  rowCopyKernel<<<grid, kThreads, 0, stream>>>(static_cast<uint4*>(cache), static_cast<const uint4*>(hostRows),
                                               missSrc, missDst, missCount, rowFlags, K,
                                               static_cast<int>(rowBytes / 16), numDeviceSlots, numHostSlots);
  return cudaGetLastError();
}

extern "C" cudaError_t hsRowViewMerge(const HsRowViewMergeParams* a, cudaStream_t stream) {
  using namespace hs_sparse;
  if (a == nullptr || a->numReqs < 0 || a->numTokens < 0 || a->K <= 0 || a->tableStride < 0 ||
      a->outStride < a->K || a->outStride < a->tableStride || a->numSlots <= 0)
    return cudaErrorInvalidValue;
  if (a->numReqs == 0 && a->numTokens == 0) return cudaSuccess;
  if (a->topk == nullptr || a->seqLens == nullptr || a->reqSlot == nullptr || a->viewTopk == nullptr ||
      a->viewTable == nullptr || a->viewSeqLens == nullptr || a->outTopk == nullptr || a->outTables == nullptr ||
      a->outSeqLens == nullptr || (a->tableStride > 0 && a->blockTables == nullptr))
    return cudaErrorInvalidValue;
  const long long n = std::max({static_cast<long long>(a->numTokens) * a->K,
                                static_cast<long long>(a->numReqs) * a->outStride, static_cast<long long>(a->numReqs)});
  const int grid = static_cast<int>(std::min<long long>((n + kThreads - 1) / kThreads, 1024));
  rowViewMergeKernel<<<std::max(grid, 1), kThreads, 0, stream>>>(*a);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || a->numReqs == 0) return err;
  rowViewTopkKernel<<<a->numReqs, kThreads, 0, stream>>>(*a);
  return cudaGetLastError();
}
