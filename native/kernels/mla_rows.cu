// Row kernels of the MLA path (mla.h): column slices, the paged latent / index-key row write
// (vLLM concat_and_cache_mla as two calls), strided RoPE of the rope parts, LayerNorm (the
// indexer's k_norm). One CTA per token row; grids depend on the token count only.
#include <cmath>

#include "mla.h"
#include "mla_common.cuh"

namespace hs_mla {
namespace {

constexpr int kRowThreads = 128;

__global__ void __launch_bounds__(kRowThreads)
    sliceKernel(const unsigned char* x, unsigned char* out, int rowBytes, int startBytes, int widthBytes) {
  const int t = blockIdx.x;
  const unsigned char* src = x + static_cast<size_t>(t) * rowBytes + startBytes;
  unsigned char* dst = out + static_cast<size_t>(t) * widthBytes;
  for (int i = threadIdx.x; i < widthBytes; i += blockDim.x) dst[i] = src[i];
}

template <typename S, typename C>
__global__ void __launch_bounds__(kRowThreads)
    writeRowsKernel(const S* src, C* cache, const int32_t* slots, int width, int rowWidth, int col, int numSlots) {
  const int t = blockIdx.x;
  const int s = slots[t];
  if (s < 0 || s >= numSlots) return;  // PAD_SLOT_ID (padded rows) or a slot outside the cache
  C* dst = cache + static_cast<size_t>(s) * rowWidth + col;
  const S* row = src + static_cast<size_t>(t) * width;
  for (int e = threadIdx.x; e < width; e += blockDim.x) dst[e] = fromFloat<C>(toFloat(row[e]));
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    rotaryKernel(T* x, const int32_t* positions, const float* cosSin, int rowWidth, int offset, int stride, int count,
                 int rotDim, int maxPositions, int interleaved) {
  const int t = blockIdx.x;
  const int pos = positions[t];
  if (pos < 0 || pos >= maxPositions) return;
  const int half = rotDim >> 1;
  const float* cs = cosSin + static_cast<size_t>(pos) * rotDim;
  T* row = x + static_cast<size_t>(t) * rowWidth + offset;
  for (int j = threadIdx.x; j < count * half; j += blockDim.x) {
    const int h = j / half;
    const int i = j - h * half;
    T* o = row + static_cast<size_t>(h) * stride;
    const int ia = interleaved ? 2 * i : i;
    const int ib = interleaved ? ia + 1 : ia + half;
    const float c = cs[i];
    const float s = cs[half + i];
    const float a = toFloat(o[ia]);
    const float b = toFloat(o[ib]);
    // The oracle's roundings: each product to f32, then the sum (no FMA contraction).
    o[ia] = fromFloat<T>(__fadd_rn(__fmul_rn(a, c), -__fmul_rn(b, s)));
    o[ib] = fromFloat<T>(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)));
  }
}

/** Sum over the CTA (kRowThreads threads); red: shared float[32]. */
__device__ float blockSumF(float v, float* red) {
  v = warpSum(v);
  const int w = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) red[w] = v;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < (kRowThreads >> 5); ++i) total += red[i];
  __syncthreads();
  return total;
}

template <typename T, typename W>
__global__ void __launch_bounds__(kRowThreads)
    layerNormKernel(const T* x, const W* weight, const W* bias, T* out, int n, float eps) {
  extern __shared__ __align__(16) unsigned char smem[];
  float* red = reinterpret_cast<float*>(smem);
  const int t = blockIdx.x;
  const T* row = x + static_cast<size_t>(t) * n;
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += toFloat(row[i]);
  const float mean = blockSumF(s, red) / n;
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = toFloat(row[i]) - mean;
    v += d * d;
  }
  const float rstd = 1.f / sqrtf(blockSumF(v, red) / n + eps);
  T* o = out + static_cast<size_t>(t) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    o[i] = fromFloat<T>((toFloat(row[i]) - mean) * rstd * toFloat(weight[i]) + toFloat(bias[i]));
}

}  // namespace
}  // namespace hs_mla

using namespace hs_mla;

extern "C" cudaError_t hsMlaSliceColumns(const void* x, void* out, int numTokens, int rowWidth, int start, int width,
                                         int elemBytes, cudaStream_t stream) {
  if (numTokens < 0 || start < 0 || width < 0 || start + width > rowWidth || elemBytes <= 0)
    return cudaErrorInvalidValue;
  if (numTokens == 0 || width == 0) return cudaSuccess;
  sliceKernel<<<numTokens, kRowThreads, 0, stream>>>(static_cast<const unsigned char*>(x),
                                                     static_cast<unsigned char*>(out), rowWidth * elemBytes,
                                                     start * elemBytes, width * elemBytes);
  return cudaGetLastError();
}

extern "C" cudaError_t hsMlaWriteRows(const void* src, int srcDtype, void* cache, int cacheDtype,
                                      const int32_t* slotMapping, int numTokens, int width, int rowWidth,
                                      int dstColumn, int numSlots, cudaStream_t stream) {
  if (numTokens < 0 || width < 0 || dstColumn < 0 || dstColumn + width > rowWidth || !storageDtype(srcDtype) ||
      !storageDtype(cacheDtype))
    return cudaErrorInvalidValue;
  if (numTokens == 0 || width == 0) return cudaSuccess;
  return withDtype(srcDtype, [&](auto s) {
    using S = decltype(s);
    return withDtype(cacheDtype, [&](auto c) {
      using C = decltype(c);
      writeRowsKernel<S, C><<<numTokens, kRowThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<C*>(cache),
                                                                  slotMapping, width, rowWidth, dstColumn, numSlots);
      return cudaGetLastError();
    });
  });
}

extern "C" cudaError_t hsMlaRotaryStrided(void* x, int dtype, const int32_t* positions, const float* cosSin,
                                          int numTokens, int rowWidth, int offset, int stride, int count, int rotDim,
                                          int maxPositions, int interleaved, cudaStream_t stream) {
  if (numTokens < 0 || rotDim <= 0 || rotDim % 2 != 0 || offset < 0 || count < 1 ||
      offset + (count - 1) * stride + rotDim > rowWidth || !storageDtype(dtype))
    return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  return withDtype(dtype, [&](auto v) {
    using T = decltype(v);
    rotaryKernel<T><<<numTokens, kRowThreads, 0, stream>>>(static_cast<T*>(x), positions, cosSin, rowWidth, offset,
                                                          stride, count, rotDim, maxPositions, interleaved);
    return cudaGetLastError();
  });
}

extern "C" cudaError_t hsMlaLayerNorm(const void* x, const void* weight, const void* bias, void* out, int numTokens,
                                      int n, float eps, int xDtype, int wDtype, cudaStream_t stream) {
  if (numTokens < 0 || n <= 0 || !storageDtype(xDtype) || !storageDtype(wDtype)) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  return withDtype(xDtype, [&](auto xv) {
    using T = decltype(xv);
    return withDtype(wDtype, [&](auto wv) {
      using W = decltype(wv);
      layerNormKernel<T, W><<<numTokens, kRowThreads, 32 * sizeof(float), stream>>>(
          static_cast<const T*>(x), static_cast<const W*>(weight), static_cast<const W*>(bias), static_cast<T*>(out),
          n, eps);
      return cudaGetLastError();
    });
  });
}
