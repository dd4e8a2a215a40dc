// The unit of every host-tier <-> hot-block copy of the Quest resolver and the page mirror
// (hisparse_resolve*.cu, hisparse_mirror.cu): one 16-byte vector of the host tier. A bf16 host
// tier holds 8 elements per unit, an fp8 one (HS_HOST_KV_FP8, e4m3 with per-tensor K and V
// scales, vLLM's semantics: stored = e4m3(x / scale), read = bf16(stored * scale)) holds 16, so a
// miss moves half the bytes over the host link and the copy dequantises into the bf16 hot block.
// Quantisation and dequantisation are fp8.cuh's exact conversions (the CPU oracle
// src/worker/hisparse/host_kv_cache.ts repeats them). Internal header.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "fp8.cuh"
#include "hisparse.h"

namespace hs_sparse {

/** Geometry of one (page, kv head) slice: 2 * bs rows (K then V) of D elements. */
struct SliceGeom {
  int headDim;
  int blockSize;
  int numKvHeads;
  /** Elements per 16-byte host unit: 8 (bf16) or 16 (fp8). */
  int unitElems;
  /** Host units per slice: 2 * bs * D / unitElems. */
  int unitsPerSlice;
  bool fp8;
  /** Per-tensor scales (fp8): dequantisation multiplies, quantisation multiplies by the inverse. */
  float kScale;
  float vScale;
};

/** The geometry of a host tier of element type hostKvDtype (HS_HOST_KV_*). */
inline SliceGeom sliceGeom(int headDim, int blockSize, int numKvHeads, int hostKvDtype, float kScale, float vScale) {
  SliceGeom s{};
  s.headDim = headDim;
  s.blockSize = blockSize;
  s.numKvHeads = numKvHeads;
  s.fp8 = hostKvDtype == HS_HOST_KV_FP8;
  s.unitElems = s.fp8 ? 16 : 8;
  s.unitsPerSlice = 2 * blockSize * headDim / s.unitElems;
  s.kScale = kScale;
  s.vScale = vScale;
  return s;
}

/** Whether a head dim suits the host tier's unit (D a multiple of the unit's elements). */
inline bool sliceGeomValid(int headDim, int hostKvDtype) {
  if (hostKvDtype != HS_HOST_KV_BF16 && hostKvDtype != HS_HOST_KV_FP8) return false;
  return headDim > 0 && headDim % (hostKvDtype == HS_HOST_KV_FP8 ? 16 : 8) == 0;
}

/** bf16 bits of x, round to nearest even. */
__device__ __forceinline__ uint32_t bf16BitsOf(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

/**
 * Device element offset of element 0 of unit u of the (hot block `block`, kv head g) slice in a
 * [numBlocks, 2, bs, Hkv, D] cache: the unit's elements are contiguous there (D is a multiple of
 * unitElems).
 */
__device__ __forceinline__ size_t deviceUnitOffset(const SliceGeom& s, int block, int g, int u) {
  const int e = u * s.unitElems;
  const int row = e / s.headDim;  // kv * bs + token
  const int c = e - row * s.headDim;
  return ((static_cast<size_t>(block) * 2 * s.blockSize + row) * s.numKvHeads + g) * s.headDim + c;
}

/** The scale of unit u's row: K rows first, then V rows. */
__device__ __forceinline__ float unitScale(const SliceGeom& s, int u) {
  return u * s.unitElems < s.blockSize * s.headDim ? s.kScale : s.vScale;
}

/** Stores host unit v (unit u of a slice) at the cache's bf16 elements `dst`, dequantising fp8. */
__device__ __forceinline__ void storeUnit(const SliceGeom& s, int u, const uint4& v, uint16_t* dst) {
  if (!s.fp8) {
    *reinterpret_cast<uint4*>(dst) = v;
    return;
  }
  const float scale = unitScale(s, u);
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t b[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t word = w[i >> 1];
    const int sh = (i & 1) * 16;
    const float lo = hs_fp8::e4m3ToFloat(static_cast<uint8_t>(word >> sh)) * scale;
    const float hi = hs_fp8::e4m3ToFloat(static_cast<uint8_t>(word >> (sh + 8))) * scale;
    b[i] = bf16BitsOf(lo) | (bf16BitsOf(hi) << 16);
  }
  uint4* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(b[0], b[1], b[2], b[3]);
  d[1] = make_uint4(b[4], b[5], b[6], b[7]);
}

/**
 * The host unit of the cache's elements `src` (unit u of a slice): the bf16 vector itself, or
 * its 16 elements quantised to e4m3 with the inverse scale (`invKScale`, `invVScale`).
 */
__device__ __forceinline__ uint4 loadUnitFromCache(const SliceGeom& s, int u, const uint16_t* src, float invKScale,
                                                   float invVScale) {
  const uint4* p = reinterpret_cast<const uint4*>(src);
  if (!s.fp8) return p[0];
  const float inv = u * s.unitElems < s.blockSize * s.headDim ? invKScale : invVScale;
  const uint4 a = p[0];
  const uint4 b = p[1];
  const uint32_t in[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  uint32_t out[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t bits = (in[i >> 1] >> ((i & 1) * 16)) & 0xffffu;
    const float x = __uint_as_float(bits << 16) * inv;
    out[i >> 2] |= static_cast<uint32_t>(hs_fp8::floatToE4m3(x)) << ((i & 3) * 8);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace hs_sparse

namespace hs_sparse {

/** Entries per (request, kv head) of the split resolver's miss list: misses <= free slots <= numHot, and <= selected pages. */
__host__ __device__ inline int missStride(const HsResolveParams& p) { return p.numHot < p.selStride ? p.numHot : p.selStride; }

/**
 * The split resolver's copy pass (hisparse_resolve_copy.cu) over the plan that hsResolve's plan
 * kernel wrote in p.missSrc / missDst / missCount; p was validated by hsResolve.
 */
cudaError_t launchResolveCopy(const HsResolveParams& p, cudaStream_t stream);

}  // namespace hs_sparse
