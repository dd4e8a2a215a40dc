// Split-KV for the paged prefill kernel (attention_prefill.cu, its only includer): the split
// policy, the workspace layout and the combine kernel. Internal header: not part of the C ABI.
#pragma once

#include "attention_launch.cuh"

namespace hs_attn {
namespace {

/** Prefill CTAs aimed at per SM (2 resident CTAs per SM, two waves) before the keys are split. */
constexpr int kPrefillCtasPerSm = 4;
/** Fewest keys per split: below this the partial writes and the merge outweigh the gain. */
constexpr int kPrefillMinSplitKeys = 1024;
/** Most splits per (row tile, kv head, request). */
constexpr int kPrefillMaxSplits = 16;
/** Warps of a merge CTA (one warp per (token, q head)). */
constexpr int kPrefillMergeWarps = 4;

/**
 * Split-KV factor of one prefill launch, from static sizes only: 1 when the grid of
 * ceil(maxQueryLen * G / rowsPerCta) x Hkv x numReqs CTAs already gives kPrefillCtasPerSm per SM,
 * else enough splits to reach it, at most maxModelLen / kPrefillMinSplitKeys and
 * kPrefillMaxSplits. The split sizes follow each tile's own key count inside the kernel.
 */
inline int prefillNumSplits(int numReqs, int numKvHeads, int groupSize, int maxQueryLen, int maxModelLen,
                            int rowsPerCta, int numSms) {
  const long long tiles = (static_cast<long long>(maxQueryLen) * groupSize + rowsPerCta - 1) / rowsPerCta;
  const long long ctas = tiles * numKvHeads * (numReqs > 0 ? numReqs : 1);
  const long long target = static_cast<long long>(numSms) * kPrefillCtasPerSm;
  if (ctas <= 0 || ctas >= target) return 1;
  long long splits = (target + ctas - 1) / ctas;
  const long long byLen = maxModelLen / kPrefillMinSplitKeys;
  if (splits > byLen) splits = byLen;
  if (splits > kPrefillMaxSplits) splits = kPrefillMaxSplits;
  if (static_cast<long long>(numReqs) * splits > 65535) splits = 65535 / (numReqs > 0 ? numReqs : 1);
  return splits < 1 ? 1 : static_cast<int>(splits);
}

/**
 * Workspace of a split launch: fp32 partial rows [splits, numTokens, Hq, D], then their
 * log2-sum-exp [splits, numTokens, Hq], each 256-byte aligned; 0 when splits <= 1.
 */
inline size_t prefillWorkspaceBytes(int splits, int numTokens, int numHeads, int headDim) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(splits) * numTokens * numHeads;
  return align256(rows * headDim * sizeof(float)) + align256(rows * sizeof(float));
}

/**
 * out[t, h] = sum_s w_s O_s[t, h] / sum_s w_s with w_s = 2^(lse_s - max lse), over the splits
 * with a key (lse > -inf), in split order (deterministic); zeros when no split has a key. Grid
 * (ceil(Hq / kPrefillMergeWarps), numTokens), one warp per (token, q head), lane d .. D step 32.
 */
template <int D>
__global__ void __launch_bounds__(kPrefillMergeWarps * 32)
    prefillMergeKernel(const float* __restrict__ partialO, const float* __restrict__ partialLse,
                       __nv_bfloat16* __restrict__ out, int numSplits, int numTokens, int numHeads) {
  const int head = blockIdx.x * kPrefillMergeWarps + (threadIdx.x >> 5);
  const int token = blockIdx.y;
  const int lane = threadIdx.x & 31;
  if (head >= numHeads) return;
  const size_t row = static_cast<size_t>(token) * numHeads + head;
  const size_t splitStride = static_cast<size_t>(numTokens) * numHeads;
  float mx = kNegInf;
  for (int s = 0; s < numSplits; ++s) mx = fmaxf(mx, partialLse[s * splitStride + row]);
  constexpr int kPer = (D + 31) / 32;
  float acc[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
  float wSum = 0.f;
  if (mx != kNegInf) {
    for (int s = 0; s < numSplits; ++s) {
      const float lse = partialLse[s * splitStride + row];
      if (lse == kNegInf) continue;  // no key in this split: its O was not written
      const float w = exp2f(lse - mx);
      wSum += w;
      const float* o = partialO + (s * splitStride + row) * D;
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (lane + 32 * k < D) acc[k] += w * o[lane + 32 * k];
    }
  }
  const float inv = wSum > 0.f ? 1.f / wSum : 0.f;
#pragma unroll
  for (int k = 0; k < kPer; ++k)
    if (lane + 32 * k < D) out[row * D + lane + 32 * k] = __float2bfloat16(acc[k] * inv);
}

}  // namespace
}  // namespace hs_attn
