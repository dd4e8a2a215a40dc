// Absorbed MLA attention (mla.h): the query absorption into latent space, the split-KV attention
// over the latent rows (MQA with one C + R wide KV head shared by all Hq query heads), the merge
// of split partials and the value up-projection. SIMT fp32 throughout; the latent rows of a chunk
// are staged once in shared memory and read by the 16 heads of the CTA.
//
// hsMlaAttention, one CTA of 256 threads (8 warps) per (token, 16-head tile, split):
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

#include "hisparse_common.cuh"
#include "mla.h"
#include "mla_common.cuh"

namespace hs_mla {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadTile = 16;
constexpr int kRowsPerChunk = 32;
constexpr int kQPerLane = HS_MLA_MAX_ROW / 32;
constexpr int kColsPerThread = HS_MLA_MAX_RANK / kThreads;
constexpr int kMaxSplits = 64;
/** Tokens per CTA of the absorb and output kernels (each weight element is read once per tile). */
constexpr int kTokenTile = 8;

/** Dynamic shared memory of the attention kernel for rows of D = C + R. */
size_t attentionSmemBytes(int D) {
  return sizeof(float) * (static_cast<size_t>(kRowsPerChunk) * D + kRowsPerChunk * kHeadTile + 4 * kHeadTile) +
         sizeof(int) * kRowsPerChunk;
}

int smCount() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      n <= 0)
    n = 132;
  cached.store(n, std::memory_order_relaxed);
  return n;
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

template <typename Q>
__global__ void __launch_bounds__(kThreads)
    absorbKernel(const Q* q, const Bf16* kvB, float* qAbs, int T, int Hq, int N, int R, int Vd, int C) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* qn = reinterpret_cast<float*>(smem);  // [kTokenTile, N]
  const int h = blockIdx.x;
  const int t0 = blockIdx.y * kTokenTile;
  const int qRow = Hq * (N + R);
  const int D = C + R;
  for (int i = threadIdx.x; i < kTokenTile * N; i += blockDim.x) {
    const int tt = i / N;
    const int n = i - tt * N;
    qn[i] = t0 + tt < T ? toFloat(q[static_cast<size_t>(t0 + tt) * qRow + h * (N + R) + n]) : 0.f;
  }
  __syncthreads();
  float acc[kTokenTile][kColsPerThread];
#pragma unroll
  for (int tt = 0; tt < kTokenTile; ++tt)
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) acc[tt][j] = 0.f;
  const Bf16* wk = kvB + static_cast<size_t>(h) * (N + Vd) * C;
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int j = 0; j < kColsPerThread; ++j) {
      const int c = threadIdx.x + j * kThreads;
      if (c >= C) break;
      const float w = toFloat(wk[static_cast<size_t>(n) * C + c]);
#pragma unroll
      for (int tt = 0; tt < kTokenTile; ++tt) acc[tt][j] += qn[tt * N + n] * w;
    }
  }
#pragma unroll
  for (int tt = 0; tt < kTokenTile; ++tt) {
    const int t = t0 + tt;
    if (t < T) {  // (no break: acc stays in registers only with compile-time indices)
      float* dst = qAbs + (static_cast<size_t>(t) * Hq + h) * D;
#pragma unroll
      for (int j = 0; j < kColsPerThread; ++j) {
        const int c = threadIdx.x + j * kThreads;
        if (c < C) dst[c] = acc[tt][j];
      }
      for (int i = threadIdx.x; i < R; i += blockDim.x)
        dst[C + i] = toFloat(q[static_cast<size_t>(t) * qRow + h * (N + R) + N + i]);
    }
  }
}

template <typename O>
__global__ void __launch_bounds__(kThreads)
    outProjectKernel(const float* oLat, const Bf16* kvB, O* out, int T, int Hq, int N, int Vd, int C) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* ol = reinterpret_cast<float*>(smem);  // [kTokenTile, C]
  const int h = blockIdx.x;
  const int t0 = blockIdx.y * kTokenTile;
  for (int i = threadIdx.x; i < kTokenTile * C; i += blockDim.x) {
    const int tt = i / C;
    const int c = i - tt * C;
    ol[i] = t0 + tt < T ? oLat[(static_cast<size_t>(t0 + tt) * Hq + h) * C + c] : 0.f;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const Bf16* wv = kvB + (static_cast<size_t>(h) * (N + Vd) + N) * C;
  for (int v = warp; v < Vd; v += kThreads / 32) {
    float acc[kTokenTile];
#pragma unroll
    for (int tt = 0; tt < kTokenTile; ++tt) acc[tt] = 0.f;
    for (int c = lane; c < C; c += 32) {
      const float w = toFloat(wv[static_cast<size_t>(v) * C + c]);
#pragma unroll
      for (int tt = 0; tt < kTokenTile; ++tt) acc[tt] += w * ol[tt * C + c];
    }
#pragma unroll
    for (int tt = 0; tt < kTokenTile; ++tt) {
      const float s = warpSum(acc[tt]);
      if (lane == 0 && t0 + tt < T) out[static_cast<size_t>(t0 + tt) * Hq * Vd + h * Vd + v] = fromFloat<O>(s);
    }
  }
}

/** Request of token t: the r with queryStartLoc[r] <= t < queryStartLoc[r + 1], or -1. */
__device__ __forceinline__ int requestOf(const int32_t* qsl, int numReqs, int t) {
  int lo = 0;
  int hi = numReqs;  // answer in [0, numReqs): last r with qsl[r] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (qsl[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return (lo < numReqs && qsl[lo] <= t && t < qsl[lo + 1]) ? lo : -1;
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

using namespace hs_mla;

extern "C" cudaError_t hsMlaAbsorbQuery(const void* q, int qDtype, const void* kvBProj, float* qAbs, int numTokens,
                                        int numHeads, int nopeDim, int ropeDim, int vDim, int rank,
                                        cudaStream_t stream) {
  if (numTokens < 0 || numHeads <= 0 || nopeDim <= 0 || ropeDim < 0 || vDim <= 0 || rank <= 0 ||
      rank > HS_MLA_MAX_RANK || !storageDtype(qDtype))
    return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const dim3 grid(numHeads, (numTokens + kTokenTile - 1) / kTokenTile);
  const size_t smemBytes = sizeof(float) * kTokenTile * nopeDim;
  if (smemBytes > 48 * 1024) return cudaErrorInvalidValue;
  return withDtype(qDtype, [&](auto v) {
    using Q = decltype(v);
    absorbKernel<Q><<<grid, kThreads, smemBytes, stream>>>(static_cast<const Q*>(q), static_cast<const Bf16*>(kvBProj),
                                                          qAbs, numTokens, numHeads, nopeDim, ropeDim, vDim, rank);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t hsMlaOutProject(const float* oLat, const void* kvBProj, void* out, int outDtype, int numTokens,
                                       int numHeads, int nopeDim, int vDim, int rank, cudaStream_t stream) {
  if (numTokens < 0 || numHeads <= 0 || nopeDim <= 0 || vDim <= 0 || rank <= 0 || rank > HS_MLA_MAX_RANK ||
      !storageDtype(outDtype))
    return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const dim3 grid(numHeads, (numTokens + kTokenTile - 1) / kTokenTile);
  const size_t smemBytes = sizeof(float) * kTokenTile * rank;
  return withDtype(outDtype, [&](auto v) {
    using O = decltype(v);
    outProjectKernel<O><<<grid, kThreads, smemBytes, stream>>>(oLat, static_cast<const Bf16*>(kvBProj),
                                                              static_cast<O*>(out), numTokens, numHeads, nopeDim,
                                                              vDim, rank);
    return cudaGetLastError();
  });
}

extern "C" size_t hsMlaAttentionWorkspaceBytes(int numTokens, int numHeads, int rank, int maxContext) {
  if (numTokens <= 0 || numHeads <= 0 || rank <= 0 || maxContext <= 0) return 0;
  const int splits = numSplitsFor(numTokens, numHeads, maxContext);
  if (splits == 1) return 0;
  return sizeof(float) * static_cast<size_t>(splits) * numTokens * numHeads * (rank + 2);
}

extern "C" cudaError_t hsMlaAttention(const HsMlaAttentionParams* p, cudaStream_t stream) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const HsMlaAttentionParams& a = *p;
  const int D = a.rank + a.ropeDim;
  if (a.numTokens < 0 || a.numReqs < 0 || a.numHeads <= 0 || a.rank <= 0 || a.rank > HS_MLA_MAX_RANK ||
      a.ropeDim < 0 || D > HS_MLA_MAX_ROW || a.blockSize <= 0 || a.maxBlocksPerReq < 0 || a.maxContext <= 0 ||
      (a.topkIndices != nullptr && a.topkStride <= 0) || !storageDtype(a.cacheDtype))
    return cudaErrorInvalidValue;
  if (a.numTokens == 0) return cudaSuccess;
  const int maxEntries = a.topkIndices != nullptr ? a.topkStride : a.maxContext;
  const int splits = numSplitsFor(a.numTokens, a.numHeads, maxEntries);
  const int perSplit = entriesPerSplit(maxEntries, splits);
  if (splits > 1 && (a.workspace == nullptr ||
                     a.workspaceBytes < hsMlaAttentionWorkspaceBytes(a.numTokens, a.numHeads, a.rank, maxEntries)))
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
  mergeKernel<<<dim3(a.numTokens, a.numHeads), kThreads, 0, stream>>>(static_cast<const float*>(a.workspace), a.oLat,
                                                                      a.numTokens, a.numHeads, a.rank, splits);
  return cudaGetLastError();
}
