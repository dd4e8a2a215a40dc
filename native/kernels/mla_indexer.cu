// The DSA lightning indexer on CUDA (mla.h): logits of every past token from the paged index keys.
//
// indexerLogitsKernel, one CTA of 128 threads per (chunk of 128 positions, token): the token's
// queries (Hi x Di, f32) and scaled head weights sit in shared memory; each thread owns one
// position i <= p, reads its key row in 32-element pieces and keeps the Hi dot products in
// registers (the queries read as broadcast float4 shared loads), then sums w_h * relu(scale *
// dot_h) over the heads in order. Positions past p (and
// the padding columns up to width) get -inf.
// The causal top-k over these logits: mla_topk.cu.
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attention_tile.cuh"
#include "hisparse_common.cuh"
#include "mla.h"
#include "mla_common.cuh"

namespace hs_mla {
namespace {

constexpr int kLogitThreads = 128;
constexpr int kKeyPiece = 32;

/** k[e] = key[e0 + e], a whole piece of a 16-byte aligned row (Di % 32 == 0): 8 bf16 per load. */
__device__ __forceinline__ void loadPiece(const Bf16* key, int e0, float (&k)[kKeyPiece]) {
  const uint4* v = reinterpret_cast<const uint4*>(key + e0);
#pragma unroll
  for (int j = 0; j < kKeyPiece / 8; ++j) {
    const uint4 w = v[j];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      k[8 * j + 2 * i] = __uint_as_float(words[i] << 16);
      k[8 * j + 2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
}
__device__ __forceinline__ void loadPiece(const float* key, int e0, float (&k)[kKeyPiece]) {
#pragma unroll
  for (int e = 0; e < kKeyPiece; ++e) k[e] = key[e0 + e];
}

/**
 * Token t's request (*r; -1 when t is in none) and position in it (-1 then): queryStartLoc is
 * ascending, so a linear scan over the few requests of a step is short.
 */
__device__ __forceinline__ int tokenPosition(const HsMlaIndexerParams& a, int t, int* r) {
  *r = -1;
  for (int j = 0; j < a.numReqs; ++j)
    if (a.queryStartLoc[j] <= t && t < a.queryStartLoc[j + 1]) *r = j;
  const int q = *r;
  return q < 0 ? -1 : a.seqLens[q] - (a.queryStartLoc[q + 1] - a.queryStartLoc[q]) + (t - a.queryStartLoc[q]);
}

/** Q: the dtype of the queries, head weights and keys (f32 or Bf16). */
template <typename Q>
__global__ void __launch_bounds__(kLogitThreads) indexerLogitsKernel(const HsMlaIndexerParams a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int Hi = a.numHeads;
  const int Di = a.headDim;
  float* qs = reinterpret_cast<float*>(smem);  // [Hi, Di]
  float* ws = qs + Hi * Di;                    // [Hi]
  const int t = blockIdx.y;
  const int i = blockIdx.x * kLogitThreads + threadIdx.x;
  float* out = a.logits + static_cast<size_t>(t) * a.width;
  int r = 0;
  const int p = tokenPosition(a, t, &r);
  if (blockIdx.x * kLogitThreads > p) {  // the whole chunk is past p
    if (i < a.width) out[i] = -INFINITY;
    return;
  }
  const Q* q = static_cast<const Q*>(a.q) + static_cast<size_t>(t) * Hi * Di;
  for (int j = threadIdx.x; j < Hi * Di; j += blockDim.x) qs[j] = toFloat(q[j]);
  const Q* w = static_cast<const Q*>(a.headWeights) + static_cast<size_t>(t) * Hi;
  for (int j = threadIdx.x; j < Hi; j += blockDim.x) ws[j] = toFloat(w[j]) * a.headWeightScale;
  __syncthreads();
  if (i >= a.width) return;
  const int bs = a.blockSize;
  if (i > p || i / bs >= a.maxBlocksPerReq) {
    out[i] = -INFINITY;
    return;
  }
  const int slot = a.blockTables[static_cast<size_t>(r) * a.maxBlocksPerReq + i / bs] * bs + i % bs;
  const Q* key = static_cast<const Q*>(a.indexKeys) + static_cast<size_t>(slot) * Di;
  float dot[HS_MLA_MAX_INDEX_HEADS];
#pragma unroll
  for (int h = 0; h < HS_MLA_MAX_INDEX_HEADS; ++h) dot[h] = 0.f;
  for (int e0 = 0; e0 < Di; e0 += kKeyPiece) {
    float k[kKeyPiece];
    loadPiece(key, e0, k);
    // Whole pieces (Di % 32 == 0): one broadcast float4 shared load feeds 4 FMAs.
#pragma unroll
    for (int h = 0; h < HS_MLA_MAX_INDEX_HEADS; ++h) {
      if (h >= Hi) break;
      const float4* qh = reinterpret_cast<const float4*>(qs + h * Di + e0);
      float d = dot[h];
#pragma unroll
      for (int e = 0; e < kKeyPiece / 4; ++e) {
        const float4 v = qh[e];
        d += v.x * k[4 * e] + v.y * k[4 * e + 1] + v.z * k[4 * e + 2] + v.w * k[4 * e + 3];
      }
      dot[h] = d;
    }
  }
  float acc = 0.f;
#pragma unroll
  for (int h = 0; h < HS_MLA_MAX_INDEX_HEADS; ++h) {
    if (h >= Hi) break;
    const float s = dot[h] * a.softmaxScale;
    if (s > 0.f) acc += s * ws[h];
  }
  out[i] = acc;
}

// ---- tensor-core logits (bf16) ----------------------------------------------------------------
// indexerLogitsTcKernel<MT, KC>, one CTA of 4 warps per (span of kTcSpan positions, token): the
// token's queries are the A operand of mma.m16n8k16 (heads as rows, MT tiles of 16, zero rows
// past Hi; Di = 32 * KC), each warp walks its kTcWarpPositions positions in n8 tiles whose key
// rows are the B operand, loaded straight from the paged cache with 16-byte loads: lane (g, c)
// loads row g's elements [32 j + 8 c, +8) of each 32-element chunk j. The dot product sums over
// the head dimension, so the k order inside a chunk is free: k-step (j, half) takes elements
// 32 j + 8 c + 4 half + {0, 1} as logical k {2c, 2c+1} and + {2, 3} as {2c+8, 2c+9}, the same
// for A and B. Each lane then sums w_h * relu(scale * dot) over its heads (16 m + g, + 8) for its
// two positions and the 8 lanes of a column reduce by shuffles (heads summed in another order
// than the SIMT kernel's: fp32 rounding differs by ~1 ulp of the partial sums).

constexpr int kTcWarps = 4;
constexpr int kTcWarpPositions = 64;
constexpr int kTcSpan = kTcWarps * kTcWarpPositions;

/** 16 bytes at elements [e, e + 8) of a bf16 row (16-byte aligned), zero when !ok. */
__device__ __forceinline__ uint4 load8(const Bf16* row, int e, bool ok) {
  return ok ? *reinterpret_cast<const uint4*>(row + e) : make_uint4(0u, 0u, 0u, 0u);
}

/**
 * Logits of one token (blockIdx.y) over kTcSpan positions (blockIdx.x): MT m16 tiles of heads
 * (Hi <= 16 * MT, rows past Hi zero), KC chunks of 32 of the head dim (Di = 32 * KC). q: bf16
 * [T, Hi * Di], headWeights bf16 [T, Hi], indexKeys bf16 [numBlocks, blockSize, Di] (16-byte
 * aligned rows), logits f32 [T, width]. Each warp: kTcWarpPositions positions, NT n8 tiles
 * (8 positions each) loaded before their mma.
 */
template <int MT, int KC>
__global__ void __launch_bounds__(kTcWarps * 32) indexerLogitsTcKernel(const HsMlaIndexerParams a) {
  constexpr int NT = MT <= 2 ? 4 : 2;  // n8 tiles in flight per warp iteration
  const int Hi = a.numHeads;
  const int Di = 32 * KC;
  const int t = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int c = lane & 3;
  float* out = a.logits + static_cast<size_t>(t) * a.width;
  int r = 0;
  const int p = tokenPosition(a, t, &r);
  const int span0 = blockIdx.x * kTcSpan;
  if (span0 > p) {  // the whole span is past p
    for (int i = span0 + threadIdx.x; i < min(a.width, span0 + kTcSpan); i += blockDim.x) out[i] = -INFINITY;
    return;
  }
  const int bs = a.blockSize;
  const int limit = min(p, a.maxBlocksPerReq * bs - 1);  // the last position with a key
  // A fragments: qa[m][j] = row (16m + g) and (16m + g + 8), elements [32 j + 8 c, +8).
  const Bf16* q = static_cast<const Bf16*>(a.q) + static_cast<size_t>(t) * Hi * Di;
  uint4 qa[MT][KC][2];
  float wh[MT][2];
  const Bf16* w = static_cast<const Bf16*>(a.headWeights) + static_cast<size_t>(t) * Hi;
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = 16 * m + g + 8 * h;
      wh[m][h] = head < Hi ? toFloat(w[head]) * a.headWeightScale : 0.f;
#pragma unroll
      for (int j = 0; j < KC; ++j) qa[m][j][h] = load8(q + head * Di, 32 * j + 8 * c, head < Hi);
    }
  const Bf16* keys = static_cast<const Bf16*>(a.indexKeys);
  const int32_t* table = a.blockTables + static_cast<size_t>(r) * a.maxBlocksPerReq;
  const int w0 = span0 + warp * kTcWarpPositions;
  for (int base = w0; base < w0 + kTcWarpPositions && base < a.width; base += 8 * NT) {
    uint4 kb[NT][KC];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      const int pos = base + 8 * n + g;
      const bool ok = pos <= limit;
      const Bf16* key = keys + static_cast<size_t>(ok ? table[pos / bs] * bs + pos % bs : 0) * Di;
#pragma unroll
      for (int j = 0; j < KC; ++j) kb[n][j] = load8(key, 32 * j + 8 * c, ok);
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      float part[2] = {0.f, 0.f};
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < KC; ++j) {
          const uint32_t a0[4] = {qa[m][j][0].x, qa[m][j][1].x, qa[m][j][0].y, qa[m][j][1].y};
          hs_attn::mmaBf16(acc, a0, kb[n][j].x, kb[n][j].y);
          const uint32_t a1[4] = {qa[m][j][0].z, qa[m][j][1].z, qa[m][j][0].w, qa[m][j][1].w};
          hs_attn::mmaBf16(acc, a1, kb[n][j].z, kb[n][j].w);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sc = acc[e] * a.softmaxScale;
          if (sc > 0.f) part[e & 1] += sc * wh[m][e >> 1];
        }
      }
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        part[0] += __shfl_xor_sync(0xffffffffu, part[0], o);
        part[1] += __shfl_xor_sync(0xffffffffu, part[1], o);
      }
      if (g == 0)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int pos = base + 8 * n + 2 * c + e;
          if (pos < a.width) out[pos] = pos <= limit ? part[e] : -INFINITY;
        }
    }
  }
}

/** The tensor-core kernel for bf16 and these shapes (Hi <= 64, Di in {32, 64, 128}); false: the SIMT kernel. */
bool launchLogitsTc(const HsMlaIndexerParams& a, cudaStream_t stream, cudaError_t* err) {
  if (a.qDtype != HS_DTYPE_BF16 || a.numHeads > 64 || (a.headDim != 32 && a.headDim != 64 && a.headDim != 128))
    return false;
  const dim3 grid((a.width + kTcSpan - 1) / kTcSpan, a.numTokens);
  const int MT = a.numHeads <= 16 ? 1 : a.numHeads <= 32 ? 2 : 4;
  const int KC = a.headDim / 32;
  auto go = [&](auto kernel) {
    kernel<<<grid, kTcWarps * 32, 0, stream>>>(a);
    *err = cudaGetLastError();
  };
  if (MT == 1) {
    if (KC == 1) go(indexerLogitsTcKernel<1, 1>);
    else if (KC == 2) go(indexerLogitsTcKernel<1, 2>);
    else go(indexerLogitsTcKernel<1, 4>);
  } else if (MT == 2) {
    if (KC == 1) go(indexerLogitsTcKernel<2, 1>);
    else if (KC == 2) go(indexerLogitsTcKernel<2, 2>);
    else go(indexerLogitsTcKernel<2, 4>);
  } else {
    if (KC == 1) go(indexerLogitsTcKernel<4, 1>);
    else if (KC == 2) go(indexerLogitsTcKernel<4, 2>);
    else go(indexerLogitsTcKernel<4, 4>);
  }
  return true;
}

}  // namespace
}  // namespace hs_mla

using namespace hs_mla;

namespace {

/** The shared argument checks of both logits kernels. */
bool validIndexerParams(const HsMlaIndexerParams& a) {
  return a.numTokens >= 0 && a.numReqs >= 0 && a.numHeads > 0 && a.numHeads <= HS_MLA_MAX_INDEX_HEADS &&
         a.headDim > 0 && a.headDim <= HS_MLA_MAX_INDEX_DIM && a.headDim % 32 == 0 && a.blockSize > 0 &&
         a.width > 0 && a.numTokens <= 65535 && storageDtype(a.qDtype) && a.keyDtype == a.qDtype;
}

/** HISPARSE_MLA_INDEXER=simt forces the SIMT logits kernel (benchmark A/B); read once. */
bool simtIndexerForced() {
  static const bool forced = [] {
    const char* v = std::getenv("HISPARSE_MLA_INDEXER");
    return v != nullptr && std::strcmp(v, "simt") == 0;
  }();
  return forced;
}

}  // namespace

extern "C" cudaError_t hsMlaIndexerLogitsSimt(const HsMlaIndexerParams* p, cudaStream_t stream) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const HsMlaIndexerParams& a = *p;
  if (!validIndexerParams(a)) return cudaErrorInvalidValue;
  if (a.numTokens == 0) return cudaSuccess;
  const size_t smemBytes = sizeof(float) * (static_cast<size_t>(a.numHeads) * a.headDim + a.numHeads);
  if (smemBytes > 48 * 1024) return cudaErrorInvalidValue;
  const dim3 grid((a.width + kLogitThreads - 1) / kLogitThreads, a.numTokens);
  return withDtype(a.qDtype, [&](auto qv) {
    using Q = decltype(qv);
    indexerLogitsKernel<Q><<<grid, kLogitThreads, smemBytes, stream>>>(a);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t hsMlaIndexerLogits(const HsMlaIndexerParams* p, cudaStream_t stream) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const HsMlaIndexerParams& a = *p;
  if (!validIndexerParams(a)) return cudaErrorInvalidValue;
  if (a.numTokens == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  if (!simtIndexerForced() && launchLogitsTc(a, stream, &err)) return err;
  return hsMlaIndexerLogitsSimt(p, stream);
}
