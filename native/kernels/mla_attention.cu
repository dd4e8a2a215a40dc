// The SIMT absorbed MLA attention (mla.h hsMlaAttentionSimt), the oracle of the tensor-core
// kernel (mla_attention_tc.cu) and the path of f32 caches and other row shapes; the merge of
// split partials both kernels share (mla_attention.cuh); the hsMlaAttention dispatcher. MQA over
// one C + R wide KV head shared by all Hq query heads, fp32 throughout; the latent rows of a
// chunk are staged once in shared memory and read by the 16 heads of the CTA.
//
// hsMlaAttentionSimt, one CTA of 256 threads (8 warps) per (token, 16-head tile, split):
// 1. the token's request r comes from a binary search of queryStartLoc, its position p from
//    seqLens[r]; the entries it reads are positions [0, p] (dense) or topkIndices[t] (DSA);
// 2. per chunk of 32 entries: resolve each entry's slot (block table), stage the 32 rows (f32) in
//    shared memory; warp w scores rows 16 (w / 4) .. + 15 for heads 4 (w % 4) .. + 3, each lane
//    holding its heads' query elements lane + 32 j in registers, a warp sum per (row, head);
// 3. online softmax per head (warp w owns heads 2w, 2w + 1: running max m and sum l);
// 4. thread x accumulates o[h][c] for c = x, x + 256 (c < C) and the 16 heads: o = o * alpha +
//    sum_rows p[row][h] * row[c].
// A split writes (o, m, l) to the workspace and mergeKernel combines them; one split writes
// o / l directly. Invalid entries (-1, > p, outside the table) score -inf and add nothing.
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "hisparse_common.cuh"
#include "mla.h"
#include "mla_attention.cuh"
#include "mla_common.cuh"

namespace hs_mla {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadTile = 16;
constexpr int kRowsPerChunk = 32;
constexpr int kQPerLane = HS_MLA_MAX_ROW / 32;
constexpr int kColsPerThread = HS_MLA_MAX_RANK / kThreads;
constexpr int kMaxSplits = 64;

/** Dynamic shared memory of the attention kernel for rows of D = C + R. */
size_t attentionSmemBytes(int D) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerChunk) * D + kRowsPerChunk * kHeadTile + 4 * kHeadTile) +
         sizeof(int) * kRowsPerChunk;
}

/** Splits of the context: enough CTAs for two waves, at least 4 chunks per split. */
int numSplitsFor(int numTokens, int numHeads, int maxContext) {
  const int tiles = (numHeads + kHeadTile - 1) / kHeadTile;
  const int ctas = numTokens * tiles;
  const int want = (2 * smCount() + ctas - 1) / max(ctas, 1);
  const int byLength = (maxContext + 4 * kRowsPerChunk - 1) / (4 * kRowsPerChunk);
  return max(1, min(min(want, byLength), kMaxSplits));
}

/** Entries per split, a multiple of the chunk. */
int entriesPerSplit(int maxContext, int splits) {
  const int per = (maxContext + splits - 1) / splits;
  return (per + kRowsPerChunk - 1) / kRowsPerChunk * kRowsPerChunk;
}

template <typename C>
__global__ void __launch_bounds__(kThreads) attentionKernel(const HsMlaAttentionParams a, int perSplit, int numSplits) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int D = a.rank + a.ropeDim;
  float* rows = reinterpret_cast<float*>(smem);                 // [kRowsPerChunk, D]
  float* sp = rows + static_cast<size_t>(kRowsPerChunk) * D;    // [kRowsPerChunk, kHeadTile] scores, then p
  float* alpha = sp + kRowsPerChunk * kHeadTile;                // [kHeadTile]
  float* mFin = alpha + kHeadTile;                              // [kHeadTile]
  float* lFin = mFin + kHeadTile;                               // [kHeadTile]
  int* slot = reinterpret_cast<int*>(lFin + kHeadTile);         // [kRowsPerChunk]
  const int t = blockIdx.x;
  const int h0 = blockIdx.y * kHeadTile;
  const int split = blockIdx.z;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int Hq = a.numHeads;
  const int ts = t + a.queryStartLoc[0];  // the token's index in queryStartLoc's numbering
  const int r = requestOf(a.queryStartLoc, a.numReqs, ts);
  int p = -1;
  if (r >= 0) p = a.seqLens[r] - (a.queryStartLoc[r + 1] - a.queryStartLoc[r]) + (ts - a.queryStartLoc[r]);
  const int numEntries = p < 0 ? 0 : a.topkIndices != nullptr ? a.topkStride : p + 1;
  const int begin = split * perSplit;
  const int end = min(numEntries, begin + perSplit);
  const C* cache = static_cast<const C*>(a.latentCache);
  // The warp's 4 scoring heads, their query elements lane + 32 j.
  const int hg = warp & 3;
  const int rowHalf = warp >> 2;
  float qreg[4][kQPerLane];
#pragma unroll
  for (int hh = 0; hh < 4; ++hh) {
    const int h = h0 + hg * 4 + hh;
#pragma unroll
    for (int j = 0; j < kQPerLane; ++j) {
      const int e = lane + 32 * j;
      qreg[hh][j] = (h < Hq && e < D) ? a.qAbs[(static_cast<size_t>(t) * Hq + h) * D + e] : 0.f;
    }
  }
  float o[kHeadTile][kColsPerThread];
#pragma unroll
  for (int h = 0; h < kHeadTile; ++h)
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) o[h][j] = 0.f;
  // Softmax state of heads 2 warp and 2 warp + 1 (every lane holds the same values).
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};
  const int bs = a.blockSize;
  for (int c0 = begin; c0 < end; c0 += kRowsPerChunk) {
    if (threadIdx.x < kRowsPerChunk) {
      const int idx = c0 + threadIdx.x;
      int s = -1;
      if (idx < end) {
        const int pos = a.topkIndices != nullptr ? a.topkIndices[static_cast<size_t>(t) * a.topkStride + idx] : idx;
        if (pos >= 0 && pos <= p && pos / bs < a.maxBlocksPerReq)
          s = a.blockTables[static_cast<size_t>(r) * a.maxBlocksPerReq + pos / bs] * bs + pos % bs;
      }
      slot[threadIdx.x] = s;
    }
    __syncthreads();
    for (int row = warp; row < kRowsPerChunk; row += kThreads / 32) {
      const int s = slot[row];
      const C* src = cache + static_cast<size_t>(s < 0 ? 0 : s) * D;
      for (int e = lane; e < D; e += 32) rows[row * D + e] = s >= 0 ? toFloat(src[e]) : 0.f;
    }
    __syncthreads();
    for (int rr = 0; rr < kRowsPerChunk / 2; ++rr) {
      const int row = rowHalf * (kRowsPerChunk / 2) + rr;
      float dot[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kQPerLane; ++j) {
        const int e = lane + 32 * j;
        if (e >= D) break;
        const float v = rows[row * D + e];
#pragma unroll
        for (int hh = 0; hh < 4; ++hh) dot[hh] += qreg[hh][j] * v;
      }
#pragma unroll
      for (int hh = 0; hh < 4; ++hh) dot[hh] = warpSum(dot[hh]);
      if (lane < 4) {
        const float d = lane == 0 ? dot[0] : lane == 1 ? dot[1] : lane == 2 ? dot[2] : dot[3];
        sp[row * kHeadTile + hg * 4 + lane] = slot[row] >= 0 ? d * a.scale : -INFINITY;
      }
    }
    __syncthreads();
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int h = 2 * warp + hh;
      const float s = sp[lane * kHeadTile + h];
      const float mNew = fmaxf(m[hh], warpMax(s));
      const float sc = mNew == -INFINITY ? 1.f : expf(m[hh] - mNew);
      const float pv = s == -INFINITY ? 0.f : expf(s - mNew);
      l[hh] = l[hh] * sc + warpSum(pv);
      m[hh] = mNew;
      sp[lane * kHeadTile + h] = pv;
      if (lane == 0) alpha[h] = sc;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c >= a.rank) continue;
#pragma unroll
      for (int h = 0; h < kHeadTile; ++h) o[h][j] *= alpha[h];
      for (int row = 0; row < kRowsPerChunk; ++row) {
        const float v = rows[row * D + c];
#pragma unroll
        for (int h = 0; h < kHeadTile; ++h) o[h][j] += sp[row * kHeadTile + h] * v;
      }
    }
    __syncthreads();  // rows, sp and slot are rewritten by the next chunk
  }
  if (lane == 0) {
    mFin[2 * warp] = m[0];
    mFin[2 * warp + 1] = m[1];
    lFin[2 * warp] = l[0];
    lFin[2 * warp + 1] = l[1];
  }
  __syncthreads();
  const int Cr = a.rank;
#pragma unroll
  for (int h = 0; h < kHeadTile; ++h) {
    const int hq = h0 + h;
    if (hq >= Hq) continue;  // (not break: o stays in registers only with compile-time indices)
    const size_t th = static_cast<size_t>(t) * Hq + hq;
    if (numSplits == 1) {
      const float inv = lFin[h] > 0.f ? 1.f / lFin[h] : 0.f;
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int c = threadIdx.x + j * kThreads;
        if (c < Cr) a.oLat[th * Cr + c] = o[h][j] * inv;
      }
    } else {
      float* ws = static_cast<float*>(a.workspace);
      const size_t part = static_cast<size_t>(split) * a.numTokens * Hq + th;
      float* po = ws + part * Cr;
      float* pml = ws + static_cast<size_t>(numSplits) * a.numTokens * Hq * Cr + part * 2;
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int c = threadIdx.x + j * kThreads;
        if (c < Cr) po[c] = o[h][j];
      }
      if (threadIdx.x == 0) {
        pml[0] = mFin[h];
        pml[1] = lFin[h];
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) mergeKernel(const float* ws, float* oLat, int T, int Hq, int Cr, int numSplits) {
  const size_t th = static_cast<size_t>(blockIdx.x) * Hq + blockIdx.y;
  const size_t stride = static_cast<size_t>(T) * Hq;
  const float* ml = ws + static_cast<size_t>(numSplits) * stride * Cr;
  float mx = -INFINITY;
  for (int s = 0; s < numSplits; ++s) mx = fmaxf(mx, ml[(s * stride + th) * 2]);
  float L = 0.f;
  for (int s = 0; s < numSplits; ++s) {
    const float ms = ml[(s * stride + th) * 2];
    if (ms != -INFINITY) L += ml[(s * stride + th) * 2 + 1] * expf(ms - mx);
  }
  const float inv = L > 0.f ? 1.f / L : 0.f;
  for (int c = threadIdx.x; c < Cr; c += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < numSplits; ++s) {
      const float ms = ml[(s * stride + th) * 2];
      if (ms != -INFINITY) acc += ws[(s * stride + th) * Cr + c] * expf(ms - mx);
    }
    oLat[th * Cr + c] = acc * inv;
  }
}

std::atomic<unsigned long long> gSmemRaisedBf16{0};
std::atomic<unsigned long long> gSmemRaisedF32{0};

}  // namespace
}  // namespace hs_mla

cudaError_t hs_mla::launchMerge(const float* ws, float* oLat, int numTokens, int numHeads, int rank, int numSplits,
                                cudaStream_t stream) {
  mergeKernel<<<dim3(numTokens, numHeads), kThreads, 0, stream>>>(ws, oLat, numTokens, numHeads, rank, numSplits);
  return cudaGetLastError();
}

size_t hs_mla::simtWorkspaceBytes(int numTokens, int numHeads, int rank, int maxEntries) {
  if (numTokens <= 0 || numHeads <= 0 || rank <= 0 || maxEntries <= 0) return 0;
  return splitWorkspaceBytes(numSplitsFor(numTokens, numHeads, maxEntries), numTokens, numHeads, rank);
}

using namespace hs_mla;

namespace {

/** HISPARSE_MLA_ATTENTION=simt forces the SIMT kernel (benchmark A/B); read once. */
bool simtForced() {
  static const bool forced = [] {
    const char* v = std::getenv("HISPARSE_MLA_ATTENTION");
    return v != nullptr && std::strcmp(v, "simt") == 0;
  }();
  return forced;
}

}  // namespace

extern "C" size_t hsMlaAttentionWorkspaceBytes(int numTokens, int numHeads, int rank, int maxEntries) {
  const size_t simt = simtWorkspaceBytes(numTokens, numHeads, rank, maxEntries);
  const size_t tc = tcWorkspaceBytes(numTokens, numHeads, rank, maxEntries);
  return simt > tc ? simt : tc;
}

extern "C" cudaError_t hsMlaAttentionSimt(const HsMlaAttentionParams* p, cudaStream_t stream) {
  if (p == nullptr || !validAttentionParams(*p)) return cudaErrorInvalidValue;
  const HsMlaAttentionParams& a = *p;
  if (a.numTokens == 0) return cudaSuccess;
  const int D = a.rank + a.ropeDim;
  const int maxEntries = a.topkIndices != nullptr ? a.topkStride : a.maxContext;
  const int splits = numSplitsFor(a.numTokens, a.numHeads, maxEntries);
  const int perSplit = entriesPerSplit(maxEntries, splits);
  if (splits > 1 && (a.workspace == nullptr ||
                     a.workspaceBytes < simtWorkspaceBytes(a.numTokens, a.numHeads, a.rank, maxEntries)))
    return cudaErrorInvalidValue;
  const size_t smemBytes = attentionSmemBytes(D);
  const dim3 grid(a.numTokens, (a.numHeads + kHeadTile - 1) / kHeadTile, splits);
  cudaError_t err = withDtype(a.cacheDtype, [&](auto v) {
    using C = decltype(v);
    cudaError_t e = hs_sparse::ensureSmem(attentionKernel<C>, smemBytes,
                                          a.cacheDtype == HS_DTYPE_BF16 ? gSmemRaisedBf16 : gSmemRaisedF32);
    if (e != cudaSuccess) return e;
    attentionKernel<C><<<grid, kThreads, smemBytes, stream>>>(a, perSplit, splits);
    return cudaGetLastError();
  });
  if (err != cudaSuccess || splits == 1) return err;
  return launchMerge(static_cast<const float*>(a.workspace), a.oLat, a.numTokens, a.numHeads, a.rank, splits, stream);
}

extern "C" cudaError_t hsMlaAttention(const HsMlaAttentionParams* p, cudaStream_t stream) {
  if (p == nullptr || !validAttentionParams(*p)) return cudaErrorInvalidValue;
  const bool aligned = ((reinterpret_cast<uintptr_t>(p->qAbs) | reinterpret_cast<uintptr_t>(p->latentCache)) & 15) == 0;
  if (!simtForced() && aligned && tcSupports(p->cacheDtype, p->rank, p->ropeDim)) return hsMlaAttentionTc(p, stream);
  return hsMlaAttentionSimt(p, stream);
}
