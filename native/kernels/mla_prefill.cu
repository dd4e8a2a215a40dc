// Kernels of the expanded-form MLA prefill (mla.h; host side src/backends/cuda/mla_prefill.ts): the
// gather of one request's paged latent rows into a contiguous bf16 buffer (the B operand of the
// kv_b_proj GEMMs), which also copies the shared k_pe into every head's key of the expanded K / V
// buffer, and the masked softmax between the two attention GEMMs (S = scale Q K^T in f32 -> P in
// bf16, the operand of O = P V).
//
// gatherKernel, one CTA of 128 threads per row i (block b = i / bs): the row comes from the device
// cache at blockTables[req, b], or, when that block is negative and a host source is given
// (Hybrid HiSparse for DSA: a prefill beside its own spilled pages), from the mapped pinned host
// tier at hostBlockTables[req, b] (plain global loads over the bus; 16-byte loads when the host
// rows are 16-byte aligned). No source (past a table, a negative block without one): zeros.
// Host rows copy their k_pe into kv from the gathered row (device memory), not a second bus read.
//
// hsMlaPrefillSoftmax, one CTA of 256 threads per (query, head) row of S:
// 1. attended keys: dense, j < limit = min(keyLimit, numKeys, p + 1) (causal); DSA, the row's
//    top-k entries j with 0 <= j < limit (the absorbed kernel's rule: -1 and j > p skipped);
// 2. each thread keeps an online (max, sum) over its keys (thread x: j = x, x + 256, ...; DSA:
//    entries e = x, x + 256, ...), merged by a warp xor-tree then warp 0..7 in order: a fixed
//    order, so the result does not depend on timing;
// 3. P[j] = bf16(exp(s_j - max) / sum) at attended keys, 0 elsewhere (DSA: the row is zeroed
//    before the barrier of step 2, then the entries are written).
#include <cmath>
#include <cstring>

#include "mla.h"
#include "mla_common.cuh"

namespace hs_mla_prefill {
namespace {

using hs_mla::Bf16;
using hs_mla::storageDtype;
using hs_mla::toBf16;
using hs_mla::toFloat;
using hs_mla::withDtype;

constexpr int kGatherThreads = 128;
constexpr int kSoftmaxThreads = 256;
constexpr int kWarps = kSoftmaxThreads / 32;

/** Arguments of gatherKernel beyond the cache (hsMlaGatherLatent's). */
struct GatherArgs {
  const int32_t* blockTables;
  int maxBlocksPerReq;
  /** i32 [numReqs, hostMaxBlocksPerReq]; read only where the host cache is given. */
  const int32_t* hostBlockTables;
  int hostMaxBlocksPerReq;
  /** The host rows' starts are 16-byte aligned (uint4 loads). */
  bool hostVec;
  int req, bs, W, rank, ropeDim;
  Bf16* out;
  Bf16* kv;
  int kvLd, kvOffset, kvStride, kvCount;
};

/** Row i's source: the device cache, the host tier (fromHost), or nullptr (zeros). */
template <typename C>
__device__ __forceinline__ const C* gatherSource(const C* cache, const C* hostCache, const GatherArgs& g, int i,
                                                 bool& fromHost) {
  fromHost = false;
  const int b = i / g.bs;
  if (b >= g.maxBlocksPerReq) return nullptr;
  const int32_t blk = g.blockTables[static_cast<size_t>(g.req) * g.maxBlocksPerReq + b];
  if (blk >= 0) return cache + (static_cast<size_t>(blk) * g.bs + i % g.bs) * g.W;
  if (hostCache == nullptr || b >= g.hostMaxBlocksPerReq) return nullptr;
  const int32_t hb = g.hostBlockTables[static_cast<size_t>(g.req) * g.hostMaxBlocksPerReq + b];
  if (hb < 0) return nullptr;
  fromHost = true;
  return hostCache + (static_cast<size_t>(hb) * g.bs + i % g.bs) * g.W;
}

template <typename C>
__global__ void __launch_bounds__(kGatherThreads)
    gatherKernel(const C* cache, const C* hostCache, const GatherArgs g) {
  const int i = blockIdx.x;
  bool fromHost;  // uniform over the CTA (depends on i only)
  const C* src = gatherSource(cache, hostCache, g, i, fromHost);
  Bf16* dst = g.out + static_cast<size_t>(i) * g.W;
  constexpr int kVec = 16 / sizeof(C);
  if (fromHost && g.hostVec) {
    const uint4* src4 = reinterpret_cast<const uint4*>(src);
    for (int v = threadIdx.x; v < g.W / kVec; v += blockDim.x) {
      const uint4 raw = src4[v];
      C x[kVec];
      memcpy(x, &raw, sizeof(raw));  // not a pointer cast: no aliasing of raw's words
#pragma unroll
      for (int k = 0; k < kVec; ++k) dst[v * kVec + k] = toBf16(toFloat(x[k]));
    }
  } else {
    for (int e = threadIdx.x; e < g.W; e += blockDim.x) dst[e] = src != nullptr ? toBf16(toFloat(src[e])) : Bf16{0};
  }
  if (g.kv == nullptr) return;
  if (fromHost) __syncthreads();  // host rows: k_pe from dst (the barrier makes every thread's stores visible)
  Bf16* kvRow = g.kv + static_cast<size_t>(i) * g.kvLd + g.kvOffset;
  for (int e = threadIdx.x; e < g.kvCount * g.ropeDim; e += blockDim.x) {
    const int h = e / g.ropeDim;
    const int c = e - h * g.ropeDim;
    kvRow[static_cast<size_t>(h) * g.kvStride + c] = fromHost         ? dst[g.rank + c]
                                                     : src != nullptr ? toBf16(toFloat(src[g.rank + c]))
                                                                      : Bf16{0};
  }
}

/** Adds score s (finite, or -inf for nothing) to the running (m, l). */
__device__ __forceinline__ void accumulate(float& m, float& l, float s) {
  if (s == -INFINITY) return;
  if (s > m) {
    l = l * expf(m - s) + 1.f;  // m = -inf: l = 0 * 0 + 1
    m = s;
  } else {
    l += expf(s - m);
  }
}

/** (m, l) <- the merge of (m, l) and (m2, l2). */
__device__ __forceinline__ void merge(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) return;
  l = (m == -INFINITY ? 0.f : l * expf(m - mn)) + (m2 == -INFINITY ? 0.f : l2 * expf(m2 - mn));
  m = mn;
}

/** Block-wide merge in a fixed order; every thread gets the result. red: 2 * kWarps floats. */
__device__ __forceinline__ void blockMerge(float& m, float& l, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, o);
    merge(m, l, m2, l2);
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) {
    red[warp] = m;
    red[kWarps + warp] = l;
  }
  __syncthreads();
  m = red[0];
  l = red[kWarps];
  for (int w = 1; w < kWarps; ++w) merge(m, l, red[w], red[kWarps + w]);
}

__global__ void __launch_bounds__(kSoftmaxThreads)
    softmaxKernel(const float* scores, Bf16* probs, int numQueries, int numKeys, int rowStride, int firstPos,
                  int keyLimit, const int32_t* topk, int topkStride) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem);  // [2 * kWarps]
  const int i = blockIdx.x;
  const size_t row = (static_cast<size_t>(blockIdx.y) * numQueries + i) * rowStride;
  const float* s = scores + row;
  Bf16* pr = probs + row;
  const int limit = min(min(keyLimit, numKeys), firstPos + i + 1);  // attended keys are < limit
  const int32_t* sel = topk != nullptr ? topk + static_cast<size_t>(i) * topkStride : nullptr;
  float m = -INFINITY;
  float l = 0.f;
  if (sel == nullptr) {
    for (int j = threadIdx.x; j < limit; j += blockDim.x) accumulate(m, l, s[j]);
  } else {
    for (int e = threadIdx.x; e < topkStride; e += blockDim.x) {
      const int j = sel[e];
      if (j >= 0 && j < limit) accumulate(m, l, s[j]);
    }
    for (int j = threadIdx.x; j < numKeys; j += blockDim.x) pr[j] = Bf16{0};
  }
  blockMerge(m, l, red);  // its barrier also orders the zeros above before the writes below
  const float inv = l > 0.f ? 1.f / l : 0.f;
  if (sel == nullptr) {
    for (int j = threadIdx.x; j < numKeys; j += blockDim.x)
      pr[j] = j < limit ? toBf16(expf(s[j] - m) * inv) : Bf16{0};
  } else {
    for (int e = threadIdx.x; e < topkStride; e += blockDim.x) {
      const int j = sel[e];
      if (j >= 0 && j < limit) pr[j] = toBf16(expf(s[j] - m) * inv);
    }
  }
}

}  // namespace
}  // namespace hs_mla_prefill

using namespace hs_mla_prefill;

extern "C" cudaError_t hsMlaGatherLatent(const void* cache, int cacheDtype, const int32_t* blockTables,
                                         int maxBlocksPerReq, const void* hostCache, const int32_t* hostBlockTables,
                                         int hostMaxBlocksPerReq, int req, int blockSize, int rowWidth, int rank,
                                         int numRows, void* out, void* kv, int kvLd, int kvOffset, int kvStride,
                                         int kvCount, cudaStream_t stream) {
  if (numRows < 0 || rowWidth <= 0 || rank < 0 || rank > rowWidth || blockSize <= 0 || maxBlocksPerReq < 0 ||
      req < 0 || !storageDtype(cacheDtype) || (kv != nullptr && (kvCount < 0 || kvOffset < 0 || kvLd <= 0)) ||
      (hostCache != nullptr && (hostBlockTables == nullptr || hostMaxBlocksPerReq <= 0)))
    return cudaErrorInvalidValue;
  if (numRows == 0) return cudaSuccess;
  const size_t elem = cacheDtype == HS_DTYPE_F32 ? 4 : 2;
  const bool hostVec = hostCache != nullptr && reinterpret_cast<uintptr_t>(hostCache) % 16 == 0 &&
                       (static_cast<size_t>(rowWidth) * elem) % 16 == 0;
  const GatherArgs g{blockTables,
                     maxBlocksPerReq,
                     hostCache != nullptr ? hostBlockTables : nullptr,
                     hostCache != nullptr ? hostMaxBlocksPerReq : 0,
                     hostVec,
                     req,
                     blockSize,
                     rowWidth,
                     rank,
                     rowWidth - rank,
                     static_cast<Bf16*>(out),
                     static_cast<Bf16*>(kv),
                     kvLd,
                     kvOffset,
                     kvStride,
                     kvCount};
  return withDtype(cacheDtype, [&](auto v) {
    using C = decltype(v);
    gatherKernel<C><<<numRows, kGatherThreads, 0, stream>>>(static_cast<const C*>(cache),
                                                            static_cast<const C*>(hostCache), g);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t hsMlaPrefillSoftmax(const float* scores, void* probs, int numHeads, int numQueries,
                                           int numKeys, int rowStride, int firstPos, int keyLimit,
                                           const int32_t* topk, int topkStride, cudaStream_t stream) {
  if (numHeads < 0 || numQueries < 0 || numKeys < 0 || rowStride < numKeys || numHeads > 65535 ||
      (topk != nullptr && topkStride <= 0))
    return cudaErrorInvalidValue;
  if (numHeads == 0 || numQueries == 0 || numKeys == 0) return cudaSuccess;
  const dim3 grid(numQueries, numHeads);
  softmaxKernel<<<grid, kSoftmaxThreads, sizeof(float) * 2 * kWarps, stream>>>(
      scores, static_cast<Bf16*>(probs), numQueries, numKeys, rowStride, firstPos, keyLimit, topk, topkStride);
  return cudaGetLastError();
}
