// Benchmark-only selection overlap of DSA models (hisparse.h hsRowSelectionOverlap; issue 15):
// dummy-weight indexers change their picks every step, unlike trained ones, so a benchmark sets
// the step-to-step overlap of each request's selection instead. Per resolved row (hsRowResolve's
// rule) one CTA: each entry of the request's previous selection for this indexer is kept with
// probability p (a counter-based hash of the slot, indexer, context length and entry: no state
// besides the previous selection), the rest are the model's own picks not kept already, in the
// model's order; the row is written ascending (merge of two ascending lists). A request's first
// step (its context did not grow by exactly one token since the stored selection: a new request
// in the slot, or its prefill) takes the model's selection. Never on a serving path: outputs change.
#include "hisparse.h"
#include "hisparse_common.cuh"

namespace hs_sparse {
namespace {

/** Largest top-k (entries per row), as hsRowResolve. */
constexpr int kMaxOverlapTopk = 8192;

/** Uniform in [0, 1) from four integers (splitmix-style mixing; deterministic). */
__device__ __forceinline__ float hashUniform(unsigned a, unsigned b, unsigned c, unsigned d) {
  unsigned long long x = (static_cast<unsigned long long>(a) << 32) ^ b;
  x ^= (static_cast<unsigned long long>(c) << 32) ^ (static_cast<unsigned long long>(d) * 0x9e3779b97f4a7c15ull);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
}

__global__ void __launch_bounds__(kThreads) overlapKernel(const HsRowSelectionOverlapParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int r = blockIdx.x;
  const int slot = p.reqSlot[r];
  if (!((p.rowFlags == nullptr || p.rowFlags[r] != 0) && slot >= 0 && slot < p.numSlots)) return;
  const int K = p.K;
  int* kept = reinterpret_cast<int*>(smem);
  int* chosen = kept + K;
  int* warpSums = chosen + K;
  const int t = p.tokenRow == nullptr ? r : p.tokenRow[r];
  if (t < 0 || t >= p.numTokens) return;
  const int32_t* sel = p.topk + static_cast<size_t>(t) * K;
  int32_t* out = p.out + static_cast<size_t>(t) * K;
  const size_t lane = static_cast<size_t>(slot) * p.numSources + p.source;
  int32_t* prev = p.prevSelection + lane * K;
  const int n = p.seqLens[r];
  int mine = 0;
  for (int j = threadIdx.x; j < K; j += blockDim.x) mine += sel[j] >= 0 ? 1 : 0;
  const int nm = blockSum(mine, warpSums);  // the model's entries: the non-negative prefix
  const bool fresh = p.prevSeqLen[lane] != n - 1;
  // Kept entries of the previous selection (ascending, distinct), compacted in order.
  int c = 0;
  for (int base = 0; base < K; base += blockDim.x) {
    const int j = base + threadIdx.x;
    bool keep = false;
    if (!fresh && j < K) {
      const int e = prev[j];
      keep = e >= 0 && e < n && hashUniform(slot, p.source, n, j) < p.p;
    }
    int total = 0;
    const int at = c + blockExclusiveScan(keep ? 1 : 0, &total, warpSums);
    if (keep) kept[at] = prev[j];
    c += total;
  }
  __syncthreads();
  c = min(c, nm);
  // The model's entries not kept, in order, until the row holds nm entries.
  const int need = nm - c;
  int got = 0;
  for (int base = 0; base < nm; base += blockDim.x) {
    const int i = base + threadIdx.x;
    bool take = false;
    if (i < nm) {
      const int e = sel[i];
      const int k = lowerBound(kept, c, e);
      take = !(k < c && kept[k] == e);
    }
    int total = 0;
    const int at = got + blockExclusiveScan(take ? 1 : 0, &total, warpSums);
    if (take && at < need) chosen[at] = sel[i];
    got += total;
  }
  __syncthreads();
  const int m = min(got, need);
  // Merge: an element's rank is its index plus the number of the other list's elements below it.
  for (int i = threadIdx.x; i < c; i += blockDim.x) out[i + lowerBound(chosen, m, kept[i])] = kept[i];
  for (int i = threadIdx.x; i < m; i += blockDim.x) out[i + lowerBound(kept, c, chosen[i])] = chosen[i];
  for (int j = c + m + threadIdx.x; j < K; j += blockDim.x) out[j] = -1;
  __syncthreads();
  for (int j = threadIdx.x; j < K; j += blockDim.x) prev[j] = out[j];
  if (threadIdx.x == 0) p.prevSeqLen[lane] = n;
}

}  // namespace
}  // namespace hs_sparse

extern "C" cudaError_t hsRowSelectionOverlap(const HsRowSelectionOverlapParams* p, cudaStream_t stream) {
  using namespace hs_sparse;
  if (p == nullptr || p->numReqs < 0 || p->numTokens < 0 || p->K <= 0 || p->K > kMaxOverlapTopk ||
      p->numSlots <= 0 || p->source < 0 || p->source >= p->numSources || !(p->p >= 0.0f && p->p <= 1.0f))
    return cudaErrorInvalidValue;
  if (p->numTokens == 0) return cudaSuccess;
  if (p->topk == nullptr || p->out == nullptr || p->reqSlot == nullptr || p->seqLens == nullptr ||
      p->prevSelection == nullptr || p->prevSeqLen == nullptr)
    return cudaErrorInvalidValue;
  cudaError_t err = cudaMemcpyAsync(p->out, p->topk, sizeof(int32_t) * static_cast<size_t>(p->numTokens) * p->K,
                                    cudaMemcpyDeviceToDevice, stream);
  if (err != cudaSuccess || p->numReqs == 0) return err;
  const size_t smem = (2 * static_cast<size_t>(p->K) + 32) * sizeof(int);
  static std::atomic<unsigned long long> smemSet{0};
  err = ensureSmem(overlapKernel, smem, smemSet);
  if (err != cudaSuccess) return err;
  overlapKernel<<<p->numReqs, kThreads, smem, stream>>>(*p);
  return cudaGetLastError();
}
