// The hot-buffer resolver (hisparse.h hsResolve), plan half: one CTA per (kv head, request) of one
// sparse layer marks hits, assigns LRU victims to misses and writes the (request, kv head) block
// table that sparse attention reads; then either the SM-wide copy pass (hisparse_resolve_copy.cu,
// the split resolver: the plan writes its miss list) or, in the fused resolver, the CTA itself
// copies its misses' K/V slices straight from mapped pinned host memory. Its results equal the CPU
// oracle's (LruHotBufferResolver + HotBufferLru in src/attention/sparse/hot_buffer.ts): the oracle
// inserts misses one at a time, each taking the least recently used slot not yet used in the round
// (ties: lowest slot); since an insert marks its slot used, the victims are exactly the free slots
// in (lastUse, slot) order, which this kernel ranks all at once (O(numHot^2 / threads)
// comparisons, numHot ~ 256). Split or fused, the hot buffer's contents are the same. A selection
// of at most kMaxStagedSel pages is staged in shared memory with each page's own and host block
// first (one round trip), so the passes after it make no dependent global loads on it.
#include <cuda_bf16.h>

#include "hisparse.h"
#include "hisparse_common.cuh"
#include "hisparse_copy.cuh"
#include "pdl.cuh"

namespace hs_sparse {
namespace {

/** Vectors each thread keeps in flight while copying misses (loads issued before stores). */
constexpr int kCopyUnroll = 4;
/** Largest hot buffer (slots) one CTA handles. */
constexpr int kMaxHot = 4096;
/**
 * Most selected pages a CTA stages in shared memory with their own and host blocks (12 bytes
 * each): a selection up to this long is read from global memory once, in one parallel round
 * trip, instead of in dependent loads in every pass (the binary searches of the hits, the miss
 * scan, the victims, the miss list): at batch 1 the plan's latency is what the swap-in waits on.
 */
constexpr int kMaxStagedSel = 2048;

/** Selected pages a CTA stages for a selection stride (the shared memory is sized by it). */
__host__ __device__ inline int stagedSelCap(int selStride) { return selStride < kMaxStagedSel ? selStride : kMaxStagedSel; }

/**
 * Shared-memory layout of one CTA (ints): per slot page / lastUse / victim, per miss its j, hit
 * bits, scan words; then the staged selection: per selected page j its page, own block (-1:
 * INACTIVE) and host block, stagedSelCap(selStride) entries each.
 */
struct ResolveSmem {
  int* page;
  int* lastUse;
  int* victim;
  int* missJ;
  unsigned* hitBits;
  int* warpSums;
  int* bc;
  int* selPage;
  int* selOwn;
  int* selHost;
  __device__ ResolveSmem(unsigned char* smem, int numHot, int selStride) {
    page = reinterpret_cast<int*>(smem);
    lastUse = page + numHot;
    victim = lastUse + numHot;
    missJ = victim + numHot;
    hitBits = reinterpret_cast<unsigned*>(missJ + numHot);
    warpSums = reinterpret_cast<int*>(hitBits + (selStride + 31) / 32);
    bc = warpSums + 32;
    const int cap = stagedSelCap(selStride);
    selPage = bc + 8;
    selOwn = selPage + cap;
    selHost = selOwn + cap;
  }
};

size_t resolveSmemBytes(int numHot, int selStride) {
  return (4 * static_cast<size_t>(numHot) + (selStride + 31) / 32 + 32 + 8 + 3 * static_cast<size_t>(stagedSelCap(selStride))) *
         sizeof(int);
}

/**
 * A (row, kv head)'s selection as the plan reads it: from the staged copy in shared memory when
 * the selection fits it, else from global memory (the page's own and host blocks looked up).
 */
struct SelView {
  const int32_t* sel;       // global [n] ascending pages
  const int32_t* blockRow;  // global [tableStride] own block per page
  const int32_t* hostRow;   // global [tableStride] host block per page
  const ResolveSmem* s;
  int tableStride;
  bool staged;
  __device__ int page(int j) const { return staged ? s->selPage[j] : sel[j]; }
  /** The page's own block (>= 0: ACTIVE), 0 for a page outside the table (never resolved). */
  __device__ int own(int j) const {
    if (staged) return s->selOwn[j];
    const int pg = sel[j];
    return pg >= 0 && pg < tableStride ? blockRow[pg] : 0;
  }
  /** The page's host block (only read for misses: pages inside the table). */
  __device__ int host(int j) const { return staged ? s->selHost[j] : hostRow[sel[j]]; }
  /** Index of the first selected page >= pg. */
  __device__ int lowerBoundOf(int n, int pg) const { return lowerBound(staged ? s->selPage : sel, n, pg); }
};

/** Ranks the slots not used in this round by (lastUse, slot): victim[rank] = slot. Returns their count. */
__device__ int rankFreeSlots(const ResolveSmem& s, int numHot, int tick) {
  int mine = 0;
  for (int i = threadIdx.x; i < numHot; i += blockDim.x) {
    const int lu = s.lastUse[i];
    if (lu >= tick) continue;  // used in this round
    ++mine;
    int rank = 0;
    for (int o = 0; o < numHot; ++o) {
      const int lo = s.lastUse[o];
      rank += (lo < tick && (lo < lu || (lo == lu && o < i))) ? 1 : 0;
    }
    s.victim[rank] = i;
  }
  return blockSum(mine, s.warpSums);
}

/** Copies the K and V slice of kv head g of each miss from the host tier into its hot block. */
__device__ void copyMisses(const HsResolveParams& p, const ResolveSmem& s, const int32_t* sel, const int32_t* hostRow,
                           const int32_t* hotRow, int numMisses, int g) {
  const int vecsPerRow = p.headDim / 8;
  const int rows = 2 * p.blockSize;
  const int vecsPerMiss = rows * vecsPerRow;
  const long long total = static_cast<long long>(numMisses) * vecsPerMiss;
  const uint4* host = static_cast<const uint4*>(p.hostKv);
  uint4* cache = static_cast<uint4*>(p.kvCache);
  const size_t tokenVecs = static_cast<size_t>(p.numKvHeads) * vecsPerRow;
  for (long long base = 0; base < total; base += static_cast<long long>(blockDim.x) * kCopyUnroll) {
    uint4 v[kCopyUnroll];
    uint4* dst[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      dst[u] = nullptr;
      const long long i = base + static_cast<long long>(u) * blockDim.x + threadIdx.x;
      if (i >= total) continue;
      const int m = static_cast<int>(i / vecsPerMiss);
      const int w = static_cast<int>(i - static_cast<long long>(m) * vecsPerMiss);
      const int hb = hostRow[sel[s.missJ[m]]];
      const int hot = hotRow[s.victim[m]];
      if (hb < 0 || hb >= p.numHostBlocks || hot < 0 || hot >= p.numBlocks) continue;  // counted as an error above
      const int row = w / vecsPerRow;  // kv * bs + token
      const int c = w - row * vecsPerRow;
      v[u] = __ldcs(host + (static_cast<size_t>(hb) * p.numKvHeads + g) * vecsPerMiss + w);  // read once
      dst[u] = cache + (static_cast<size_t>(hot) * rows + row) * tokenVecs + static_cast<size_t>(g) * vecsPerRow + c;
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      if (dst[u] != nullptr) *dst[u] = v[u];
  }
}

__global__ void __launch_bounds__(kThreads) resolveKernel(const HsResolveParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int g = blockIdx.x;
  const int r = blockIdx.y;
  const int Hkv = p.numKvHeads;
  const size_t item = static_cast<size_t>(r) * Hkv + g;
  const bool active = p.rowFlags == nullptr || p.rowFlags[r] != 0;
  const int slot = p.reqSlot[r];
  if (!active || slot < 0 || slot >= p.numSlots) {
    if (p.missCount != nullptr && threadIdx.x == 0) p.missCount[item] = 0;  // nothing for the copy pass
    return;
  }
  // The split resolver's copy pass (launched with PDL) may start its CTAs now: they wait in
  // pdlWait until this grid has completed, so its launch and ramp-up overlap the plan.
  hs::pdlLaunchDependents();
  const ResolveSmem s(smem, p.numHot, p.selStride);
  const int seqLen = max(p.seqLens[r], 0);  // read now: its load overlaps the passes below
  const int n = min(max(p.selCount[item], 0), p.selStride);
  const int32_t* sel = p.selPages + item * p.selStride;
  int32_t* outRow = p.headBlockTables + item * p.selStride;
  const int32_t* blockRow = p.blockTable + static_cast<size_t>(slot) * p.tableStride;
  const int32_t* hostRow = p.hostBlockTable + static_cast<size_t>(slot) * p.tableStride;
  const int32_t* hotRow = p.hotBlocks + static_cast<size_t>(slot) * p.numHot;
  const size_t lru = (static_cast<size_t>(slot) * p.numLayers + p.layer) * Hkv + g;
  int32_t* pageG = p.lruPage + lru * p.numHot;
  int32_t* lastG = p.lruLastUse + lru * p.numHot;
  if (threadIdx.x == 0) {
    const int t = p.lruTick[lru] + 1;  // the round starts (HotBufferLru.beginRound)
    p.lruTick[lru] = t;
    s.bc[0] = t;
  }
  for (int i = threadIdx.x; i < p.numHot; i += blockDim.x) {
    s.page[i] = pageG[i];
    s.lastUse[i] = lastG[i];
  }
  for (int i = threadIdx.x; i < (p.selStride + 31) / 32; i += blockDim.x) s.hitBits[i] = 0;
  const SelView sv{sel, blockRow, hostRow, &s, p.tableStride, n <= stagedSelCap(p.selStride)};
  if (sv.staged)
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const int pg = sel[j];
      const bool inTable = pg >= 0 && pg < p.tableStride;
      s.selPage[j] = pg;
      s.selOwn[j] = inTable ? blockRow[pg] : 0;
      s.selHost[j] = inTable ? hostRow[pg] : -1;
    }
  __syncthreads();
  const int tick = s.bc[0];
  // Hits: each slot looks its page up in the selection (pageToSlot of the oracle, inverted).
  for (int i = threadIdx.x; i < p.numHot; i += blockDim.x) {
    const int page = s.page[i];
    if (page < 0 || page >= p.tableStride) continue;
    const int j = sv.lowerBoundOf(n, page);
    if (j < n && sv.page(j) == page && sv.own(j) < 0) {
      s.lastUse[i] = tick;
      outRow[j] = hotRow[i];
      atomicOr(&s.hitBits[j >> 5], 1u << (j & 31));
    }
  }
  __syncthreads();
  const int numFree = rankFreeSlots(s, p.numHot, tick);
  // Own blocks, hits, and misses numbered in selection order.
  int hits = 0;
  int missSoFar = 0;
  int errors = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int j = base + threadIdx.x;
    bool miss = false;
    if (j < n) {
      const int own = sv.own(j);
      if (own >= 0)
        outRow[j] = own;
      else if (s.hitBits[j >> 5] & (1u << (j & 31)))
        ++hits;
      else
        miss = true;
    }
    int total = 0;
    const int m = missSoFar + blockExclusiveScan(miss ? 1 : 0, &total, s.warpSums);
    if (miss) {
      if (m < numFree) {
        s.missJ[m] = j;
      } else {
        outRow[j] = hotRow[0];  // more misses than free slots (the oracle throws): counted as an error;
                                // hotRow[0] is -1 for a request without a hot buffer, which attention skips
        ++errors;
      }
    }
    missSoFar += total;
  }
  __syncthreads();
  const int numMisses = min(missSoFar, numFree);
  // Victims: the m-th miss takes the m-th free slot; bookkeeping of the pages held per request.
  for (int m = threadIdx.x; m < numMisses; m += blockDim.x) {
    const int i = s.victim[m];
    const int j = s.missJ[m];
    const int page = sv.page(j);
    const int evicted = s.page[i];
    s.page[i] = page;
    s.lastUse[i] = tick;
    outRow[j] = hotRow[i];
    int32_t* held = p.heldCount + static_cast<size_t>(slot) * p.tableStride;
    // Both counts are updated at once (evicted != page: the page was not in this LRU), and the
    // request's held-page count by their net change in one atomic without a returned value: one
    // round trip per miss instead of up to four dependent ones (the batch-1 plan waits on them).
    const int wasEvicted = evicted >= 0 && evicted < p.tableStride ? atomicSub(&held[evicted], 1) : 0;
    const int wasPage = atomicAdd(&held[page], 1);
    const int netHeld = (wasPage == 0 ? 1 : 0) - (wasEvicted == 1 ? 1 : 0);
    if (netHeld != 0) atomicAdd(&p.heldPages[slot], netHeld);
    const int hb = sv.host(j);
    if (hb < 0 || hb >= p.numHostBlocks || outRow[j] < 0 || outRow[j] >= p.numBlocks) ++errors;  // not copied
  }
  __syncthreads();
  if (p.missSrc != nullptr) {
    // The split resolver's plan: (host block, hot block) of each miss; -1 for a bad entry (counted above).
    const size_t stride = static_cast<size_t>(missStride(p));
    int32_t* src = p.missSrc + item * stride;
    int32_t* dst = p.missDst + item * stride;
    for (int m = threadIdx.x; m < numMisses; m += blockDim.x) {
      const int hb = sv.host(s.missJ[m]);
      src[m] = hb >= 0 && hb < p.numHostBlocks ? hb : -1;
      dst[m] = hotRow[s.victim[m]];
    }
    if (threadIdx.x == 0) p.missCount[item] = numMisses;
  } else {
    copyMisses(p, s, sel, hostRow, hotRow, numMisses, g);
  }
  for (int i = threadIdx.x; i < p.numHot; i += blockDim.x) {
    pageG[i] = s.page[i];
    lastG[i] = s.lastUse[i];
  }
  const int numPages = (seqLen + p.blockSize - 1) / p.blockSize;
  const int totalHits = blockSum(hits, s.warpSums);
  const int totalErrors = blockSum(errors, s.warpSums);
  if (threadIdx.x == 0) {
    const bool tailOk = n > 0 && sv.page(n - 1) == numPages - 1;
    p.headSeqLens[item] = tailOk ? (n - 1) * p.blockSize + (seqLen - (numPages - 1) * p.blockSize) : 0;
    atomicAdd(&p.counters[0], static_cast<unsigned long long>(totalHits));
    atomicAdd(&p.counters[1], static_cast<unsigned long long>(numMisses));
    const int bad = totalErrors + (tailOk ? 0 : 1);
    if (bad > 0) atomicAdd(&p.counters[2], static_cast<unsigned long long>(bad));
  }
}

}  // namespace
}  // namespace hs_sparse

extern "C" cudaError_t hsResolve(const HsResolveParams* p, cudaStream_t stream) {
  using namespace hs_sparse;
  if (p == nullptr) return cudaErrorInvalidValue;
  if (p->numReqs < 0 || p->numReqs > 65535 || p->numKvHeads <= 0 || p->headDim <= 0 || p->headDim % 8 != 0 ||
      p->blockSize <= 0 || p->selStride <= 0 || p->tableStride <= 0 || p->numSlots <= 0 || p->numHot <= 0 ||
      p->numHot > kMaxHot || p->layer < 0 || p->layer >= p->numLayers || p->numBlocks <= 0 || p->numHostBlocks < 0)
    return cudaErrorInvalidValue;
  if (p->numReqs == 0) return cudaSuccess;
  if (p->selPages == nullptr || p->selCount == nullptr || p->seqLens == nullptr || p->reqSlot == nullptr ||
      p->blockTable == nullptr || p->hostBlockTable == nullptr || p->hotBlocks == nullptr || p->lruPage == nullptr ||
      p->lruLastUse == nullptr || p->lruTick == nullptr || p->heldCount == nullptr || p->heldPages == nullptr ||
      p->headBlockTables == nullptr || p->headSeqLens == nullptr || p->counters == nullptr ||
      p->kvCache == nullptr || !aligned16(p->kvCache) || (p->numHostBlocks > 0 && (p->hostKv == nullptr || !aligned16(p->hostKv))))
    return cudaErrorInvalidValue;
  const bool split = p->missSrc != nullptr;
  if (split != (p->missDst != nullptr) || split != (p->missCount != nullptr) ||
      !sliceGeomValid(p->headDim, p->hostKvDtype) || (!split && p->hostKvDtype != HS_HOST_KV_BF16) ||
      (p->hostKvDtype == HS_HOST_KV_FP8 && !(p->kScale > 0.f && p->vScale > 0.f)))
    return cudaErrorInvalidValue;
  const size_t smem = resolveSmemBytes(p->numHot, p->selStride);
  static std::atomic<unsigned long long> smemSet{0};
  cudaError_t err = ensureSmem(resolveKernel, smem, smemSet);
  if (err != cudaSuccess) return err;
  const dim3 grid(p->numKvHeads, p->numReqs);
  resolveKernel<<<grid, kThreads, smem, stream>>>(*p);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split) return err;
  return launchResolveCopy(*p, stream);
}
