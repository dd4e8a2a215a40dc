// SiLU-and-mul (the gated MLP activation) and the bias add used when cuBLASLt cannot fuse a bias.
#include "common.cuh"

namespace hs {
namespace {

constexpr int kThreads = 256;

/**
 * Grid: numTokens * blocksPerRow blocks of kThreads; thread -> one VEC chunk of one row.
 * out = T(T(silu(g)) * u): silu rounded to T, then the product rounded (vLLM act_and_mul_kernel).
 */
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    siluAndMulKernel(T* __restrict__ out, const T* __restrict__ x, int intermediate, int blocksPerRow) {
  const size_t row = blockIdx.x / blocksPerRow;
  const int chunk = (blockIdx.x % blocksPerRow) * kThreads + threadIdx.x;
  if (chunk * VEC >= intermediate) return;
  const T* g = x + row * 2 * intermediate + chunk * VEC;
  const Vec<T, VEC> gv = loadVec<T, VEC>(g);
  const Vec<T, VEC> uv = loadVec<T, VEC>(g + intermediate);
  Vec<T, VEC> o;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const float gf = toFloat(gv.v[j]);
    const float silu = roundTo<T>(gf / (1.f + expf(-gf)));
    o.v[j] = fromFloat<T>(silu * toFloat(uv.v[j]));
  }
  storeVec<T, VEC>(out + row * intermediate + chunk * VEC, o);
}

/** y[r, c] = T(y[r, c] + b[c]); same grid shape as siluAndMulKernel. */
template <typename T, typename B, int VEC>
__global__ void __launch_bounds__(kThreads)
    biasAddKernel(T* __restrict__ y, const B* __restrict__ bias, int cols, int blocksPerRow) {
  const size_t row = blockIdx.x / blocksPerRow;
  const int chunk = (blockIdx.x % blocksPerRow) * kThreads + threadIdx.x;
  if (chunk * VEC >= cols) return;
  T* p = y + row * cols + chunk * VEC;
  Vec<T, VEC> yv = loadVec<T, VEC>(p);
  const Vec<B, VEC> bv = loadVec<B, VEC>(bias + chunk * VEC);
#pragma unroll
  for (int j = 0; j < VEC; ++j) yv.v[j] = fromFloat<T>(toFloat(yv.v[j]) + toFloat(bv.v[j]));
  storeVec<T, VEC>(p, yv);
}

template <typename T, int VEC>
void launchSilu(T* out, const T* x, int n, int inter, cudaStream_t s) {
  const int blocksPerRow = ceilDiv(inter / VEC, kThreads);
  siluAndMulKernel<T, VEC><<<n * blocksPerRow, kThreads, 0, s>>>(out, x, inter, blocksPerRow);
}

template <typename T, typename B, int VEC>
void launchBias(T* y, const B* b, int rows, int cols, cudaStream_t s) {
  const int blocksPerRow = ceilDiv(cols / VEC, kThreads);
  biasAddKernel<T, B, VEC><<<rows * blocksPerRow, kThreads, 0, s>>>(y, b, cols, blocksPerRow);
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsSiluAndMul(void* out, const void* x, int numTokens, int intermediate, int dtype,
                                    cudaStream_t stream) {
  if (numTokens < 0 || intermediate <= 0) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kVec = 16 / sizeof(T);
    T* o = static_cast<T*>(out);
    const T* xi = static_cast<const T*>(x);
    if (intermediate % kVec == 0 && hs::aligned(out, 16) && hs::aligned(x, 16)) {
      hs::launchSilu<T, kVec>(o, xi, numTokens, intermediate, stream);
    } else {
      hs::launchSilu<T, 1>(o, xi, numTokens, intermediate, stream);
    }
    err = cudaGetLastError();
  });
  return err;
}

extern "C" cudaError_t hsBiasAdd(void* y, const void* bias, int rows, int cols, int yDtype, int biasDtype,
                                 cudaStream_t stream) {
  if (rows < 0 || cols <= 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchFloat(yDtype, [&](auto yt) {
    hs::dispatchFloat(biasDtype, [&](auto bt) {
      using T = decltype(yt);
      using B = decltype(bt);
      constexpr int kVec = 4;  // 8 bytes of bf16 or 16 of f32: aligned for both operand types
      T* yi = static_cast<T*>(y);
      const B* bi = static_cast<const B*>(bias);
      if (cols % kVec == 0 && hs::aligned(y, sizeof(T) * kVec) && hs::aligned(bias, sizeof(B) * kVec)) {
        hs::launchBias<T, B, kVec>(yi, bi, rows, cols, stream);
      } else {
        hs::launchBias<T, B, 1>(yi, bi, rows, cols, stream);
      }
      err = cudaGetLastError();
    });
  });
  return err;
}
