// Router GEMV + routing + plan of the small-batch MoE path (hsMoeDecodeRoute, moe_decode.h).
//
// Each warp computes one expert's router logits for every token (a 16-byte-chunk dot product,
// moe_decode.cuh warpDot), so the router weight [E, H] streams through E / 8 CTAs. The last CTA
// to finish (a ticket in `sync`, reset by that CTA, with the __threadfence() pairs of the CUDA
// programming guide's "last block" reduction) copies the logits into shared memory, routes each
// token with one warp (moe_route.cuh: hsMoeRoute's rule and roundings, bit for bit given the same
// logits), and writes the plan: the distinct experts hit in ascending order, and for each the
// slots s = t * k + j that use it, ascending (a counting sort over S = T * k <= 512 slots). It
// also zeroes the down kernel's reduce counters for this layer.
#include <atomic>

#include "attention_launch.cuh"
#include "moe_decode.cuh"
#include "moe_route.cuh"

namespace hs {
namespace moe_decode {
namespace {

struct RouterArgs {
  const bf16* x;
  const bf16* router;
  float* logits;
  int32_t* plan;
  int32_t* sync;
  int H;
  moe_route::RouteArgs route;  // bias, ids, weights, T, E, k and the rule (route.logits unused)
};

/** Shared bytes of the last CTA: logits [T, E], per-warp routing floats, counts, two scans. */
__host__ __device__ constexpr size_t routeSmemBytes(int T, int E) {
  return sizeof(float) * (static_cast<size_t>(T) * E + kWarps * moe_route::routeWarpFloats(E)) +
         sizeof(int) * (3 * static_cast<size_t>(E) + 2);
}

/**
 * Exclusive scan by one warp: out[i] = sum over q < i of (flags ? in[q] > 0 : in[q]), out[n] = the
 * total. Each lane scans a contiguous chunk; the lane totals meet in a shuffle scan.
 */
__device__ void warpScan(const int* in, int* out, int n, bool flags, int lane) {
  const int per = (n + 31) / 32;
  const int b = min(n, lane * per);
  const int end = min(n, b + per);
  int local = 0;
  for (int i = b; i < end; ++i) local += flags ? (in[i] > 0 ? 1 : 0) : in[i];
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  int run = incl - local;
  for (int i = b; i < end; ++i) {
    out[i] = run;
    run += flags ? (in[i] > 0 ? 1 : 0) : in[i];
  }
  if (lane == 31) out[n] = incl;
}

/** The last CTA: routes every token from the logits and writes the plan (see the file comment). */
__device__ void routeAndPlan(const RouterArgs& a, unsigned char* smem) {
  const int T = a.route.T, E = a.route.E, k = a.route.k;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  float* lg = reinterpret_cast<float*>(smem);
  float* routeF = lg + static_cast<size_t>(T) * E;
  int* counts = reinterpret_cast<int*>(routeF + kWarps * moe_route::routeWarpFloats(E));
  int* entryOf = counts + E;    // [E + 1]: plan entry of expert e (exclusive scan of counts > 0)
  int* firstPair = entryOf + E + 1;  // [E + 1]: exclusive scan of counts
  for (int i = threadIdx.x; i < T * E; i += kThreads) lg[i] = ldShared(a.logits + i);
  for (int i = threadIdx.x; i < E; i += kThreads) counts[i] = 0;
  const int zeros = T * downRowBlocks(a.H);
  for (int i = threadIdx.x; i < zeros; i += kThreads) a.sync[kSyncDownBase + i] = 0;
  __syncthreads();
  for (int t = warp; t < T; t += kWarps)
    moe_route::routeToken(a.route, lg + static_cast<size_t>(t) * E, t,
                          routeF + warp * moe_route::routeWarpFloats(E), lane);
  __syncthreads();  // ids of every token written (global, visible to the CTA)
  const int S = T * k;
  const int32_t* ids = a.route.ids;
  for (int i = threadIdx.x; i < S; i += kThreads) atomicAdd(&counts[ids[i]], 1);
  __syncthreads();
  if (warp == 0) {
    warpScan(counts, entryOf, E, true, lane);
    warpScan(counts, firstPair, E, false, lane);
  }
  __syncthreads();
  const int A = planEntries(T, k, E);
  const int used = entryOf[E];
  for (int e = threadIdx.x; e < E; e += kThreads) {
    if (counts[e] == 0) continue;  // not hit: no entry
    a.plan[entryOf[e]] = e;
    a.plan[A + entryOf[e]] = firstPair[e];
  }
  for (int q = used + threadIdx.x; q < A; q += kThreads) {
    a.plan[q] = -1;
    a.plan[A + q] = S;
  }
  if (threadIdx.x == 0) a.plan[2 * A] = S;
  for (int i = threadIdx.x; i < S; i += kThreads) {
    const int e = ids[i];
    int rank = 0;
    for (int q = 0; q < i; ++q) rank += ids[q] == e ? 1 : 0;
    a.plan[2 * A + 1 + firstPair[e] + rank] = i;
  }
  if (threadIdx.x == 0) a.sync[0] = 0;  // every CTA has taken its ticket
}

template <int NT>
__global__ void __launch_bounds__(kThreads) decodeRouteKernel(const RouterArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int isLast;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int T = a.route.T, E = a.route.E, H = a.H;
  const int e = blockIdx.x * kRouterExpertsPerCta + warp;
  if (e < E) {
    const bf16* rows[1] = {a.router + static_cast<size_t>(e) * H};
    const bf16* xs[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) xs[n] = a.x + static_cast<size_t>(min(n, T - 1)) * H;
    float acc[1][NT];
    warpDot<1, NT, 8>(rows, xs, T, H, acc, lane);
    if (lane == 0)
#pragma unroll
      for (int n = 0; n < NT; ++n)
        if (n < T) a.logits[static_cast<size_t>(n) * E + e] = acc[0][n];
  }
  __threadfence();  // this CTA's logits reach L2 before its ticket
  __syncthreads();
  if (threadIdx.x == 0) isLast = atomicAdd(a.sync, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!isLast) return;
  __threadfence();
  routeAndPlan(a, smem);
}

template <int NT>
cudaError_t launchRoute(const RouterArgs& a, cudaStream_t stream) {
  static std::atomic<unsigned long long> smemSet{0};
  constexpr int kMaxSmem = static_cast<int>(routeSmemBytes(HS_MOE_DECODE_MAX_TOKENS, HS_MOE_MAX_EXPERTS));
  const cudaError_t err = hs_attn::ensureSmemLimit(decodeRouteKernel<NT>, kMaxSmem, smemSet);
  if (err != cudaSuccess) return err;
  const int blocks = ceilDiv(a.route.E, kRouterExpertsPerCta);
  const size_t smem = routeSmemBytes(a.route.T, a.route.E);
  decodeRouteKernel<NT><<<blocks, kThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace
}  // namespace moe_decode
}  // namespace hs

extern "C" size_t hsMoeDecodeSyncInts(int hidden) {
  if (hidden < 1) return 0;
  return hs::moe_decode::kSyncDownBase +
         static_cast<size_t>(HS_MOE_DECODE_MAX_TOKENS) * hs::moe_decode::downRowBlocks(hidden);
}

extern "C" int hsMoeDecodePlanInts(int numTokens, int topK, int numExperts) {
  if (numTokens < 1 || topK < 1 || numExperts < 1) return 0;
  const int A = hs::moe_decode::planEntries(numTokens, topK, numExperts);
  return 2 * A + 1 + numTokens * topK;
}

extern "C" cudaError_t hsMoeDecodeRoute(const void* x, const void* router, const float* bias, float* logits,
                                        int32_t* topkIds, float* topkWeights, int32_t* plan, int32_t* sync,
                                        int numTokens, int hidden, int numExperts, int topK, int scoring,
                                        int renormalize, int numGroups, int topkGroup, double routedScalingFactor,
                                        cudaStream_t stream) {
  const int T = numTokens, E = numExperts;
  if (T < 1 || T > HS_MOE_DECODE_MAX_TOKENS || hidden < 8 || hidden % 8 != 0) return cudaErrorInvalidValue;
  if (E < 1 || E > HS_MOE_MAX_EXPERTS || topK < 1 || topK > E || topK > HS_MOE_MAX_TOPK) return cudaErrorInvalidValue;
  if (scoring != HS_MOE_SOFTMAX && scoring != HS_MOE_SIGMOID) return cudaErrorInvalidValue;
  if (numGroups < 1 || numGroups > 32 || E % numGroups != 0 || topkGroup < 1 || topkGroup > numGroups ||
      topK > topkGroup * (E / numGroups))
    return cudaErrorInvalidValue;
  if (x == nullptr || router == nullptr || logits == nullptr || topkIds == nullptr || topkWeights == nullptr ||
      plan == nullptr || sync == nullptr)
    return cudaErrorInvalidValue;
  if (!hs::aligned(x, 16) || !hs::aligned(router, 16)) return cudaErrorInvalidValue;
  using namespace hs::moe_decode;
  const RouterArgs a{static_cast<const bf16*>(x),
                     static_cast<const bf16*>(router),
                     logits,
                     plan,
                     sync,
                     hidden,
                     {nullptr, bias, topkIds, topkWeights, T, E, topK, scoring, renormalize, numGroups, topkGroup,
                      routedScalingFactor}};
  return withTokenBucketHost(T, [&](auto tag) { return launchRoute<decltype(tag)::value>(a, stream); });
}
