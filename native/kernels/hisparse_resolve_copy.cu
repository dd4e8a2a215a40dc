// The split resolver's copy pass (hisparse.h hsResolve with a miss list): every miss of one sparse
// layer, over every (request, kv head), copied by one SM-wide grid. The plan kernel leaves per item
// (request, kv head) its misses' host and hot blocks and their count; each CTA scans the counts
// (kScanItems at a time) into miss offsets in shared memory, then walks the flat space of
// (miss, 16-byte host unit) in a grid-stride loop with 32-bit indices, kCopyUnroll loads in flight per thread before
// the stores. The fused resolver copies with Hkv * numReqs CTAs (8 at batch 1 of an 8-kv-head
// model: ~26 GB/s of the link's 51, bench/results/hisparse_profile_32k_b8_h200.txt); here a few
// CTAs per SM keep megabytes of host reads in flight whatever the batch (the link's latency is
// microseconds: bandwidth needs concurrency, Little's law). Units are hisparse_copy.cuh's: a
// bf16 host tier copies 8 elements per unit, an fp8 one 16, dequantised into the bf16 hot block.
// The pass is launched with programmatic dependent launch (pdl.cuh): its CTAs may be resident
// while the plan runs and wait in pdlWait, so the batch-1 swap-in does not pay a second launch.
#include <algorithm>

#include "hisparse.h"
#include "hisparse_common.cuh"
#include "hisparse_copy.cuh"
#include "pdl.cuh"

namespace hs_sparse {
namespace {

/** Items (request, kv head) whose miss offsets one scan round holds in shared memory. */
constexpr int kScanItems = 2048;
/** 16-byte units each thread keeps in flight. */
constexpr int kCopyUnroll = 4;
/** Largest grid: CTAs per SM (256 threads each). */
constexpr int kCopyCtasPerSm = 4;

size_t copySmemBytes() { return (kScanItems + 1 + 32) * sizeof(int); }

/** Last index i in [0, n) with prefix[i] <= x (prefix ascending, prefix[0] = 0 <= x). */
__device__ __forceinline__ int itemOf(const int* prefix, int n, int x) {
  int lo = 0;
  int hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (prefix[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/**
 * Scans missCount[first, first + n) into prefix[0..n] (exclusive offsets, prefix[n] the total);
 * every thread of the CTA calls it. Counts are clamped to [0, missStride].
 */
__device__ int scanCounts(const HsResolveParams& p, int first, int n, int* prefix, int* warpSums) {
  int running = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const int c = i < n ? min(max(p.missCount[first + i], 0), missStride(p)) : 0;
    int total = 0;
    const int ex = blockExclusiveScan(c, &total, warpSums);
    if (i < n) prefix[i] = running + ex;
    running += total;
  }
  if (threadIdx.x == 0) prefix[n] = running;
  __syncthreads();
  return running;
}

/**
 * Items per scan round: at most kScanItems, and few enough that a round's units fit in 31 bits
 * (the grid-stride loop indexes them with 32-bit arithmetic: no 64-bit division per unit).
 */
int chunkItemsOf(const HsResolveParams& p, const SliceGeom& geom) {
  const long long perItem = static_cast<long long>(missStride(p)) * geom.unitsPerSlice;
  return static_cast<int>(std::max(1LL, std::min<long long>(kScanItems, 0x7fffffffLL / std::max(perItem, 1LL))));
}

__global__ void __launch_bounds__(kThreads) resolveCopyKernel(const HsResolveParams p, const SliceGeom geom,
                                                             int chunkItems) {
  extern __shared__ __align__(16) unsigned char smem[];
  hs::pdlWait();  // the plan's miss lists (launched with PDL: it may start while the plan runs)
  int* prefix = reinterpret_cast<int*>(smem);
  int* warpSums = prefix + kScanItems + 1;
  const uint4* host = static_cast<const uint4*>(p.hostKv);
  uint16_t* cache = static_cast<uint16_t*>(p.kvCache);
  const int units = geom.unitsPerSlice;
  const int numItems = p.numReqs * p.numKvHeads;
  for (int first = 0; first < numItems; first += chunkItems) {
    const int n = min(chunkItems, numItems - first);
    const unsigned total = static_cast<unsigned>(scanCounts(p, first, n, prefix, warpSums)) * units;  // < 2^31
    const unsigned stride = gridDim.x * blockDim.x * kCopyUnroll;
    for (unsigned base = blockIdx.x * blockDim.x * kCopyUnroll; base < total; base += stride) {
      uint4 v[kCopyUnroll];
      uint16_t* dst[kCopyUnroll];
      int unit[kCopyUnroll];
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u) {
        dst[u] = nullptr;
        unit[u] = 0;
        const unsigned i = base + u * blockDim.x + threadIdx.x;
        if (i >= total) continue;
        const int mi = static_cast<int>(i / static_cast<unsigned>(units));  // the miss, numbered over the chunk's items
        const int w = static_cast<int>(i - static_cast<unsigned>(mi) * units);
        const int it = itemOf(prefix, n, mi);
        const size_t entry = static_cast<size_t>(first + it) * missStride(p) + (mi - prefix[it]);
        const int hb = p.missSrc[entry];
        const int hot = p.missDst[entry];
        if (hb < 0 || hb >= p.numHostBlocks || hot < 0 || hot >= p.numBlocks) continue;  // the plan counted it
        const int g = (first + it) % p.numKvHeads;
        v[u] = __ldcs(host + (static_cast<size_t>(hb) * p.numKvHeads + g) * units + w);  // read once
        dst[u] = cache + deviceUnitOffset(geom, hot, g, w);
        unit[u] = w;
      }
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u)
        if (dst[u] != nullptr) storeUnit(geom, unit[u], v[u], dst[u]);
    }
    __syncthreads();  // prefix is rewritten by the next round
  }
}

}  // namespace

cudaError_t launchResolveCopy(const HsResolveParams& p, cudaStream_t stream) {
  if (p.numHostBlocks == 0) return cudaSuccess;  // nothing can be copied (misses were counted as errors)
  const SliceGeom geom = sliceGeom(p.headDim, p.blockSize, p.numKvHeads, p.hostKvDtype, p.kScale, p.vScale);
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  // Static bound of the work (graph-capturable): every item missing min(numHot, selStride) slices.
  const long long maxUnits = static_cast<long long>(p.numReqs) * p.numKvHeads * min(p.numHot, p.selStride) *
                             geom.unitsPerSlice;
  const long long perCta = static_cast<long long>(kThreads) * kCopyUnroll;
  const long long want = (maxUnits + perCta - 1) / perCta;
  const int grid = static_cast<int>(max(1LL, min(want, static_cast<long long>(sms) * kCopyCtasPerSm)));
  return hs::launchPdl(resolveCopyKernel, dim3(grid), dim3(kThreads), copySmemBytes(), stream, p, geom,
                       chunkItemsOf(p, geom));
}

}  // namespace hs_sparse
