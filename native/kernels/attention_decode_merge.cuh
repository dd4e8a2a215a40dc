// Split-KV combine of paged decode attention (decodeMergeKernel), with what it shares with the
// decode kernel of attention_decode.cu: the kernel argument struct (DecodeArgs) and the
// per-(request, kv head) row addressing (DecodeRow, decodeRow: dense, or HiSparse per-head
// tables). Internal header of attention_decode.cu (its only includer): not part of the C ABI.
#pragma once

#include "attention_launch.cuh"
#include "pdl.cuh"

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
  int minSplitTokens;          // decodeSplitTokens' floor (decodeMinSplitTokens() at launch)
  int splitDivisor;            // decodeSplitTokens' divisor: numSplits, or fewer (deep small-batch launch)
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
    const int s = __ldcg(a.seqLens + req);
    const int maxLen = a.maxBlocksPerReq << a.log2BlockSize;
    d.seqLen = s < 0 ? 0 : (s > maxLen ? maxLen : s);
    d.bt = a.blockTables + static_cast<size_t>(req) * a.maxBlocksPerReq;
    d.row = req;
    d.skip = false;
    return d;
  }
  const bool perHead = a.rowFlags == nullptr || __ldcg(a.rowFlags + req) != 0;
  d.row = a.tokenRow != nullptr ? __ldcg(a.tokenRow + req) : req;
  d.skip = d.row < 0 || (!perHead && a.onlyFlagged != 0);
  int s;
  int maxLen;
  if (perHead) {
    const size_t item = static_cast<size_t>(req) * a.numKvHeads + kvh;
    s = __ldcg(a.headSeqLens + item);
    maxLen = a.headTableStride << a.log2BlockSize;
    d.bt = a.headBlockTables + item * a.headTableStride;
  } else {
    s = __ldcg(a.seqLens + req);
    maxLen = a.maxBlocksPerReq << a.log2BlockSize;
    d.bt = a.blockTables + static_cast<size_t>(req) * a.maxBlocksPerReq;
  }
  d.seqLen = s < 0 ? 0 : (s > maxLen ? maxLen : s);
  return d;
}

/** Threads of a merge CTA (one CTA per (q head, request)). */
constexpr int kMergeThreads = 256;

/** Dynamic shared memory of decodeMergeKernel<D>: the splits' lse, then [groups][D] partial sums. */
template <int D>
constexpr int mergeSmemBytes() {
  return (kMaxSplits + (kMergeThreads / (D / 4)) * D) * static_cast<int>(sizeof(float));
}

/**
 * Combines the active splits of each (request, q head): out = sum_s w_s O_s / sum_s w_s with
 * w_s = 2^(lse_s - max lse); rows with seqLen 0 get zeros. Grid (Hq, numReqs), kMergeThreads
 * threads, mergeSmemBytes<D>() of dynamic shared memory. The CTA stages the lse values in shared
 * memory; its threads form kMergeThreads / (D/4) groups of D/4 lanes (one float4 of the head row
 * each), group g summing the splits g, g + groups, ...; the groups' sums are then added in group
 * order. Every sum runs in an order fixed by nAct alone: deterministic. (One CTA per head with
 * the splits spread over groups: at batch 1 the old one-warp-per-head loop over 32-128 splits
 * was latency-bound at ~10 us per layer on the H200.)
 */
template <int D, bool kSparse>
__global__ void __launch_bounds__(kMergeThreads) decodeMergeKernel(const DecodeArgs a) {
  constexpr int kLanes = D / 4;                    // float4 lanes per head row
  constexpr int kGroups = kMergeThreads / kLanes;  // splits summed in parallel
  extern __shared__ __align__(128) unsigned char smem[];
  float* sLse = reinterpret_cast<float*>(smem);  // [kMaxSplits]
  float* sAcc = sLse + kMaxSplits;               // [kGroups][D]
  const int head = blockIdx.x;
  const int req = blockIdx.y;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  hs::pdlLaunchDependents();
  hs::pdlWait();  // the partials are the decode kernel's output (pdl.cuh)
  const DecodeRow dr = decodeRow<kSparse>(a, req, head / a.groupSize);
  if (dr.skip) return;
  const int nAct = decodeActiveSplits(dr.seqLen, a.splitDivisor, a.minSplitTokens);
  const size_t base = static_cast<size_t>(req) * a.numSplits * a.numHeads + head;  // split 0 row
  for (int s = tid; s < nAct; s += kMergeThreads) sLse[s] = __ldcg(a.partialLse + base + static_cast<size_t>(s) * a.numHeads);
  __syncthreads();
  float lseMax = kNegInf;  // every warp computes the same max and weight sum (no second barrier)
  for (int s = lane; s < nAct; s += 32) lseMax = fmaxf(lseMax, sLse[s]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) lseMax = fmaxf(lseMax, __shfl_xor_sync(0xffffffffu, lseMax, off));
  const int g = tid / kLanes;
  const int d = (tid % kLanes) * 4;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = g; s < nAct; s += kGroups) {
    const float w = exp2f(sLse[s] - lseMax);
    const float4 v = __ldcg(reinterpret_cast<const float4*>(a.partialO + (base + static_cast<size_t>(s) * a.numHeads) * D + d));
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }
  *reinterpret_cast<float4*>(sAcc + g * D + d) = acc;
  float wSum = 0.f;
  for (int s = lane; s < nAct; s += 32) wSum += exp2f(sLse[s] - lseMax);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) wSum += __shfl_xor_sync(0xffffffffu, wSum, off);
  __syncthreads();
  if (tid >= kLanes) return;
  float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int gg = 0; gg < kGroups; ++gg) {
    const float4 v = *reinterpret_cast<const float4*>(sAcc + gg * D + d);
    sum.x += v.x;
    sum.y += v.y;
    sum.z += v.z;
    sum.w += v.w;
  }
  const float inv = nAct > 0 ? 1.f / wSum : 0.f;
  __nv_bfloat16* dst = a.out + (static_cast<size_t>(dr.row) * a.numHeads + head) * D + d;
  *reinterpret_cast<uint2*>(dst) = make_uint2(packBf16x2(sum.x * inv, sum.y * inv), packBf16x2(sum.z * inv, sum.w * inv));
}

}  // namespace
}  // namespace hs_attn
