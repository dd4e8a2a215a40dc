// Eager mirror of filled pages to the host tier (hisparse.h hsMirrorPages), and its reverse for
// host-resident prefix-cache hits (hsLoadPages): one CTA per (page,
// layer) reads the device block ([2, bs, Hkv, D]) and writes the host block in the head-major
// host layout ([Hkv, 2, bs, D]), so that the resolver later reads one contiguous slice per
// (page, kv head). Writes go over the host link to mapped pinned memory in address order (each
// thread's 16-byte stores walk the host block contiguously across the CTA); loads are issued
// before the stores, kUnroll per thread.
#include "hisparse.h"
#include "hisparse_common.cuh"

namespace hs_sparse {
namespace {

constexpr int kMirrorThreads = 256;
constexpr int kUnroll = 4;

struct MirrorArgs {
  const uint64_t* kvCaches;
  const uint64_t* hostTiers;
  const int32_t* blockIds;
  const int32_t* hostBlockIds;
  int numKvHeads;
  int vecsPerRow;  // D / 8
  int blockSize;
  int numBlocks;
  int numHostBlocks;
};

__global__ void __launch_bounds__(kMirrorThreads) mirrorKernel(const MirrorArgs a) {
  const int i = blockIdx.x;
  const int layer = blockIdx.y;
  const int b = a.blockIds[i];
  const int hb = a.hostBlockIds[i];
  if (b < 0 || b >= a.numBlocks || hb < 0 || hb >= a.numHostBlocks) return;
  const int rows = 2 * a.blockSize;                // (kv, token) rows of one head
  const int headVecs = rows * a.vecsPerRow;        // one (page, head) slice
  const int pageVecs = a.numKvHeads * headVecs;
  const uint4* src = reinterpret_cast<const uint4*>(a.kvCaches[layer]) + static_cast<size_t>(b) * pageVecs;
  uint4* dst = reinterpret_cast<uint4*>(a.hostTiers[layer]) + static_cast<size_t>(hb) * pageVecs;
  for (int base = 0; base < pageVecs; base += kMirrorThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;  // host (destination) order: head, row, chunk
      if (w >= pageVecs) continue;
      const int g = w / headVecs;
      const int rest = w - g * headVecs;
      const int row = rest / a.vecsPerRow;
      const int c = rest - row * a.vecsPerRow;
      v[u] = src[(static_cast<size_t>(row) * a.numKvHeads + g) * a.vecsPerRow + c];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;
      if (w < pageVecs) dst[w] = v[u];
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
  const int rows = 2 * a.blockSize;
  const int headVecs = rows * a.vecsPerRow;
  const int pageVecs = a.numKvHeads * headVecs;
  const uint4* src = reinterpret_cast<const uint4*>(a.hostTiers[layer]) + static_cast<size_t>(hb) * pageVecs;
  uint4* dst = reinterpret_cast<uint4*>(a.kvCaches[layer]) + static_cast<size_t>(b) * pageVecs;
  for (int base = 0; base < pageVecs; base += kMirrorThreads * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;  // host (source) order: head, row, chunk
      if (w < pageVecs) v[u] = __ldcs(src + w);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int w = base + u * kMirrorThreads + threadIdx.x;
      if (w >= pageVecs) continue;
      const int g = w / headVecs;
      const int rest = w - g * headVecs;
      const int row = rest / a.vecsPerRow;
      const int c = rest - row * a.vecsPerRow;
      dst[(static_cast<size_t>(row) * a.numKvHeads + g) * a.vecsPerRow + c] = v[u];
    }
  }
}

cudaError_t launchPageCopy(bool toHost, const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                           const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                           int blockSize, int numBlocks, int numHostBlocks, cudaStream_t stream) {
  if (count < 0 || numLayers < 0 || numLayers > 65535 || numKvHeads <= 0 || headDim <= 0 || headDim % 8 != 0 ||
      blockSize <= 0 || numBlocks < 0 || numHostBlocks < 0)
    return cudaErrorInvalidValue;
  if (count == 0 || numLayers == 0) return cudaSuccess;
  if (kvCaches == nullptr || hostTiers == nullptr || blockIds == nullptr || hostBlockIds == nullptr)
    return cudaErrorInvalidValue;
  MirrorArgs a{};
  a.kvCaches = kvCaches;
  a.hostTiers = hostTiers;
  a.blockIds = blockIds;
  a.hostBlockIds = hostBlockIds;
  a.numKvHeads = numKvHeads;
  a.vecsPerRow = headDim / 8;
  a.blockSize = blockSize;
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
                                     int blockSize, int numBlocks, int numHostBlocks, cudaStream_t stream) {
  return hs_sparse::launchPageCopy(true, kvCaches, hostTiers, blockIds, hostBlockIds, count, numLayers, numKvHeads,
                                   headDim, blockSize, numBlocks, numHostBlocks, stream);
}

extern "C" cudaError_t hsLoadPages(const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                                   const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                                   int blockSize, int numBlocks, int numHostBlocks, cudaStream_t stream) {
  return hs_sparse::launchPageCopy(false, kvCaches, hostTiers, blockIds, hostBlockIds, count, numLayers, numKvHeads,
                                   headDim, blockSize, numBlocks, numHostBlocks, stream);
}
