// The DSA lightning indexer on CUDA (mla.h): logits of every past token from the paged index keys
// and the causal top-k.
//
// indexerLogitsKernel, one CTA of 128 threads per (chunk of 128 positions, token): the token's
// queries (Hi x Di, f32) and scaled head weights sit in shared memory; each thread owns one
// position i <= p, reads its key row in 32-element pieces and keeps the Hi dot products in
// registers (the queries read as broadcast float4 shared loads), then sums w_h * relu(scale *
// dot_h) over the heads in order. Positions past p (and
// the padding columns up to width) get -inf.
//
// topkKernel, one CTA of 256 threads per row: the order-preserving 32-bit key of each candidate
// logit (0 for positions past p), the radix select of radix_select.cuh for the k-th largest key
// and how many keys equal to it are taken, then one ordered pass (CTA scans) that writes the
// taken positions ascending: keys above the threshold and the first `take` equal keys in
// position order (the CPU oracle's tie rule, src/backends/cpu/kernels/dsa.ts).
#include <climits>
#include <cmath>

#include "hisparse_common.cuh"
#include "mla.h"
#include "mla_common.cuh"
#include "radix_select.cuh"

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
  // The token's request and position (queryStartLoc is ascending; a linear scan is short).
  int r = -1;
  for (int j = 0; j < a.numReqs; ++j)
    if (a.queryStartLoc[j] <= t && t < a.queryStartLoc[j + 1]) r = j;
  const int p =
      r < 0 ? -1 : a.seqLens[r] - (a.queryStartLoc[r + 1] - a.queryStartLoc[r]) + (t - a.queryStartLoc[r]);
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

constexpr int kTopkThreads = hs_sparse::kThreads;

/** Order-preserving key of a logit (larger logit, larger key); NaN as -inf, -0 as +0; never 0. */
__device__ __forceinline__ uint32_t orderKey32(float v) {
  if (v != v) v = -INFINITY;
  const uint32_t b = v == 0.f ? 0u : __float_as_uint(v);
  return (b >> 31) ? ~b : (b | 0x80000000u);
}

__global__ void __launch_bounds__(kTopkThreads)
    topkKernel(const float* logits, const int32_t* positions, int32_t* out, int width, int k) {
  extern __shared__ __align__(16) unsigned char smem[];
  int* hist = reinterpret_cast<int*>(smem);
  int* warpSums = hist + 256;
  int* bc = warpSums + 32;
  const int t = blockIdx.x;
  const float* row = logits + static_cast<size_t>(t) * width;
  int32_t* dst = out + static_cast<size_t>(t) * k;
  const int n = min(max(positions[t], -1), width - 1) + 1;  // candidates [0, n)
  if (n <= k) {
    for (int j = threadIdx.x; j < k; j += blockDim.x) dst[j] = j < n ? j : -1;
    return;
  }
  int take = 0;
  const uint32_t threshold =
      hs_sparse::radixSelect<uint32_t>([row](int i) { return orderKey32(row[i]); }, n, k, hist, bc, &take);
  int eqSoFar = 0;
  int selSoFar = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const uint32_t key = i < n ? orderKey32(row[i]) : 0u;
    const bool eq = key != 0 && key == threshold;
    int eqTotal = 0;
    const int eqRank = eqSoFar + hs_sparse::blockExclusiveScan(eq ? 1 : 0, &eqTotal, warpSums);
    const bool sel = (key != 0 && key > threshold) || (eq && eqRank < take);
    int selTotal = 0;
    const int idx = selSoFar + hs_sparse::blockExclusiveScan(sel ? 1 : 0, &selTotal, warpSums);
    if (sel && idx < k) dst[idx] = i;
    eqSoFar += eqTotal;
    selSoFar += selTotal;
  }
  for (int j = selSoFar + threadIdx.x; j < k; j += blockDim.x) dst[j] = -1;  // never, with n > k
}

}  // namespace
}  // namespace hs_mla

using namespace hs_mla;

extern "C" cudaError_t hsMlaIndexerLogits(const HsMlaIndexerParams* p, cudaStream_t stream) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const HsMlaIndexerParams& a = *p;
  if (a.numTokens < 0 || a.numReqs < 0 || a.numHeads <= 0 || a.numHeads > HS_MLA_MAX_INDEX_HEADS || a.headDim <= 0 ||
      a.headDim > HS_MLA_MAX_INDEX_DIM || a.headDim % 32 != 0 || a.blockSize <= 0 || a.width <= 0 ||
      a.numTokens > 65535 || !storageDtype(a.qDtype) || a.keyDtype != a.qDtype)
    return cudaErrorInvalidValue;
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

extern "C" cudaError_t hsMlaTopk(const float* logits, const int32_t* positions, int32_t* out, int numTokens, int width,
                                 int k, cudaStream_t stream) {
  if (numTokens < 0 || width <= 0 || k <= 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  topkKernel<<<numTokens, kTopkThreads, (256 + 32 + 8) * sizeof(int), stream>>>(logits, positions, out, width, k);
  return cudaGetLastError();
}
