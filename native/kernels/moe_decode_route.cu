// Router GEMV + routing + plan of the small-batch MoE path (hsMoeDecodeRoute, moe_decode.h).
//
// Each warp computes one expert's router logits for every token (a 16-byte-chunk dot product,
// moe_decode.cuh warpDotFrom; the router rows are requested before the kernel waits for x, see
// launchDependent), so the router weight [E, H] streams through E / 8 CTAs. The last CTA to
// finish (a ticket in `sync`, reset by that CTA, with the __threadfence() pairs of the CUDA
// programming guide's "last block" reduction) routes every token with all of its threads and
// shared memory only (no global read-back on the critical path):
//   1. a warp per token: scores s and selection scores c (moe_route.cuh scoreRow, the group limit);
//   2. a thread per (token, expert): its rank under the selection order of moe_route.cuh
//      routeToken (selectable c > -inf first, larger c first, ties by lower id; the others after
//      them by id), counted over the row and cut off at k; rank < k places the expert at picked
//      [t, rank]: the same k ids, in the same pick order, as routeToken's sequential loop;
//   3. a thread per token: the f32 weight sum in pick order; a thread per slot: its weight
//      (hsMoeRoute's roundings, bit for bit given the same logits), its ascending-id rank, ids /
//      weights, and the expert's counts;
//   4. the plan: the distinct experts hit in ascending order (two warp scans of the counts), and
//      for each the slots s = t * k + j that use it, ascending in t (an expert occurs at most once
//      per token).
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

/**
 * Shared bytes of the last CTA: s, c [T, E] f32, slotOf [T, E] i32, group scores [kWarps, 32],
 * picked [T, k], denominators [T], counts [E] and two scans [E + 1].
 */
__host__ __device__ constexpr size_t routeSmemBytes(int T, int E, int k) {
  return sizeof(float) * (3 * static_cast<size_t>(T) * E + kWarps * 32 + static_cast<size_t>(T) * k + T) +
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

/**
 * Rank of expert e in row c (E selection scores) under routeToken's pick order, counted up to k
 * (a return value of k means "not picked"). NaN and -inf are not selectable.
 */
__device__ __forceinline__ int pickRank(const float* c, int E, int e, int k) {
  const float v = c[e];
  const bool sel = v > moe_route::kNegInf;
  int before = 0;
  for (int q = 0; q < E && before < k; ++q) {
    const float u = c[q];
    const bool us = u > moe_route::kNegInf;
    before += (sel ? us && (u > v || (u == v && q < e)) : us || q < e) ? 1 : 0;
  }
  return before;
}

/** Shared arrays of the last CTA (routeSmemBytes). */
struct RouteSmem {
  float* s;
  float* c;
  int* slotOf;
  float* grp;
  int* picked;
  float* denom;
  int* counts;
  int* entryOf;    // [E + 1]: plan entry of expert e (exclusive scan of counts > 0)
  int* firstPair;  // [E + 1]: exclusive scan of counts
  __device__ RouteSmem(unsigned char* smem, int T, int E, int k) {
    s = reinterpret_cast<float*>(smem);
    c = s + T * E;
    slotOf = reinterpret_cast<int*>(c + T * E);
    grp = reinterpret_cast<float*>(slotOf + T * E);
    picked = reinterpret_cast<int*>(grp + kWarps * 32);
    denom = reinterpret_cast<float*>(picked + T * k);
    counts = reinterpret_cast<int*>(denom + T);
    entryOf = counts + E;
    firstPair = entryOf + E + 1;
  }
};

/** Steps 1-3 of the file comment: ids, weights, slotOf and counts. */
__device__ void routeTokens(const RouterArgs& a, const RouteSmem& m) {
  const moe_route::RouteArgs& r = a.route;
  const int T = r.T, E = r.E, k = r.k;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < T * E; i += kThreads) {
    m.s[i] = ldShared(a.logits + i);
    m.slotOf[i] = -1;
  }
  for (int i = threadIdx.x; i < E; i += kThreads) m.counts[i] = 0;
  __syncthreads();
  for (int t = warp; t < T; t += kWarps) {
    float* st = m.s + static_cast<size_t>(t) * E;
    float* ct = m.c + static_cast<size_t>(t) * E;
    moe_route::scoreRow(r, st, st, lane);  // in place: each lane reads its experts before writing them
    __syncwarp();
    for (int e = lane; e < E; e += 32) ct[e] = r.bias != nullptr ? __fadd_rn(st[e], r.bias[e]) : st[e];
    __syncwarp();
    if (r.G > 1) moe_route::limitGroups(r, ct, m.grp + warp * 32, lane);
  }
  __syncthreads();
  for (int p = threadIdx.x; p < T * E; p += kThreads) {
    const int t = p / E, e = p - t * E;
    const int rank = pickRank(m.c + static_cast<size_t>(t) * E, E, e, k);
    if (rank < k) m.picked[t * k + rank] = e;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < T; t += kThreads) {
    float sum = 0.f;
    for (int j = 0; j < k; ++j) sum = __fadd_rn(sum, m.s[t * E + m.picked[t * k + j]]);
    m.denom[t] = __double2float_rn(static_cast<double>(sum) + 1e-20);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < T * k; i += kThreads) {
    const int t = i / k;
    const int* pt = m.picked + t * k;
    const int e = pt[i - t * k];
    int rank = 0;
    for (int q = 0; q < k; ++q) rank += pt[q] < e ? 1 : 0;
    float w = m.s[t * E + e];
    if (r.renormalize) w = __fdiv_rn(w, m.denom[t]);
    w = __double2float_rn(static_cast<double>(w) * r.scale);
    const int o = t * k + rank;
    r.ids[o] = e;
    r.weights[o] = w;
    m.slotOf[t * E + e] = o;
    atomicAdd(&m.counts[e], 1);
  }
  __syncthreads();
}

/** The last CTA: routes every token from the logits and writes the plan (see the file comment). */
__device__ void routeAndPlan(const RouterArgs& a, unsigned char* smem) {
  const int T = a.route.T, E = a.route.E, k = a.route.k;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const RouteSmem m(smem, T, E, k);
  routeTokens(a, m);
  if (warp == 0) warpScan(m.counts, m.entryOf, E, true, lane);
  if (warp == 1 % kWarps) warpScan(m.counts, m.firstPair, E, false, lane);
  __syncthreads();
  const int S = T * k;
  const int A = planEntries(T, k, E);
  const int used = m.entryOf[E];
  for (int e = threadIdx.x; e < E; e += kThreads) {
    if (m.counts[e] == 0) continue;  // not hit: no entry
    const int at = m.entryOf[e], first = m.firstPair[e];
    a.plan[at] = e;
    a.plan[A + at] = first;
    int n = 0;
    for (int t = 0; t < T; ++t) {
      const int slot = m.slotOf[t * E + e];
      if (slot >= 0) a.plan[2 * A + 1 + first + n++] = slot;
    }
  }
  for (int q = used + threadIdx.x; q < A; q += kThreads) {
    a.plan[q] = -1;
    a.plan[A + q] = S;
  }
  if (threadIdx.x == 0) {
    a.plan[2 * A] = S;
    a.sync[0] = 0;  // every CTA has taken its ticket
  }
}

template <int NT>
__global__ void __launch_bounds__(kThreads) decodeRouteKernel(const RouterArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int isLast;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int T = a.route.T, E = a.route.E, H = a.H;
  const int e = blockIdx.x * kRouterExpertsPerCta + warp;
  const bf16* rows[1] = {e < E ? a.router + static_cast<size_t>(e) * H : nullptr};
  WeightChunks<1, 8> wc;
  if (e < E) wc.load(rows, 0, H / 8, lane);
  waitPrevGrid();  // x comes from the kernel before
  allowNextGrid();
  if (e < E) {
    const bf16* xs[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) xs[n] = a.x + static_cast<size_t>(min(n, T - 1)) * H;
    float acc[1][NT];
    warpDotFrom<1, NT, 8>(wc, rows, xs, T, H, acc, lane);
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
  constexpr int kMaxSmem =
      static_cast<int>(routeSmemBytes(HS_MOE_DECODE_MAX_TOKENS, HS_MOE_MAX_EXPERTS, HS_MOE_MAX_TOPK));
  const cudaError_t err = hs_attn::ensureSmemLimit(decodeRouteKernel<NT>, kMaxSmem, smemSet);
  if (err != cudaSuccess) return err;
  const int blocks = ceilDiv(a.route.E, kRouterExpertsPerCta);
  const size_t smem = routeSmemBytes(a.route.T, a.route.E, a.route.k);
  return launchDependent(decodeRouteKernel<NT>, dim3(blocks), smem, stream, a);
}

}  // namespace
}  // namespace moe_decode
}  // namespace hs

extern "C" size_t hsMoeDecodeSyncInts(int hidden) { return hidden < 1 ? 0 : 1; }

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
