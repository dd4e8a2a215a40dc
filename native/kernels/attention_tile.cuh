// Device building blocks shared by the paged decode and prefill attention kernels
// (attention_decode.cu, attention_prefill.cu). Internal header: not part of the C ABI.
//
// Tensor-core path: mma.sync.m16n8k16 bf16 x bf16 -> fp32 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"). Fragment layouts used throughout, with
// g = lane / 4 and t = lane % 4:
//   A (16x16, row major): a0 = (row g,   k 2t..2t+1)   a1 = (row g+8, k 2t..2t+1)
//                         a2 = (row g,   k 2t+8..+9)   a3 = (row g+8, k 2t+8..+9)
//   B (16x8, "col"):      b0 = (k 2t..2t+1, col g)     b1 = (k 2t+8..+9, col g)
//   C (16x8 fp32):        c0,c1 = (row g, cols 2t, 2t+1)   c2,c3 = (row g+8, cols 2t, 2t+1)
// ldmatrix.x4 (PTX "Warp-level matrix load instruction: ldmatrix"): lanes 8i..8i+7 give the row
// addresses of 8x8 matrix i, which lands in register i; without .trans lane l receives
// (row l/4, cols 2(l%4), 2(l%4)+1) of each matrix, with .trans the transpose of that.
// Shared-memory tiles hold rows of D bf16 (D/8 chunks of 16 bytes); chunk c of row r sits at
// chunk position c ^ (r % 8), so the 8 rows read by one ldmatrix phase hit 8 distinct 16-byte
// bank groups (HOPPER.md "Banks"; the XOR swizzle of CUTLASS's Swizzle<3,4,3>). D = 32 rows have
// 4 chunks: c ^ (r % 4) (2-way conflicts; that head size only appears in tiny test models).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// Benchmark variants: compiling a kernel file with -DHS_ATTN_SUFFIX=_x renames its C entry points
// (hsPagedDecodeAttention_x ...), so attention_bench can link several tile configurations at once.
#ifdef HS_ATTN_SUFFIX
#define HS_ATTN_CAT2(a, b) a##b
#define HS_ATTN_CAT(a, b) HS_ATTN_CAT2(a, b)
#define hsPagedDecodeAttention HS_ATTN_CAT(hsPagedDecodeAttention, HS_ATTN_SUFFIX)
#define hsPagedDecodeNumSplits HS_ATTN_CAT(hsPagedDecodeNumSplits, HS_ATTN_SUFFIX)
#define hsPagedAttentionWorkspaceBytes HS_ATTN_CAT(hsPagedAttentionWorkspaceBytes, HS_ATTN_SUFFIX)
#define hsPagedPrefillAttention HS_ATTN_CAT(hsPagedPrefillAttention, HS_ATTN_SUFFIX)
#define hsPagedPrefillWorkspaceBytes HS_ATTN_CAT(hsPagedPrefillWorkspaceBytes, HS_ATTN_SUFFIX)
#define hsSparseDecodeAttention HS_ATTN_CAT(hsSparseDecodeAttention, HS_ATTN_SUFFIX)
#endif

#include "attention.h"
#include "fp8.cuh"

namespace hs_attn {

/** Keys per shared-memory K/V tile (both kernels). A multiple of 16. */
constexpr int kTileKeys = 64;
/** -inf as a float constant (masked scores, empty softmax state). */
constexpr float kNegInf = -__builtin_huge_valf();
/** log2(e): scores are exponentiated with ex2, so the scale is folded as scale * log2(e). */
constexpr float kLog2e = 1.4426950408889634f;

// ---- PTX wrappers --------------------------------------------------------------------------
// (native/tests/emu/cuda_emu.h provides CPU versions of these when HS_ATTN_HOST_EMU is defined.)
#ifndef HS_ATTN_HOST_EMU

/** 32-bit shared-memory address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/** cp.async of 16 bytes global -> shared, L1 bypass; srcBytes 0 writes 16 zero bytes (zfill). */
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, int srcBytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(srcBytes)
               : "memory");
}

/** 16-byte store to shared memory (the fp8 loader's dequantised chunks). */
__device__ __forceinline__ void stShared16(uint32_t dst, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/** Closes the current cp.async group. */
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/** Waits until at most N of this thread's cp.async groups are pending. */
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/** ldmatrix.x4 (non-transposed) into r[0..3]. */
__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/** ldmatrix.x4.trans into r[0..3]. */
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/** c += A(16x16 bf16) * B(16x8 bf16), fp32 accumulate. */
__device__ __forceinline__ void mmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/** 2^x (ex2.approx.ftz: relative error ~2^-22; exp2(-inf) = +0). */
__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif  // HS_ATTN_HOST_EMU

/** Packs two floats as bf16x2 (round to nearest even); `lo` goes to the low 16 bits. */
__device__ __forceinline__ uint32_t packBf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- shared-memory tile addressing ----------------------------------------------------------

/**
 * Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of D-element bf16 rows.
 * Rows of fewer than 8 chunks (D = 32: 4) XOR with row % (D / 8) so the chunk stays in its row.
 */
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  constexpr int kMask = D / 8 >= 8 ? 7 : D / 8 - 1;
  return static_cast<uint32_t>(row * (D * 2) + ((chunk ^ (row & kMask)) << 4));
}

/**
 * A fragments of a 16-row slab of a Q tile (rows rowBase..rowBase+15), k-step ks (d 16ks..16ks+15).
 */
template <int D>
__device__ __forceinline__ void loadAFrag(uint32_t (&a)[4], uint32_t tile, int rowBase, int ks, int lane) {
  const int row = rowBase + ((lane >> 3) & 1) * 8 + (lane & 7);
  ldmatrixX4(a, tile + swz<D>(row, 2 * ks + (lane >> 4)));
}

/**
 * B fragments of K^T for two n8 tiles (keys keyBase..+7 and keyBase+8..+15) at k-step ks:
 * b[0], b[1] for the first tile, b[2], b[3] for the second.
 */
template <int D>
__device__ __forceinline__ void loadKFrag(uint32_t (&b)[4], uint32_t tile, int keyBase, int ks, int lane) {
  const int row = keyBase + (lane >> 4) * 8 + (lane & 7);
  ldmatrixX4(b, tile + swz<D>(row, 2 * ks + ((lane >> 3) & 1)));
}

/**
 * B fragments of V for keys keyBase..keyBase+15 (one k16 step) and two n8 tiles of d
 * (16dp..16dp+7 and 16dp+8..+15): b[0], b[1] for the first, b[2], b[3] for the second.
 */
template <int D>
__device__ __forceinline__ void loadVFrag(uint32_t (&b)[4], uint32_t tile, int keyBase, int dp, int lane) {
  const int row = keyBase + ((lane >> 3) & 1) * 8 + (lane & 7);
  ldmatrixX4Trans(b, tile + swz<D>(row, 2 * dp + (lane >> 4)));
}

// ---- paged K/V tile loader -------------------------------------------------------------------

/**
 * Streams kKeys (default kTileKeys) consecutive positions of one request and one kv head from the paged cache
 * ([numBlocks, 2, blockSize, Hkv, D]) into swizzled shared-memory K and V tiles with cp.async.
 * Each thread owns one 16-byte chunk column and kPasses rows of a tile.
 *
 * Block ids go through a small shared ring (kIdSlots slots of kKeys ints, slot = tile %
 * kIdSlots): thread r < kKeys loads the id of row r two tiles ahead into one register
 * (`pending`), stores it into the ring one tile later, and the issue after that reads it from
 * shared memory. The global load's latency thus hides behind a whole tile of compute, and each
 * thread holds one id register instead of one per owned row. Positions >= kvEnd get id -1: their
 * 16 bytes are zero-filled and their block-table entries never read.
 *
 * Pipeline contract (kStages-deep, one __syncthreads per tile), for tile it of the loop:
 *   wait(tile it); __syncthreads(); issue(it + kStages - 1); storeIds(it + kStages);
 *   loadIds(it + kStages + 1); commit; compute(it).
 * The slot written by storeIds(t) was last read by issue(t - kIdSlots) = issue(it - 1), which
 * every thread finished before this iteration's barrier.
 */
template <int D, int kThreads, int kStages, int kKeys = kTileKeys>
struct KvTileLoader {
  static constexpr int kDim = D;
  static constexpr int kKeysPerTile = kKeys;
  static constexpr int kChunks = D / 8;
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kPasses = kKeys / kRowsPerPass;
  static constexpr int kIdSlots = kStages + 1;
  /** Shared-memory bytes of the id ring. */
  static constexpr int kIdBytes = kIdSlots * kKeys * 4;
  static_assert(kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0, "tile does not split evenly");
  static_assert(kThreads >= kKeys, "one thread per tile row loads block ids");

  int* ids;     // shared ring [kIdSlots][kKeys]
  int pending;  // block id of row threadIdx.x of a tile not yet stored
  int row0;     // first owned row
  int chunk;    // owned chunk column

  __device__ __forceinline__ KvTileLoader(int* idRing, int tid)
      : ids(idRing), pending(-1), row0(tid / kChunks), chunk(tid % kChunks) {}

  /** Block id of row threadIdx.x of the tile starting at tileStart (-1 past kvEnd or for idle threads). */
  __device__ __forceinline__ static int rowBlockId(const int* __restrict__ blockTableRow, int tileStart, int kvEnd,
                                                   int log2BlockSize) {
    const int pos = tileStart + static_cast<int>(threadIdx.x);
    // __ldcg: HiSparse tables are written by the step's kernels (coherent load under PDL, pdl.cuh)
    return threadIdx.x < kKeys && pos < kvEnd ? __ldcg(blockTableRow + (pos >> log2BlockSize)) : -1;
  }

  /** Loads (into `pending`) the ids of tile `tile`; the caller stores them one iteration later. */
  __device__ __forceinline__ void loadIds(const int* __restrict__ blockTableRow, int tile, int tileBase, int kvEnd,
                                          int log2BlockSize) {
    pending = rowBlockId(blockTableRow, tileBase + tile * kKeys, kvEnd, log2BlockSize);
  }

  /** Stores `pending` as the ids of tile `tile`. */
  __device__ __forceinline__ void storeIds(int tile) const {
    if (threadIdx.x < kKeys) ids[(tile % kIdSlots) * kKeys + threadIdx.x] = pending;
  }

  /**
   * Prologue: stores the ids of tiles 0..kStages-1 and loads those of tile kStages into
   * `pending`. The caller must __syncthreads() before the first issue().
   */
  __device__ __forceinline__ void prologueIds(const int* __restrict__ blockTableRow, int tileBase, int kvEnd,
                                              int log2BlockSize) {
#pragma unroll
    for (int t = 0; t < kStages; ++t) {
      pending = rowBlockId(blockTableRow, tileBase + t * kKeys, kvEnd, log2BlockSize);
      storeIds(t);
    }
    loadIds(blockTableRow, kStages, tileBase, kvEnd, log2BlockSize);
  }

  /**
   * Issues the cp.async copies of tile `tile` (positions tileBase + tile*kKeys ..) into sK / sV
   * (shared addresses of the stage). kvHead: kvCache + kvHead * D; tokenStride: Hkv * D elements
   * between token rows of a block.
   */
  __device__ __forceinline__ void issue(uint32_t sK, uint32_t sV, const __nv_bfloat16* __restrict__ kvHead,
                                        int tile, int tileBase, int log2BlockSize, int tokenStride) const {
    const int blockMask = (1 << log2BlockSize) - 1;
    const size_t vOffset = static_cast<size_t>(tokenStride) << log2BlockSize;
    const int* slot = ids + (tile % kIdSlots) * kKeys;
    const int tileStart = tileBase + tile * kKeys;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = row0 + i * kRowsPerPass;
      const int b = slot[row];
      const int off = (tileStart + row) & blockMask;
      const __nv_bfloat16* src = kvHead;
      if (b >= 0) src = kvHead + ((static_cast<size_t>(b) * 2 << log2BlockSize) + off) * tokenStride + chunk * 8;
      const int bytes = b >= 0 ? 16 : 0;
      const uint32_t dst = swz<D>(row, chunk);
      cpAsync16(sK + dst, src, bytes);
      cpAsync16(sV + dst, b >= 0 ? src + vOffset : src, bytes);
    }
  }
};

/**
 * 8 e4m3 codes (one uint2, element 0 in the low byte) dequantised as bf16(e4m3 * scale) into one
 * 16-byte chunk of a bf16 tile row. With scale 1 the conversion is exact (fp8.cuh).
 */
__device__ __forceinline__ uint4 dequantE4m3x8(uint2 codes, float scale) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t src = i < 2 ? codes.x : codes.y;
    const int sh = (i & 1) * 16;
    w[i] = packBf16x2(hs_fp8::e4m3ToFloat(static_cast<uint8_t>(src >> sh)) * scale,
                      hs_fp8::e4m3ToFloat(static_cast<uint8_t>(src >> (sh + 8))) * scale);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/**
 * KvTileLoader::issue for an fp8 cache (HsPagedAttentionParams.kvCacheFp8): the same rows and
 * chunks, but each chunk is 8 e4m3 bytes loaded with one 8-byte global load, dequantised in
 * registers and stored into the same swizzled bf16 tile, so the compute that follows is the bf16
 * path unchanged. The loads of all owned rows are issued before the first conversion (kPasses x 2
 * loads in flight per thread); they are synchronous, so unlike cp.async their latency is hidden
 * by the other CTAs of the SM, not by the pipeline (the wait/commit calls around stay harmless).
 * kvHead: the fp8 cache + kvHead * D bytes; tokenStride: Hkv * D bytes between token rows.
 */
template <typename Loader>
__device__ __forceinline__ void issueFp8(const Loader& ld, uint32_t sK, uint32_t sV,
                                         const uint8_t* __restrict__ kvHead, int tile, int tileBase,
                                         int log2BlockSize, int tokenStride, float kScale, float vScale) {
  const int blockMask = (1 << log2BlockSize) - 1;
  const size_t vOffset = static_cast<size_t>(tokenStride) << log2BlockSize;
  const int* slot = ld.ids + (tile % Loader::kIdSlots) * Loader::kKeysPerTile;
  const int tileStart = tileBase + tile * Loader::kKeysPerTile;
  uint2 kc[Loader::kPasses];
  uint2 vc[Loader::kPasses];
#pragma unroll
  for (int i = 0; i < Loader::kPasses; ++i) {
    const int row = ld.row0 + i * Loader::kRowsPerPass;
    const int b = slot[row];
    const int off = (tileStart + row) & blockMask;
    kc[i] = make_uint2(0u, 0u);
    vc[i] = make_uint2(0u, 0u);
    if (b >= 0) {
      const uint8_t* src =
          kvHead + ((static_cast<size_t>(b) * 2 << log2BlockSize) + off) * tokenStride + ld.chunk * 8;
      kc[i] = *reinterpret_cast<const uint2*>(src);
      vc[i] = *reinterpret_cast<const uint2*>(src + vOffset);
    }
  }
#pragma unroll
  for (int i = 0; i < Loader::kPasses; ++i) {
    const int row = ld.row0 + i * Loader::kRowsPerPass;
    const uint32_t dst = swz<Loader::kDim>(row, ld.chunk);
    stShared16(sK + dst, dequantE4m3x8(kc[i], kScale));  // zero codes give zero bf16
    stShared16(sV + dst, dequantE4m3x8(vc[i], vScale));
  }
}

/**
 * Issues tile `tile` of the kernel's K/V stream from a bf16 cache (cp.async) or an fp8 one
 * (issueFp8), as the kernel arguments `a` say (a.kvFp8, a.kScale, a.vScale, a.log2BlockSize).
 * kvHead: the cache + kvHead * D elements of its dtype (computed here for fp8).
 */
template <typename Loader, typename Args>
__device__ __forceinline__ void issueKvTile(const Loader& ld, const Args& a, uint32_t sK, uint32_t sV,
                                            const __nv_bfloat16* kvHead, int tile, int tileBase, int tokenStride) {
  if (a.kvFp8) {
    // kvHead was formed in bf16 elements: the head's offset in fp8 bytes is half of it.
    const size_t headElems = static_cast<size_t>(kvHead - a.kvCache);
    issueFp8(ld, sK, sV, reinterpret_cast<const uint8_t*>(a.kvCache) + headElems, tile, tileBase, a.log2BlockSize,
             tokenStride, a.kScale, a.vScale);
  } else {
    ld.issue(sK, sV, kvHead, tile, tileBase, a.log2BlockSize, tokenStride);
  }
}

/** log2 of a power of two (callers validate), as a host/device helper. */
__host__ __device__ inline int log2Pow2(int v) {
  int r = 0;
  while ((1 << r) < v) ++r;
  return r;
}

}  // namespace hs_attn

// The warp-level steps over these tiles (S = QK^T, online softmax, O += PV).
#include "attention_warp.cuh"
