// RMSNorm, fused residual-add + RMSNorm (vLLM fused_add_rms_norm) and the Qwen3 per-head q/k
// RMSNorm. Rounding points follow HF transformers' LlamaRMSNorm:
//   hidden = x.float(); hidden *= rsqrt(mean(hidden^2) + eps); return weight * hidden.to(T)
// so out = T(w * T(x * inv)); the residual sum is rounded to T before it is squared (vLLM).
// rmsNorm and fusedAddRmsNorm are launched with programmatic dependent launch (pdl.cuh): they
// wait for the previous kernel before their first access.
#include "common.cuh"
#include "pdl.cuh"

namespace hs {
namespace {

/** One block per row; each thread handles VEC-wide chunks; two passes over the row. */
template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(1024)
    rmsNormKernel(T* __restrict__ out, const T* x, const W* __restrict__ w, int hidden, float eps) {
  pdlLaunchDependents();
  pdlWait();  // x is the previous kernel's output
  const size_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  T* outr = out + row * hidden;
  const int nvec = hidden / VEC;
  float ss = 0.f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const Vec<T, VEC> v = loadVec<T, VEC>(xr + i * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float f = toFloat(v.v[j]);
      ss += f * f;
    }
  }
  const float inv = rsqrtf(blockReduceSum(ss) / hidden + eps);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const Vec<T, VEC> v = loadVec<T, VEC>(xr + i * VEC);
    const Vec<W, VEC> wv = loadVec<W, VEC>(w + i * VEC);
    Vec<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = fromFloat<T>(roundTo<T>(toFloat(v.v[j]) * inv) * toFloat(wv.v[j]));
    storeVec<T, VEC>(outr + i * VEC, o);
  }
}

/**
 * In place: residual = T(x + residual); x = T(w * T(residual * inv)). Each thread re-reads in
 * pass 2 exactly the residual elements it wrote in pass 1, so no barrier is needed between them.
 */
template <typename T, typename W, int VEC>
__global__ void __launch_bounds__(1024)
    fusedAddRmsNormKernel(T* x, T* residual, const W* __restrict__ w, int hidden, float eps) {
  pdlLaunchDependents();
  pdlWait();  // x is the previous kernel's output
  const size_t row = blockIdx.x;
  T* xr = x + row * hidden;
  T* rr = residual + row * hidden;
  const int nvec = hidden / VEC;
  float ss = 0.f;
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const Vec<T, VEC> xv = loadVec<T, VEC>(xr + i * VEC);
    Vec<T, VEC> rv = loadVec<T, VEC>(rr + i * VEC);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      rv.v[j] = fromFloat<T>(toFloat(xv.v[j]) + toFloat(rv.v[j]));
      const float f = toFloat(rv.v[j]);
      ss += f * f;
    }
    storeVec<T, VEC>(rr + i * VEC, rv);
  }
  const float inv = rsqrtf(blockReduceSum(ss) / hidden + eps);
  for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
    const Vec<T, VEC> rv = loadVec<T, VEC>(rr + i * VEC);
    const Vec<W, VEC> wv = loadVec<W, VEC>(w + i * VEC);
    Vec<T, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = fromFloat<T>(roundTo<T>(toFloat(rv.v[j]) * inv) * toFloat(wv.v[j]));
    storeVec<T, VEC>(xr + i * VEC, o);
  }
}

/** One warp per (token, head) of the q and k heads; headDim elements strided over the lanes. */
template <typename T, typename W>
__global__ void __launch_bounds__(256) qkNormKernel(T* qkv, const W* __restrict__ qw, const W* __restrict__ kw,
                                                    int numTokens, int rowStride, int numHeads, int numKvHeads,
                                                    int headDim, float eps) {
  const int headsPerToken = numHeads + numKvHeads;
  const long long item = static_cast<long long>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= static_cast<long long>(numTokens) * headsPerToken) return;  // whole warps exit together
  const int lane = threadIdx.x & 31;
  const int t = static_cast<int>(item / headsPerToken);
  const int h = static_cast<int>(item % headsPerToken);
  T* p = qkv + static_cast<size_t>(t) * rowStride + static_cast<size_t>(h) * headDim;
  const W* w = h < numHeads ? qw : kw;
  float ss = 0.f;
  for (int i = lane; i < headDim; i += 32) {
    const float f = toFloat(p[i]);
    ss += f * f;
  }
  const float inv = rsqrtf(warpReduceSum(ss) / headDim + eps);
  for (int i = lane; i < headDim; i += 32) p[i] = fromFloat<T>(roundTo<T>(toFloat(p[i]) * inv) * toFloat(w[i]));
}

/** Widest VEC (elements of 16 bytes of T, down to 1) that divides hidden and keeps all pointers aligned. */
template <typename T, typename W>
int pickVec(int hidden, const void* a, const void* b, const void* w) {
  for (int vec = static_cast<int>(16 / sizeof(T)); vec > 1; vec /= 2) {
    const size_t tb = sizeof(T) * vec, wb = sizeof(W) * vec;
    if (hidden % vec == 0 && aligned(a, tb) && aligned(b, tb) && aligned(w, wb)) return vec;
  }
  return 1;
}

template <typename T, typename W>
cudaError_t launchRmsNorm(void* out, const void* x, const void* w, int n, int hidden, float eps, cudaStream_t s) {
  const int vec = pickVec<T, W>(hidden, out, x, w);
  const int threads = threadsFor(hidden / vec, 1024);
  auto* o = static_cast<T*>(out);
  auto* xi = static_cast<const T*>(x);
  auto* wi = static_cast<const W*>(w);
  switch (vec) {
    case 8:
      return launchPdl(rmsNormKernel<T, W, 8>, dim3(n), dim3(threads), 0, s, o, xi, wi, hidden, eps);
    case 4:
      return launchPdl(rmsNormKernel<T, W, 4>, dim3(n), dim3(threads), 0, s, o, xi, wi, hidden, eps);
    case 2:
      return launchPdl(rmsNormKernel<T, W, 2>, dim3(n), dim3(threads), 0, s, o, xi, wi, hidden, eps);
    default:
      return launchPdl(rmsNormKernel<T, W, 1>, dim3(n), dim3(threads), 0, s, o, xi, wi, hidden, eps);
  }
}

template <typename T, typename W>
cudaError_t launchFusedAdd(void* x, void* r, const void* w, int n, int hidden, float eps, cudaStream_t s) {
  const int vec = pickVec<T, W>(hidden, x, r, w);
  const int threads = threadsFor(hidden / vec, 1024);
  auto* xi = static_cast<T*>(x);
  auto* ri = static_cast<T*>(r);
  auto* wi = static_cast<const W*>(w);
  switch (vec) {
    case 8:
      return launchPdl(fusedAddRmsNormKernel<T, W, 8>, dim3(n), dim3(threads), 0, s, xi, ri, wi, hidden, eps);
    case 4:
      return launchPdl(fusedAddRmsNormKernel<T, W, 4>, dim3(n), dim3(threads), 0, s, xi, ri, wi, hidden, eps);
    case 2:
      return launchPdl(fusedAddRmsNormKernel<T, W, 2>, dim3(n), dim3(threads), 0, s, xi, ri, wi, hidden, eps);
    default:
      return launchPdl(fusedAddRmsNormKernel<T, W, 1>, dim3(n), dim3(threads), 0, s, xi, ri, wi, hidden, eps);
  }
}

/** Calls f(T{}, W{}) for the (activation, weight) dtype pair; false when either is unsupported. */
template <typename F>
bool dispatchPair(int xDtype, int wDtype, F&& f) {
  bool ok = false;
  dispatchFloat(xDtype, [&](auto xt) { ok = dispatchFloat(wDtype, [&](auto wt) { f(xt, wt); }); });
  return ok;
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsRmsNorm(void* out, const void* x, const void* weight, int numTokens, int hidden, float eps,
                                 int xDtype, int wDtype, cudaStream_t stream) {
  if (numTokens < 0 || hidden <= 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchPair(xDtype, wDtype, [&](auto xt, auto wt) {
    err = hs::launchRmsNorm<decltype(xt), decltype(wt)>(out, x, weight, numTokens, hidden, eps, stream);
  });
  return err;
}

extern "C" cudaError_t hsFusedAddRmsNorm(void* x, void* residual, const void* weight, int numTokens, int hidden,
                                         float eps, int xDtype, int wDtype, cudaStream_t stream) {
  if (numTokens < 0 || hidden <= 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchPair(xDtype, wDtype, [&](auto xt, auto wt) {
    err = hs::launchFusedAdd<decltype(xt), decltype(wt)>(x, residual, weight, numTokens, hidden, eps, stream);
  });
  return err;
}

extern "C" cudaError_t hsQkNorm(void* qkv, const void* qWeight, const void* kWeight, int numTokens, int rowStride,
                                int numHeads, int numKvHeads, int headDim, float eps, int dtype, int wDtype,
                                cudaStream_t stream) {
  if (numTokens < 0 || headDim <= 0 || numHeads <= 0 || numKvHeads <= 0) return cudaErrorInvalidValue;
  if (rowStride < (numHeads + 2 * numKvHeads) * headDim) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  constexpr int kThreads = 256;  // 8 warps, one (token, head) each
  const long long items = static_cast<long long>(numTokens) * (numHeads + numKvHeads);
  const int blocks = hs::ceilDiv(items, kThreads / 32);
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchPair(dtype, wDtype, [&](auto xt, auto wt) {
    using T = decltype(xt);
    using W = decltype(wt);
    hs::qkNormKernel<T, W><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(qkv), static_cast<const W*>(qWeight),
                                                             static_cast<const W*>(kWeight), numTokens, rowStride,
                                                             numHeads, numKvHeads, headDim, eps);
    err = cudaGetLastError();
  });
  return err;
}
