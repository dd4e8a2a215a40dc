// NeoX-style ("rotate_half") rotary position embedding, in place on the q and k heads of a fused
// qkv row. HF transformers (modeling_llama.apply_rotary_pos_emb):
//   q' = q * cos + rotate_half(q) * sin,  rotate_half(x) = cat(-x[D/2:], x[:D/2])
// i.e. for i < D/2: q'_i = q_i cos_i - q_{i+D/2} sin_i and q'_{i+D/2} = q_{i+D/2} cos_i + q_i sin_i.
// Partial rotary (GLM-4.5's partial_rotary_factor): the same over the first R dims of each head
// (R = the cos/sin table's width, D/2 -> R/2 above); dims [R, D) are not touched.
// Computed in fp32 from the f32 cos/sin table built by models/rope.ts and rounded once.
#include "common.cuh"

namespace hs {
namespace {

/** One block per token; each thread rotates VEC consecutive (i, i + R/2) pairs of one head. */
template <typename T, int VEC>
__global__ void __launch_bounds__(256)
    ropeKernel(T* qkv, const int32_t* __restrict__ positions, const float* __restrict__ cosSin, int rowStride,
               int numRotHeads, int headDim, int rotaryDim, int maxPositions) {
  const int t = blockIdx.x;
  const int pos = positions[t];
  if (pos < 0 || pos >= maxPositions) return;  // padded rows stay as they are
  const int half = rotaryDim / 2;
  const int vecsPerHead = half / VEC;
  const float* c = cosSin + static_cast<size_t>(pos) * rotaryDim;
  const float* s = c + half;
  T* row = qkv + static_cast<size_t>(t) * rowStride;
  for (int idx = threadIdx.x; idx < numRotHeads * vecsPerHead; idx += blockDim.x) {
    const int h = idx / vecsPerHead;
    const int i = (idx % vecsPerHead) * VEC;
    T* x = row + static_cast<size_t>(h) * headDim;
    Vec<T, VEC> a = loadVec<T, VEC>(x + i);
    Vec<T, VEC> b = loadVec<T, VEC>(x + half + i);
    const Vec<float, VEC> cv = loadVec<float, VEC>(c + i);
    const Vec<float, VEC> sv = loadVec<float, VEC>(s + i);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float x1 = toFloat(a.v[j]);
      const float x2 = toFloat(b.v[j]);
      a.v[j] = fromFloat<T>(x1 * cv.v[j] - x2 * sv.v[j]);
      b.v[j] = fromFloat<T>(x2 * cv.v[j] + x1 * sv.v[j]);
    }
    storeVec<T, VEC>(x + i, a);
    storeVec<T, VEC>(x + half + i, b);
  }
}

template <typename T>
cudaError_t launchRope(T* qkv, const int32_t* pos, const float* cs, int n, int rowStride, int heads, int headDim,
                       int rotaryDim, int maxPos, cudaStream_t s) {
  const int half = rotaryDim / 2;
  int vec = 1;
  for (int v = static_cast<int>(16 / sizeof(T)); v > 1; v /= 2) {
    // Every vector access must stay aligned: the qkv row start, the head start, the second half,
    // and the cos/sin rows (float vectors of the same width).
    if (half % v == 0 && headDim % v == 0 && rowStride % v == 0 && aligned(qkv, sizeof(T) * v) &&
        aligned(cs, sizeof(float) * v)) {
      vec = v;
      break;
    }
  }
  const int threads = threadsFor(static_cast<long long>(heads) * (half / vec), 256);
  switch (vec) {
    case 8:
      ropeKernel<T, 8><<<n, threads, 0, s>>>(qkv, pos, cs, rowStride, heads, headDim, rotaryDim, maxPos);
      break;
    case 4:
      ropeKernel<T, 4><<<n, threads, 0, s>>>(qkv, pos, cs, rowStride, heads, headDim, rotaryDim, maxPos);
      break;
    case 2:
      ropeKernel<T, 2><<<n, threads, 0, s>>>(qkv, pos, cs, rowStride, heads, headDim, rotaryDim, maxPos);
      break;
    default:
      ropeKernel<T, 1><<<n, threads, 0, s>>>(qkv, pos, cs, rowStride, heads, headDim, rotaryDim, maxPos);
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsRotaryEmbedding(void* qkv, const int32_t* positions, const float* cosSinCache,
                                         int numTokens, int rowStride, int numRotHeads, int headDim,
                                         int rotaryDim, int maxPositions, int dtype, cudaStream_t stream) {
  if (numTokens < 0 || headDim <= 0 || numRotHeads <= 0) return cudaErrorInvalidValue;
  if (rotaryDim < 2 || rotaryDim % 2 != 0 || rotaryDim > headDim) return cudaErrorInvalidValue;
  if (rowStride < numRotHeads * headDim) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchFloat(dtype, [&](auto tag) {
    using T = decltype(tag);
    err = hs::launchRope<T>(static_cast<T*>(qkv), positions, cosSinCache, numTokens, rowStride, numRotHeads,
                            headDim, rotaryDim, maxPositions, stream);
  });
  return err;
}
