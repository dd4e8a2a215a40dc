// Internals shared by the two absorbed MLA attention kernels (mla.h hsMlaAttention):
// mla_attention.cu (SIMT fp32, the oracle and the fallback) and mla_attention_tc.cu (bf16
// tensor cores). Internal header: not part of the C ABI.
//
// Both write split partials in one workspace layout, merged by the same kernel (launchMerge):
//   o  f32 [numSplits, T, Hq, C]  unnormalised sum_i e^(s_i - m) c_i of the split's entries
//   ml f32 [numSplits, T, Hq, 2]  (m, l): the split's max score (natural units, -inf when it has
//                                 no attended entry) and sum_i e^(s_i - m)
// at ws + 0 and ws + numSplits * T * Hq * C floats.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <atomic>

#include "mla.h"
#include "mla_common.cuh"

namespace hs_mla {

/** The checks every absorbed attention launch makes (mla.h HsMlaAttentionParams). */
inline bool validAttentionParams(const HsMlaAttentionParams& a) {
  const int D = a.rank + a.ropeDim;
  return !(a.numTokens < 0 || a.numReqs < 0 || a.numHeads <= 0 || a.rank <= 0 || a.rank > HS_MLA_MAX_RANK ||
           a.ropeDim < 0 || D > HS_MLA_MAX_ROW || a.blockSize <= 0 || a.maxBlocksPerReq < 0 || a.maxContext <= 0 ||
           (a.topkIndices != nullptr && a.topkStride <= 0) || !storageDtype(a.cacheDtype));
}

/** SMs of the current device (132 when it cannot be read), cached after the first call. */
inline int smCount() {
  static std::atomic<int> cached{0};
  int n = cached.load(std::memory_order_relaxed);
  if (n > 0) return n;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      n <= 0)
    n = 132;
  cached.store(n, std::memory_order_relaxed);
  return n;
}

/** Request of token t: the r with queryStartLoc[r] <= t < queryStartLoc[r + 1], or -1. */
__device__ __forceinline__ int requestOf(const int32_t* qsl, int numReqs, int t) {
  int lo = 0;
  int hi = numReqs;  // answer in [0, numReqs): last r with qsl[r] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (qsl[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return (lo < numReqs && qsl[lo] <= t && t < qsl[lo + 1]) ? lo : -1;
}

/** Bytes of the split layout above for `splits` splits (0 for one split: no workspace). */
inline size_t splitWorkspaceBytes(int splits, int numTokens, int numHeads, int rank) {
  if (splits <= 1) return 0;
  return sizeof(float) * static_cast<size_t>(splits) * numTokens * numHeads * (rank + 2);
}

/** Merges the split partials in `ws` into oLat f32 [T, Hq, C] (mla_attention.cu mergeKernel). */
cudaError_t launchMerge(const float* ws, float* oLat, int numTokens, int numHeads, int rank, int numSplits,
                        cudaStream_t stream);

/** Workspace bytes of the SIMT kernel (mla_attention.cu). */
size_t simtWorkspaceBytes(int numTokens, int numHeads, int rank, int maxEntries);

/** Workspace bytes of the tensor-core kernel for a rank-C cache (mla_attention_tc.cu; 0 when it cannot run). */
size_t tcWorkspaceBytes(int numTokens, int numHeads, int rank, int maxEntries);

/** True when hsMlaAttentionTc takes these sizes and dtype (bf16 rows of C = 512, R = 64). */
bool tcSupports(int cacheDtype, int rank, int ropeDim);

}  // namespace hs_mla
