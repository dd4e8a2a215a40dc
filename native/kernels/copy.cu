// Data movement kernels: row gather (embedding lookup, gatherRows), vLLM reshape_and_cache into
// the paged KV layout, and dtype casts for uploads. All copies use the widest access (16, 4 or 1
// bytes) that the sizes and pointer alignments allow.
#include <initializer_list>

#include "common.cuh"
#include "fp8.cuh"
#include "pdl.cuh"

namespace hs {
namespace {

/**
 * One block per output row; index i reads source row i - firstIndex; rows whose source row is out
 * of range are zero-filled.
 */
template <typename V>
__global__ void __launch_bounds__(256) gatherRowsKernel(V* __restrict__ out, const V* __restrict__ src,
                                                        const int32_t* __restrict__ indices, int numSrcRows,
                                                        size_t rowElems, int firstIndex) {
  const size_t r = blockIdx.x;
  const int s = indices[r] - firstIndex;
  V* o = out + r * rowElems;
  if (s < 0 || s >= numSrcRows) {
    for (size_t i = threadIdx.x; i < rowElems; i += blockDim.x) o[i] = V{};
    return;
  }
  const V* in = src + static_cast<size_t>(s) * rowElems;
  for (size_t i = threadIdx.x; i < rowElems; i += blockDim.x) o[i] = in[i];
}

/**
 * One block per token: copies the k and v heads (kvBytes each) of row t to the slot's K and V rows
 * of the paged cache [numBlocks, 2, blockSize, Hkv, D].
 */
template <typename V>
__global__ void __launch_bounds__(256)
    reshapeAndCacheKernel(const char* qkv, char* __restrict__ cache, const int32_t* __restrict__ slots,
                          size_t rowStrideBytes, size_t kOffsetBytes, size_t kvBytes, int blockSize,
                          long long numSlots) {
  pdlLaunchDependents();
  pdlWait();  // qkv is the previous kernel's output (pdl.cuh)
  const int t = blockIdx.x;
  const long long slot = slots[t];
  if (slot < 0 || slot >= numSlots) return;  // PAD_SLOT_ID or out of range: skip
  const long long block = slot / blockSize;
  const long long offset = slot % blockSize;
  const V* k = reinterpret_cast<const V*>(qkv + t * rowStrideBytes + kOffsetBytes);
  const V* v = reinterpret_cast<const V*>(qkv + t * rowStrideBytes + kOffsetBytes + kvBytes);
  V* kd = reinterpret_cast<V*>(cache + static_cast<size_t>((block * 2) * blockSize + offset) * kvBytes);
  V* vd = reinterpret_cast<V*>(cache + static_cast<size_t>((block * 2 + 1) * blockSize + offset) * kvBytes);
  const size_t n = kvBytes / sizeof(V);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    kd[i] = k[i];
    vd[i] = v[i];
  }
}

/**
 * One block per token: quantises the k and v heads (kvElems bf16 each) of row t to e4m3 into the
 * slot's K and V rows of the fp8 paged cache; one element per thread and pass (coalesced).
 */
__global__ void __launch_bounds__(256)
    reshapeAndCacheFp8Kernel(const __nv_bfloat16* qkv, uint8_t* __restrict__ cache,
                             const int32_t* __restrict__ slots, int rowStride, int kOffset, int kvElems,
                             int blockSize, long long numSlots, float kInv, float vInv) {
  pdlLaunchDependents();
  pdlWait();  // qkv is the previous kernel's output (pdl.cuh)
  const int t = blockIdx.x;
  const long long slot = slots[t];
  if (slot < 0 || slot >= numSlots) return;  // PAD_SLOT_ID or out of range: skip
  const long long block = slot / blockSize;
  const long long offset = slot % blockSize;
  const __nv_bfloat16* k = qkv + static_cast<size_t>(t) * rowStride + kOffset;
  const __nv_bfloat16* v = k + kvElems;
  uint8_t* kd = cache + static_cast<size_t>((block * 2) * blockSize + offset) * kvElems;
  uint8_t* vd = cache + static_cast<size_t>((block * 2 + 1) * blockSize + offset) * kvElems;
  for (int i = threadIdx.x; i < kvElems; i += blockDim.x) {
    // x * (1 / scale): exact for the default scale 1 (and any power of two).
    kd[i] = hs_fp8::floatToE4m3(__bfloat162float(k[i]) * kInv);
    vd[i] = hs_fp8::floatToE4m3(__bfloat162float(v[i]) * vInv);
  }
}

/**
 * One block per token: the largest |k| and |v| of row t's KV heads (kvElems bf16 each) folded into
 * out[0] / out[1] as f32 bits (non-negative floats order as their unsigned bits, and a NaN's bits
 * exceed infinity's, so NaN propagates); out[2] |= 1 when the token has a slot. PAD tokens skip.
 */
__global__ void __launch_bounds__(256)
    kvAmaxKernel(const __nv_bfloat16* qkv, const int32_t* __restrict__ slots, int rowStride, int kOffset,
                 int kvElems, unsigned* __restrict__ out) {
  const int t = blockIdx.x;
  if (slots[t] < 0) return;  // PAD_SLOT_ID: not cached, not measured
  const __nv_bfloat16* k = qkv + static_cast<size_t>(t) * rowStride + kOffset;
  unsigned km = 0, vm = 0;
  for (int i = threadIdx.x; i < kvElems; i += blockDim.x) {
    const unsigned a = __float_as_uint(fabsf(__bfloat162float(k[i])));
    const unsigned b = __float_as_uint(fabsf(__bfloat162float(k[kvElems + i])));
    km = a > km ? a : km;
    vm = b > vm ? b : vm;
  }
  atomicMax(&out[0], km);
  atomicMax(&out[1], vm);
  if (threadIdx.x == 0) atomicOr(&out[2], 1u);
}

template <typename D, typename S>
__global__ void __launch_bounds__(256) castKernel(D* __restrict__ dst, const S* __restrict__ src, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = fromFloat<D>(toFloat(src[i]));
  }
}

/** Widest access (16, 4 or 1 bytes) dividing every size and aligning every pointer given. */
inline int widestAccess(std::initializer_list<size_t> sizes, std::initializer_list<const void*> ptrs) {
  for (int w : {16, 4}) {
    bool ok = true;
    for (size_t s : sizes) ok = ok && s % w == 0;
    for (const void* p : ptrs) ok = ok && aligned(p, w);
    if (ok) return w;
  }
  return 1;
}

}  // namespace
}  // namespace hs

extern "C" size_t hsDtypeBytes(int dtype) {
  switch (dtype) {
    case HS_DTYPE_F32:
    case HS_DTYPE_I32:
      return 4;
    case HS_DTYPE_BF16:
    case HS_DTYPE_F16:
      return 2;
    case HS_DTYPE_FP8:
      return 1;
    default:
      return 0;
  }
}

extern "C" cudaError_t hsGatherRows(void* out, const void* src, const int32_t* indices, int numRows, int numSrcRows,
                                    size_t rowBytes, int firstIndex, cudaStream_t stream) {
  if (numRows < 0 || numSrcRows < 0 || rowBytes == 0) return cudaErrorInvalidValue;
  if (numRows == 0) return cudaSuccess;
  const int w = hs::widestAccess({rowBytes}, {out, src});
  const size_t elems = rowBytes / w;
  const int threads = hs::threadsFor(static_cast<long long>(elems), 256);
  if (w == 16) {
    hs::gatherRowsKernel<uint4><<<numRows, threads, 0, stream>>>(static_cast<uint4*>(out),
                                                                  static_cast<const uint4*>(src), indices,
                                                                  numSrcRows, elems, firstIndex);
  } else if (w == 4) {
    hs::gatherRowsKernel<uint32_t><<<numRows, threads, 0, stream>>>(static_cast<uint32_t*>(out),
                                                                     static_cast<const uint32_t*>(src), indices,
                                                                     numSrcRows, elems, firstIndex);
  } else {
    hs::gatherRowsKernel<uint8_t><<<numRows, threads, 0, stream>>>(static_cast<uint8_t*>(out),
                                                                    static_cast<const uint8_t*>(src), indices,
                                                                    numSrcRows, elems, firstIndex);
  }
  return cudaGetLastError();
}

extern "C" cudaError_t hsReshapeAndCache(const void* qkv, void* kvCache, const int32_t* slotMapping, int numTokens,
                                         int rowStride, int numHeads, int numKvHeads, int headDim, int blockSize,
                                         int numBlocks, int dtype, cudaStream_t stream) {
  const size_t eb = hsDtypeBytes(dtype);
  if (eb == 0 || dtype == HS_DTYPE_I32 || dtype == HS_DTYPE_FP8) return cudaErrorInvalidValue;  // fp8: hsReshapeAndCacheFp8
  if (numTokens < 0 || numHeads <= 0 || numKvHeads <= 0 || headDim <= 0 || blockSize <= 0 || numBlocks < 0)
    return cudaErrorInvalidValue;
  if (rowStride < (numHeads + 2 * numKvHeads) * headDim) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const size_t rowStrideBytes = static_cast<size_t>(rowStride) * eb;
  const size_t kOffsetBytes = static_cast<size_t>(numHeads) * headDim * eb;
  const size_t kvBytes = static_cast<size_t>(numKvHeads) * headDim * eb;
  const long long numSlots = static_cast<long long>(numBlocks) * blockSize;
  // The access width must divide the qkv row stride, the k offset and the cache row (kvBytes).
  const int w = hs::widestAccess({rowStrideBytes, kOffsetBytes, kvBytes}, {qkv, kvCache});
  const int threads = hs::threadsFor(static_cast<long long>(kvBytes / w), 256);
  const char* q = static_cast<const char*>(qkv);
  char* c = static_cast<char*>(kvCache);
  const auto kernel = w == 16 ? hs::reshapeAndCacheKernel<uint4>
                     : w == 4 ? hs::reshapeAndCacheKernel<uint32_t>
                              : hs::reshapeAndCacheKernel<uint8_t>;
  return hs::launchPdl(kernel, dim3(numTokens), dim3(threads), 0, stream, q, c, slotMapping, rowStrideBytes,
                       kOffsetBytes, kvBytes, blockSize, numSlots);
}

extern "C" cudaError_t hsReshapeAndCacheFp8(const void* qkv, void* kvCache, const int32_t* slotMapping,
                                            int numTokens, int rowStride, int numHeads, int numKvHeads, int headDim,
                                            int blockSize, int numBlocks, float kScale, float vScale,
                                            cudaStream_t stream) {
  if (numTokens < 0 || numHeads <= 0 || numKvHeads <= 0 || headDim <= 0 || blockSize <= 0 || numBlocks < 0 ||
      !(kScale > 0.f) || !(vScale > 0.f))
    return cudaErrorInvalidValue;
  if (rowStride < (numHeads + 2 * numKvHeads) * headDim) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  const int kvElems = numKvHeads * headDim;
  const int threads = hs::threadsFor(static_cast<long long>(kvElems), 256);
  return hs::launchPdl(hs::reshapeAndCacheFp8Kernel, dim3(numTokens), dim3(threads), 0, stream,
                       static_cast<const __nv_bfloat16*>(qkv), static_cast<uint8_t*>(kvCache), slotMapping,
                       rowStride, numHeads * headDim, kvElems, blockSize,
                       static_cast<long long>(numBlocks) * blockSize, 1.f / kScale, 1.f / vScale);
}

extern "C" cudaError_t hsKvAmax(const void* qkv, const int32_t* slotMapping, int numTokens, int rowStride,
                                int numHeads, int numKvHeads, int headDim, void* out, cudaStream_t stream) {
  if (numTokens < 0 || numHeads <= 0 || numKvHeads <= 0 || headDim <= 0) return cudaErrorInvalidValue;
  if (rowStride < (numHeads + 2 * numKvHeads) * headDim) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(out, 0, 3 * sizeof(unsigned), stream);
  if (e != cudaSuccess || numTokens == 0) return e;
  const int kvElems = numKvHeads * headDim;
  const int threads = hs::threadsFor(static_cast<long long>(kvElems), 256);
  hs::kvAmaxKernel<<<numTokens, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(qkv), slotMapping,
                                                      rowStride, numHeads * headDim, kvElems,
                                                      static_cast<unsigned*>(out));
  return cudaGetLastError();
}

extern "C" cudaError_t hsCast(void* dst, int dstDtype, const void* src, int srcDtype, size_t count,
                              cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dstDtype == srcDtype) {
    const size_t eb = hsDtypeBytes(dstDtype);
    if (eb == 0) return cudaErrorInvalidValue;
    return cudaMemcpyAsync(dst, src, count * eb, cudaMemcpyDeviceToDevice, stream);
  }
  constexpr int kThreads = 256;
  const long long wanted = static_cast<long long>((count + kThreads - 1) / kThreads);
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);  // grid-stride beyond 16M elements
  cudaError_t err = cudaErrorInvalidValue;
  hs::dispatchFloat(dstDtype, [&](auto dt) {
    hs::dispatchFloat(srcDtype, [&](auto st) {
      using D = decltype(dt);
      using S = decltype(st);
      hs::castKernel<D, S><<<blocks, kThreads, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), count);
      err = cudaGetLastError();
    });
  });
  return err;
}
