// Memory-bound skinny GEMM for decode: y [M, N] = x [M, K] @ w[N, K]^T with M <= 16 (gemv.h).
//
// At M <= 16 a linear layer reads w (MBs) once and x (KBs) many times: its time is w's bytes over
// HBM bandwidth. cuBLAS picks split-K tiles there (plus a cublasLt splitKreduce kernel) that
// leave part of the bandwidth unused. Here each CTA owns R consecutive output columns (R rows of
// w; 2R for the gated MLP: R gate rows and the R matching up rows) and its 8 warps split K: warp
// w reads the 256-element chunks w, w + 8, w + 16, ... of each of its rows (lane l: 8 elements
// at chunk * 256 + 8 l, one 16-byte load per row, no L1 allocation so x stays cached), multiplies
// them with the same elements of every x row (read through L1) and accumulates in fp32. The
// warps' partial sums meet in shared memory and are added in warp order, so every output is a
// sum in a fixed order that depends only on K: the result is deterministic and independent of
// the batch size and of the GPU's scheduling.
//
// Launched with programmatic dependent launch (pdl.cuh) when HS_LAUNCH_PDL is on: each thread
// loads its first kPrefetch K steps of w (constant) before pdlWait, so the weight stream starts
// while the previous kernel (the norm, the attention) drains; x, bias and positions are read
// after it. The summation order is the same either way.
#include "common.cuh"
#include "gemv.h"
#include "pdl.cuh"

namespace hs {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kVec = 8;                   // elements per 16-byte load (bf16 / f16)
constexpr int kChunk = 32 * kVec;         // elements of K per warp step
constexpr int kStride = kWarps * kChunk;  // elements of K per CTA step

struct GemvArgs {
  void* y;           // [m, outCols]
  const void* x;     // [m, k]
  const void* w;     // [n, k]
  const void* bias;  // [n] or null
  int biasDtype;
  int m, n, k;
  int outCols;  // n (plain, rope) or n / 2 (silu_and_mul)
  // HS_GEMV_ROPE only (hsDenseGemvRope): the rotary embedding of ropeKernel (rope.cu)
  const int32_t* positions;  // [m]
  const float* cosSin;       // [maxPositions, headDim]: cos in [:, :headDim/2], sin after
  int headDim;
  int rotCols;  // columns of the q and k heads (rotated); the v heads after them are not
  int maxPositions;
};

/** The HS_GEMV_ROPE epilogue (internal to this file; gemv.h's public ones are 0 and 1). */
constexpr int HS_GEMV_ROPE = 2;

/** 16 bytes of w, read once: no L1 allocation, so the weight stream does not evict x from L1. */
__device__ __forceinline__ uint4 loadStreaming(const void* p) {
#ifdef HS_ATTN_HOST_EMU
  return *static_cast<const uint4*>(p);
#else
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#endif
}

/** loadStreaming that the compiler keeps in program order (the weight prefetch before pdlWait). */
__device__ __forceinline__ uint4 loadStreamingOrdered(const void* p) {
#ifdef HS_ATTN_HOST_EMU
  return *static_cast<const uint4*>(p);
#else
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

/** K steps of w each thread loads before pdlWait (k = 4096: all of them). */
constexpr int kPrefetch = 2;

/** The 8 elements of a 16-byte load as floats (through a union: no type-punned pointer). */
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[kVec]) {
  union {
    uint4 u;
    T e[kVec];
  } p;
  p.u = v;
#pragma unroll
  for (int j = 0; j < kVec; ++j) f[j] = toFloat(p.e[j]);
}

__device__ __forceinline__ float loadBias(const void* bias, int dtype, int i) {
  if (bias == nullptr) return 0.f;
  switch (dtype) {
    case HS_DTYPE_F32: return static_cast<const float*>(bias)[i];
    case HS_DTYPE_BF16: return toFloat(static_cast<const __nv_bfloat16*>(bias)[i]);
    default: return toFloat(static_cast<const __half*>(bias)[i]);
  }
}

/** y = T(T(silu(g)) * u) with g, u already rounded to T (activation.cu siluAndMulKernel). */
template <typename T>
__device__ __forceinline__ T siluMul(float g, float u) {
  const float silu = roundTo<T>(g / (1.f + expf(-g)));
  return fromFloat<T>(silu * u);
}

/**
 * Output column r (< R) of this CTA: R consecutive columns, or for HS_GEMV_ROPE (R = 2) the
 * rotation pair (i, i + headDim/2) of one head: CTA b -> head b / (headDim/2), i = b % (headDim/2).
 */
template <int R, int EPI>
__device__ __forceinline__ int colOf(const GemvArgs& a, int r) {
  if (EPI == HS_GEMV_ROPE) {
    const int half = a.headDim / 2;
    return (blockIdx.x / half) * a.headDim + blockIdx.x % half + r * half;
  }
  return blockIdx.x * R + r;
}

/** Sum of the warps' partial sums of (m, r), in warp order (deterministic). */
template <int MT, int RW>
__device__ __forceinline__ float sumWarps(const float* red, int m, int r) {
  float s = 0.f;
  for (int wp = 0; wp < kWarps; ++wp) s += red[(wp * MT + m) * RW + r];
  return s;
}

/** HS_GEMV_ROPE: one thread per token row m rotates the CTA's pair as ropeKernel does (rope.cu). */
template <typename T, int MT>
__device__ void ropeEpilogue(const GemvArgs& a, const float* red) {
  for (int m = threadIdx.x; m < a.m; m += kThreads) {
    const int c0 = colOf<2, HS_GEMV_ROPE>(a, 0);
    const int c1 = colOf<2, HS_GEMV_ROPE>(a, 1);
    const float x1 = roundTo<T>(sumWarps<MT, 2>(red, m, 0) + loadBias(a.bias, a.biasDtype, c0));
    const float x2 = roundTo<T>(sumWarps<MT, 2>(red, m, 1) + loadBias(a.bias, a.biasDtype, c1));
    T* y = static_cast<T*>(a.y) + static_cast<size_t>(m) * a.outCols;
    const int pos = a.positions[m];
    if (c0 >= a.rotCols || pos < 0 || pos >= a.maxPositions) {  // v heads, padded rows: no rotation
      y[c0] = fromFloat<T>(x1);
      y[c1] = fromFloat<T>(x2);
      continue;
    }
    const int half = a.headDim / 2;
    const float c = a.cosSin[static_cast<size_t>(pos) * a.headDim + (c0 % a.headDim)];
    const float s = a.cosSin[static_cast<size_t>(pos) * a.headDim + half + (c0 % a.headDim)];
    y[c0] = fromFloat<T>(x1 * c - x2 * s);
    y[c1] = fromFloat<T>(x2 * c + x1 * s);
  }
}

/** HS_GEMV_PLAIN and HS_GEMV_SILU_AND_MUL: one thread per (m, r). */
template <typename T, typename O, int MT, int R, int EPI>
__device__ void columnEpilogue(const GemvArgs& a, const float* red) {
  constexpr int RW = EPI == HS_GEMV_SILU_AND_MUL ? 2 * R : R;
  for (int t = threadIdx.x; t < a.m * R; t += kThreads) {
    const int m = t / R;
    const int r = t % R;
    const int col = colOf<R, EPI>(a, r);
    if (col >= a.outCols) continue;  // last CTA: columns past the end
    O* y = static_cast<O*>(a.y) + static_cast<size_t>(m) * a.outCols + col;
    if (EPI == HS_GEMV_SILU_AND_MUL) {
      const float g = roundTo<T>(sumWarps<MT, RW>(red, m, r) + loadBias(a.bias, a.biasDtype, col));
      const float u = roundTo<T>(sumWarps<MT, RW>(red, m, R + r) + loadBias(a.bias, a.biasDtype, a.outCols + col));
      *y = static_cast<O>(siluMul<T>(g, u));
    } else {
      *y = fromFloat<O>(sumWarps<MT, RW>(red, m, r) + loadBias(a.bias, a.biasDtype, col));
    }
  }
}

/** acc[m][r] += x[m, k0 .. k0 + 8) . w[r, k0 .. k0 + 8) for the batch rows m < a.m (w already loaded). */
template <typename T, int MT, int RW>
__device__ __forceinline__ void gemvStep(float (&acc)[MT][RW], const uint4 (&wv)[RW], const T* x, const GemvArgs& a,
                                         int k0) {
  float wf[RW][kVec];
#pragma unroll
  for (int r = 0; r < RW; ++r) unpack8<T>(wv[r], wf[r]);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= a.m) break;  // rows past the batch: nothing to read
    float xf[kVec];
    // after pdlWait: griddepcontrol.wait makes the previous kernel's writes visible to this grid
    unpack8<T>(__ldg(reinterpret_cast<const uint4*>(x + static_cast<size_t>(m) * a.k + k0)), xf);
#pragma unroll
    for (int r = 0; r < RW; ++r)
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[m][r] += xf[j] * wf[r][j];
  }
}

/**
 * Grid: ceil(outCols / R) CTAs of kThreads; dynamic shared memory kWarps * MT * RW floats.
 * T: x and w element type; O: y's (T or float; T for SILU); MT: the largest M handled (rows
 * m >= a.m are skipped); R: output columns per CTA; EPI: HsGemvEpilogue.
 */
template <typename T, typename O, int MT, int R, int EPI>
__global__ void __launch_bounds__(kThreads) gemvKernel(GemvArgs a) {
  constexpr int RW = EPI == HS_GEMV_SILU_AND_MUL ? 2 * R : R;  // rows of w per CTA
  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem);  // [kWarps][MT][RW]
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const T* x = static_cast<const T*>(a.x);
  const T* wr[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const int col = colOf<R, EPI>(a, r % R);
    const int row = r < R ? col : a.outCols + col;  // up rows follow the gate rows (SILU)
    wr[r] = static_cast<const T*>(a.w) + static_cast<size_t>(col < a.outCols ? row : 0) * a.k;
  }
  float acc[MT][RW];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < RW; ++r) acc[m][r] = 0.f;
  const int kFirst = warp * kChunk + lane * kVec;
  pdlLaunchDependents();
  uint4 pre[kPrefetch][RW];  // w only: constant, so it may be read before pdlWait
#pragma unroll
  for (int p = 0; p < kPrefetch; ++p)
#pragma unroll
    for (int r = 0; r < RW; ++r)
      pre[p][r] = kFirst + p * kStride < a.k ? loadStreamingOrdered(wr[r] + kFirst + p * kStride) : uint4{};
  pdlWait();
#pragma unroll
  for (int p = 0; p < kPrefetch; ++p)
    if (kFirst + p * kStride < a.k) gemvStep<T, MT, RW>(acc, pre[p], x, a, kFirst + p * kStride);
#pragma unroll 2
  for (int k0 = kFirst + kPrefetch * kStride; k0 < a.k; k0 += kStride) {
    uint4 wv[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) wv[r] = loadStreaming(wr[r] + k0);
    gemvStep<T, MT, RW>(acc, wv, x, a, k0);
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const float v = warpReduceSum(acc[m][r]);
      if (lane == 0) red[(warp * MT + m) * RW + r] = v;
    }
  __syncthreads();
  if (EPI == HS_GEMV_ROPE) {
    ropeEpilogue<T, MT>(a, red);
  } else {
    columnEpilogue<T, O, MT, R, EPI>(a, red);
  }
}

template <typename T, typename O, int MT, int R, int EPI>
cudaError_t launchGemv(const GemvArgs& a, cudaStream_t s) {
  constexpr int RW = EPI == HS_GEMV_SILU_AND_MUL ? 2 * R : R;
  const size_t smemBytes = sizeof(float) * kWarps * MT * RW;
  return launchPdl(gemvKernel<T, O, MT, R, EPI>, dim3(ceilDiv(a.outCols, R)), dim3(kThreads), smemBytes, s, a);
}

/** Output columns per CTA: more for larger M (x's reads per byte of w stay bounded), fewer for SILU (registers). */
template <typename T, int MT>
cudaError_t launchForM(const GemvArgs& a, bool f32Out, int epi, cudaStream_t s) {
  constexpr int R = MT <= 2 ? 2 : 4;
  if (epi == HS_GEMV_SILU_AND_MUL) return launchGemv<T, T, MT, 2, HS_GEMV_SILU_AND_MUL>(a, s);
  if (epi == HS_GEMV_ROPE) return launchGemv<T, T, MT, 2, HS_GEMV_ROPE>(a, s);
  if (f32Out) return launchGemv<T, float, MT, R, HS_GEMV_PLAIN>(a, s);
  return launchGemv<T, T, MT, R, HS_GEMV_PLAIN>(a, s);
}

template <typename T>
cudaError_t launchTyped(const GemvArgs& a, bool f32Out, int epi, cudaStream_t s) {
  if (a.m <= 1) return launchForM<T, 1>(a, f32Out, epi, s);
  if (a.m <= 2) return launchForM<T, 2>(a, f32Out, epi, s);
  if (a.m <= 4) return launchForM<T, 4>(a, f32Out, epi, s);
  if (a.m <= 8) return launchForM<T, 8>(a, f32Out, epi, s);
  return launchForM<T, 16>(a, f32Out, epi, s);
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsDenseGemv(void* y, const void* x, const void* w, const void* bias, int numTokens, int n,
                                   int k, int inDtype, int outDtype, int biasDtype, int epilogue,
                                   cudaStream_t stream) {
  if (numTokens < 0 || numTokens > HS_GEMV_MAX_TOKENS || n <= 0 || k <= 0 || k % hs::kVec != 0)
    return cudaErrorInvalidValue;
  if (!hs::aligned(x, 16) || !hs::aligned(w, 16)) return cudaErrorInvalidValue;
  if (inDtype != HS_DTYPE_BF16 && inDtype != HS_DTYPE_F16) return cudaErrorInvalidValue;
  if (bias != nullptr && biasDtype != HS_DTYPE_F32 && biasDtype != HS_DTYPE_BF16 && biasDtype != HS_DTYPE_F16)
    return cudaErrorInvalidValue;
  const bool silu = epilogue == HS_GEMV_SILU_AND_MUL;
  if (!silu && epilogue != HS_GEMV_PLAIN) return cudaErrorInvalidValue;
  if (silu ? (n % 2 != 0 || outDtype != inDtype) : (outDtype != inDtype && outDtype != HS_DTYPE_F32))
    return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const hs::GemvArgs a{y, x, w, bias, biasDtype, numTokens, n, k, silu ? n / 2 : n, nullptr, nullptr, 0, 0, 0};
  const bool f32Out = outDtype == HS_DTYPE_F32;
  if (inDtype == HS_DTYPE_BF16) return hs::launchTyped<__nv_bfloat16>(a, f32Out, epilogue, stream);
  return hs::launchTyped<__half>(a, f32Out, epilogue, stream);
}

extern "C" cudaError_t hsDenseGemvRope(void* y, const void* x, const void* w, const void* bias,
                                       const int32_t* positions, const float* cosSinCache, int numTokens, int n,
                                       int k, int headDim, int numRotHeads, int maxPositions, int dtype,
                                       int biasDtype, cudaStream_t stream) {
  if (numTokens < 0 || numTokens > HS_GEMV_MAX_TOKENS || n <= 0 || k <= 0 || k % hs::kVec != 0)
    return cudaErrorInvalidValue;
  if (headDim < 2 || headDim % 2 != 0 || n % headDim != 0 || numRotHeads < 0 || numRotHeads * headDim > n)
    return cudaErrorInvalidValue;
  if (!hs::aligned(x, 16) || !hs::aligned(w, 16)) return cudaErrorInvalidValue;
  if (bias != nullptr && biasDtype != HS_DTYPE_F32 && biasDtype != HS_DTYPE_BF16 && biasDtype != HS_DTYPE_F16)
    return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const hs::GemvArgs a{y,         x, w, bias, biasDtype, numTokens, n, k, n, positions, cosSinCache, headDim,
                       numRotHeads * headDim, maxPositions};
  if (dtype == HS_DTYPE_BF16) return hs::launchTyped<__nv_bfloat16>(a, false, hs::HS_GEMV_ROPE, stream);
  if (dtype == HS_DTYPE_F16) return hs::launchTyped<__half>(a, false, hs::HS_GEMV_ROPE, stream);
  return cudaErrorInvalidValue;
}
