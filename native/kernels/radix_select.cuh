// The CTA-wide radix select of the selection kernels (Quest pages, hisparse_select.cu; DSA
// indexer top-k, mla_topk.cu): one 256-bin shared-memory histogram per 8-bit digit, MSB
// first, over order-preserving unsigned keys (0 = not a candidate), warp-aggregated atomics
// (__match_any_sync, sm_70+). Internal header.
#pragma once

#include <cuda_runtime.h>

#include <climits>

namespace hs_sparse {

/**
 * Radix select: the k-th largest nonzero key of keyAt(0) .. keyAt(n - 1) (k >= 1, at least k
 * nonzero keys; Key an unsigned integer type of 32 or 64 bits, 8 bits per pass, MSB first).
 * Returns T; *take receives how many keys equal to T belong to the top k. The top k is the
 * same set as keys > T plus the first *take keys == T in index order.
 * Early exit: when every key of the digit bucket that holds the k-th key belongs to the top k,
 * T is the bucket's smallest possible key (lower bits 0) and *take is INT_MAX (every key equal
 * to it is in the bucket, hence taken); distinct float64 scores usually end after 2-3 passes
 * of 8 bits instead of 8. Every thread of the CTA must call it (warp collectives inside).
 */
template <typename Key, typename LoadKey>
__device__ Key radixSelect(LoadKey keyAt, int n, int k, int* hist, int* bc, int* take) {
  const int lane = threadIdx.x & 31;
  Key prefix = 0;
  Key mask = 0;
  int need = k;
  for (int shift = static_cast<int>(8 * sizeof(Key)) - 8; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    // Warp-uniform trip count: the lanes of a warp holding the same digit add once (their leader
    // adds the group's size), so a digit shared by most keys (the top byte of floats of one
    // binade) costs one atomic per warp instead of 32 serialised ones.
    for (int base = threadIdx.x - lane; base < n; base += blockDim.x) {
      const int p = base + lane;
      const Key key = p < n ? keyAt(p) : Key(0);
      const bool counted = key != 0 && (key & mask) == prefix;
      const int digit = counted ? static_cast<int>((key >> shift) & 255) : 256 + lane;
      const unsigned group = __match_any_sync(0xffffffffu, digit);
      if (counted && lane == __ffs(group) - 1) atomicAdd(&hist[digit], __popc(group));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l owns digits 255 - 8l down to 248 - 8l: lanes in order walk the digits descending.
      int c[8];
      int sum = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        c[e] = hist[255 - 8 * lane - e];
        sum += c[e];
      }
      int incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, incl >= need);
      const int owner = __ffs(ballot) - 1;  // the invariant (>= need candidates) makes ballot nonzero
      if (lane == owner) {
        int cum = incl - sum;
        for (int e = 0; e < 8; ++e) {
          if (cum + c[e] >= need) {
            bc[0] = 255 - 8 * lane - e;
            bc[1] = need - cum;
            bc[2] = c[e] == need - cum ? 1 : 0;  // the whole bucket is taken
            break;
          }
          cum += c[e];
        }
      }
    }
    __syncthreads();
    const int digit = bc[0];
    need = bc[1];
    const bool whole = bc[2] != 0;
    prefix |= static_cast<Key>(digit) << shift;
    mask |= static_cast<Key>(0xff) << shift;
    __syncthreads();  // bc and hist are rewritten by the next pass
    if (whole) {
      *take = INT_MAX;
      return prefix;
    }
  }
  *take = need;
  return prefix;
}

}  // namespace hs_sparse
