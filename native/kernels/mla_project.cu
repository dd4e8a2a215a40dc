// The absorbed form's projections (mla.h): hsMlaAbsorbQuery, the query into latent space through
// W_UK, and hsMlaOutProject, the latent attention output back through W_UV. SIMT fp32 over bf16
// weights; each CTA owns one head and kTokenTile tokens, so each weight element is read once per
// tile of tokens.
#include "mla.h"
#include "mla_common.cuh"

namespace hs_mla {
namespace {

constexpr int kThreads = 256;
constexpr int kColsPerThread = HS_MLA_MAX_RANK / kThreads;
/** Tokens per CTA of the absorb and output kernels (each weight element is read once per tile). */
constexpr int kTokenTile = 8;

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
