// Eager mirror of filled pages to the host tier (hisparse.h hsMirrorPages), and its reverse for
// host-resident prefix-cache hits (hsLoadPages): one CTA per (page,
// layer) reads the device block ([2, bs, Hkv, D]) and writes the host block in the head-major
// host layout ([Hkv, 2, bs, D]), so that the resolver later reads one contiguous slice per
// (page, kv head). Writes go over the host link to mapped pinned memory in address order (each
// thread's 16-byte stores walk the host block contiguously across the CTA); loads are issued
// before the stores, kUnroll per thread. An fp8 host tier (HS_HOST_KV_FP8) holds e4m3 codes:
// the mirror quantises (per-tensor K / V scales), the load dequantises (hisparse_copy.cuh units).
#include "hisparse.h"
#include "hisparse_common.cuh"
#include "hisparse_copy.cuh"

namespace hs_sparse {
namespace {

constexpr int kMirrorThreads = 256;
constexpr int kUnroll = 4;

struct MirrorArgs {
  const uint64_t* kvCaches;
  const uint64_t* hostTiers;
  const int32_t* blockIds;
  const int32_t* hostBlockIds;
  SliceGeom geom;
  /** 1 / kScale and 1 / vScale (quantisation of the mirror). */
  float invKScale;
  float invVScale;
  int numBlocks;
  int numHostBlocks;
};

__global__ void __launch_bounds__(kMirrorThreads) mirrorKernel(const MirrorArgs a) {
  const int i = blockIdx.x;
  const int layer = blockIdx.y;
  const int b = a.blockIds[i];
  const int hb = a.hostBlockIds[i];
  if (b < 0 || b >= a.numBlocks || hb < 0 || hb >= a.numHostBlocks) return;
  const int units = a.geom.unitsPerSlice;  // one (page, head) slice
  const int pageUnits = a.geom.numKvHeads * units;
  const uint16_t* src = reinterpret_cast<const uint16_t*>(a.kvCaches[layer]);
  uint4* dst = reinterpret_cast<uint4*>(a.hostTiers[layer]) + static_cast<size_t>(hb) * pageUnits;
  for (int base = 0; base < pageUnits; base += kMirrorThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;  // host (destination) order: head, unit
      if (w >= pageUnits) continue;
      const int g = w / units;
      const int unit = w - g * units;
      v[u] = loadUnitFromCache(a.geom, unit, src + deviceUnitOffset(a.geom, b, g, unit), a.invKScale, a.invVScale);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;
      if (w < pageUnits) dst[w] = v[u];
    }
  }
}

// The reverse copy (hsLoadPages): host block hb (head-major) into device block b, one CTA per
// (page, layer); loads walk the host block contiguously (16-byte UVA reads), stores scatter to
// the token-major device layout.
__global__ void __launch_bounds__(kMirrorThreads) loadKernel(const MirrorArgs a) {
  const int i = blockIdx.x;
  const int layer = blockIdx.y;
  const int b = a.blockIds[i];
  const int hb = a.hostBlockIds[i];
  if (b < 0 || b >= a.numBlocks || hb < 0 || hb >= a.numHostBlocks) return;
  const int units = a.geom.unitsPerSlice;
  const int pageUnits = a.geom.numKvHeads * units;
  const uint4* src = reinterpret_cast<const uint4*>(a.hostTiers[layer]) + static_cast<size_t>(hb) * pageUnits;
  uint16_t* dst = reinterpret_cast<uint16_t*>(a.kvCaches[layer]);
  for (int base = 0; base < pageUnits; base += kMirrorThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;  // host (source) order: head, unit
      if (w < pageUnits) v[u] = __ldcs(src + w);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;
      if (w >= pageUnits) continue;
      const int g = w / units;
      const int unit = w - g * units;
      storeUnit(a.geom, unit, v[u], dst + deviceUnitOffset(a.geom, b, g, unit));
    }
  }
}

cudaError_t launchPageCopy(bool toHost, const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                           const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                           int blockSize, int numBlocks, int numHostBlocks, int hostKvDtype, float kScale,
                           float vScale, cudaStream_t stream) {
  if (count < 0 || numLayers < 0 || numLayers > 65535 || numKvHeads <= 0 || !sliceGeomValid(headDim, hostKvDtype) ||
      blockSize <= 0 || numBlocks < 0 || numHostBlocks < 0 || !(kScale > 0.f) || !(vScale > 0.f))
    return cudaErrorInvalidValue;
  if (count == 0 || numLayers == 0) return cudaSuccess;
  if (kvCaches == nullptr || hostTiers == nullptr || blockIds == nullptr || hostBlockIds == nullptr)
    return cudaErrorInvalidValue;
  MirrorArgs a{};
  a.kvCaches = kvCaches;
  a.hostTiers = hostTiers;
  a.blockIds = blockIds;
  a.hostBlockIds = hostBlockIds;
  a.geom = sliceGeom(headDim, blockSize, numKvHeads, hostKvDtype, kScale, vScale);
  a.invKScale = 1.f / kScale;
  a.invVScale = 1.f / vScale;
  a.numBlocks = numBlocks;
  a.numHostBlocks = numHostBlocks;
  const dim3 grid(count, numLayers);
  if (toHost)
    mirrorKernel<<<grid, kMirrorThreads, 0, stream>>>(a);
  else
    loadKernel<<<grid, kMirrorThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace
}  // namespace hs_sparse

extern "C" cudaError_t hsMirrorPages(const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                                     const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                                     int blockSize, int numBlocks, int numHostBlocks, int hostKvDtype, float kScale,
                                     float vScale, cudaStream_t stream) {
  return hs_sparse::launchPageCopy(true, kvCaches, hostTiers, blockIds, hostBlockIds, count, numLayers, numKvHeads,
                                   headDim, blockSize, numBlocks, numHostBlocks, hostKvDtype, kScale, vScale, stream);
}

extern "C" cudaError_t hsLoadPages(const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                                   const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                                   int blockSize, int numBlocks, int numHostBlocks, int hostKvDtype, float kScale,
                                   float vScale, cudaStream_t stream) {
  return hs_sparse::launchPageCopy(false, kvCaches, hostTiers, blockIds, hostBlockIds, count, numLayers, numKvHeads,
                                   headDim, blockSize, numBlocks, numHostBlocks, hostKvDtype, kScale, vScale, stream);
}
