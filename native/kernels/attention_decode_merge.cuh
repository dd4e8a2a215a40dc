// Split-KV combine of paged decode attention (decodeMergeKernel), with what it shares with the
// decode kernel of attention_decode.cu: the kernel argument struct (DecodeArgs) and the
// per-(request, kv head) row addressing (DecodeRow, decodeRow: dense, or HiSparse per-head
// tables). Internal header of attention_decode.cu (its only includer): not part of the C ABI.
#pragma once

#include "attention_launch.cuh"

namespace hs_attn {
namespace {

/** Decode kernel arguments (by value). */
struct DecodeArgs {
  const __nv_bfloat16* qkv;
  const __nv_bfloat16* kvCache;
  __nv_bfloat16* out;
  const int* seqLens;
  const int* blockTables;
  float* partialO;    // [numReqs, numSplits, Hq, D]
  float* partialLse;  // [numReqs, numSplits, Hq], log2 domain
  int qkvRowStride;
  int maxBlocksPerReq;
  int numHeads;
  int numKvHeads;
  int groupSize;
  int headTiles;
  int log2BlockSize;
  int numSplits;
  float scaleLog2;
  int kvFp8;     // nonzero: kvCache holds e4m3 bytes (HsPagedAttentionParams.kvCacheFp8)
  float kScale;  // fp8 per-tensor scales
  float vScale;
  // HiSparse (null / 0 for dense attention): see HsSparseDecodeParams in attention.h.
  const int* headBlockTables;  // [numReqs, Hkv, headTableStride]
  const int* headSeqLens;      // [numReqs, Hkv]
  const int* rowFlags;         // [numReqs] nonzero: per-head tables
  const int* tokenRow;         // [numReqs] q/out row (< 0: skip the request)
  int headTableStride;
  int onlyFlagged;             // rows without the flag are left untouched
};

/** What one (request, kv head) reads: its length, its block table row, its q/out row. */
struct DecodeRow {
  int seqLen;      // clamped to the table row's capacity
  const int* bt;   // block table row
  int row;         // q / out row
  bool skip;       // write nothing for this request
};

/**
 * The row of (req, kvh): dense (the request's table and length) or, in the HiSparse instantiation
 * (kSparse), per head when flagged (or for every request without rowFlags). The dense
 * instantiation reads exactly what the kernel read before HiSparse.
 */
template <bool kSparse>
__device__ __forceinline__ DecodeRow decodeRow(const DecodeArgs& a, int req, int kvh) {
  DecodeRow d;
  if constexpr (!kSparse) {
    const int s = __ldg(a.seqLens + req);
    const int maxLen = a.maxBlocksPerReq << a.log2BlockSize;
    d.seqLen = s < 0 ? 0 : (s > maxLen ? maxLen : s);
    d.bt = a.blockTables + static_cast<size_t>(req) * a.maxBlocksPerReq;
    d.row = req;
    d.skip = false;
    return d;
  }
  const bool perHead = a.rowFlags == nullptr || __ldg(a.rowFlags + req) != 0;
  d.row = a.tokenRow != nullptr ? __ldg(a.tokenRow + req) : req;
  d.skip = d.row < 0 || (!perHead && a.onlyFlagged != 0);
  int s;
  int maxLen;
  if (perHead) {
    const size_t item = static_cast<size_t>(req) * a.numKvHeads + kvh;
    s = __ldg(a.headSeqLens + item);
    maxLen = a.headTableStride << a.log2BlockSize;
    d.bt = a.headBlockTables + item * a.headTableStride;
  } else {
    s = __ldg(a.seqLens + req);
    maxLen = a.maxBlocksPerReq << a.log2BlockSize;
    d.bt = a.blockTables + static_cast<size_t>(req) * a.maxBlocksPerReq;
  }
  d.seqLen = s < 0 ? 0 : (s > maxLen ? maxLen : s);
  return d;
}

/**
 * Combines the active splits of each (request, q head): out = sum_s w_s O_s / sum_s w_s with
 * w_s = 2^(lse_s - max lse). One warp per (request, head); rows with seqLen 0 get zeros.
 * Grid (ceil(Hq / 4), numReqs), 128 threads.
 */
template <int D, bool kSparse>
__global__ void __launch_bounds__(128) decodeMergeKernel(const DecodeArgs a) {
  constexpr int kPer = D / 32;  // d values per lane (1, 2 or 4)
  static_assert(kPer == 1 || kPer == 2 || kPer == 4, "head dim 32, 64 or 128");
  const int lane = threadIdx.x & 31;
  const int head = blockIdx.x * 4 + (threadIdx.x >> 5);
  const int req = blockIdx.y;
  if (head >= a.numHeads) return;
  const DecodeRow dr = decodeRow<kSparse>(a, req, head / a.groupSize);
  if (dr.skip) return;
  const int nAct = decodeActiveSplits(dr.seqLen, a.numSplits);
  __nv_bfloat16* dst = a.out + (static_cast<size_t>(dr.row) * a.numHeads + head) * D + lane * kPer;
  const size_t base = static_cast<size_t>(req) * a.numSplits * a.numHeads + head;  // split 0 row
  float acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) acc[i] = 0.f;
  float lseMax = kNegInf;
  for (int s = lane; s < nAct; s += 32) lseMax = fmaxf(lseMax, a.partialLse[base + static_cast<size_t>(s) * a.numHeads]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) lseMax = fmaxf(lseMax, __shfl_xor_sync(0xffffffffu, lseMax, off));
  float wSum = 0.f;
#pragma unroll 4
  for (int s = 0; s < nAct; ++s) {
    const size_t r = base + static_cast<size_t>(s) * a.numHeads;
    const float w = exp2f(a.partialLse[r] - lseMax);
    wSum += w;
    const float* src = a.partialO + r * D + lane * kPer;
    if constexpr (kPer == 4) {
      const float4 v = *reinterpret_cast<const float4*>(src);
      acc[0] += w * v.x;
      acc[1] += w * v.y;
      acc[2] += w * v.z;
      acc[3] += w * v.w;
    } else if constexpr (kPer == 2) {
      const float2 v = *reinterpret_cast<const float2*>(src);
      acc[0] += w * v.x;
      acc[1] += w * v.y;
    } else {  // D = 32
      acc[0] += w * *src;
    }
  }
  const float inv = nAct > 0 ? 1.f / wSum : 0.f;
  if constexpr (kPer == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(packBf16x2(acc[0] * inv, acc[1] * inv), packBf16x2(acc[2] * inv, acc[3] * inv));
  } else if constexpr (kPer == 2) {
    *reinterpret_cast<uint32_t*>(dst) = packBf16x2(acc[0] * inv, acc[1] * inv);
  } else {
    *dst = __float2bfloat16_rn(acc[0] * inv);
  }
}

}  // namespace
}  // namespace hs_attn
