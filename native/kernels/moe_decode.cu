// Expert GEMVs of the small-batch MoE path (hsMoeDecodeGateUp, hsMoeDecodeDown; moe_decode.h).
//
// Both kernels are programmatic dependents (moe_decode.cuh launchDependent): their CTAs start
// while the kernel before them drains, put their first weight bytes in flight (moe_decode.cuh
// WeightChunks: 16-byte non-L1 loads) and only then wait for that kernel's outputs.
// - gate_up, grid (I / 8 output blocks, plan entries [+ 1 for the shared expert]): CTA (b, a)
//   streams output block b of plan entry a's expert once and applies it to every token routed
//   there (the token vectors through L1); a warp per output i (gate row i and up row I + i, 2 x
//   4 KiB in flight per warp at H = 2048): 96 CTAs per expert for Qwen3-30B-A3B (768 at T = 1).
//   Entries past the distinct experts hit exit at once, so the grid depends on (T, k, E) only.
// - down, grid (H / rows, T): CTA (b, t) computes rows [b * rows, (b + 1) * rows) of every slot
//   of token t (a warp per (slot, 4 rows): 4 x 1.5 KiB in flight at I = 768; rows =
//   downRowsPerCta(k [+ 1])), rounds each y to bf16 in shared memory and sums the slots in slot
//   order, the shared expert last: out[t] is written by one CTA, with no y buffer, ticket or
//   atomic, and depends on token t's inputs only. An expert hit by several tokens is read once
//   per token (at T <= 4, the default range of the path, S = T * k slots hit ~S distinct experts).
#include "moe_decode.cuh"
#include "moe.h"

namespace hs {
namespace moe_decode {
namespace {

struct ExpertArgs {
  const bf16* in;       // gate_up: x [T, H]; down: act [S + T, Imax]
  const bf16* w;        // gate_up: [E, 2I, H]; down: [E, H, I]
  const bf16* sharedW;  // gate_up: [2Is, H]; down: [H, Is]; null without a shared expert
  const int32_t* plan;  // gate_up
  const int32_t* ids;   // down: topkIds [T, k]
  const float* weights;  // down: topkWeights [T, k]
  bf16* out;             // gate_up: act [S + T, Imax]; down: [T, H]
  int T, k, E, H, I, Is, Imax;
};

/** CTAs per SM the expert kernels are compiled for (80 registers: a few bytes of spill) at T = 1. */
constexpr int kExpertCtasPerSm = 3;

template <int MAXNT>
__global__ void __launch_bounds__(kThreads, MAXNT == 1 ? kExpertCtasPerSm : 1) decodeGateUpKernel(const ExpertArgs a) {
  __shared__ EntryTokens et;
  const int A = planEntries(a.T, a.k, a.E);
  waitPrevGrid();  // the route kernel wrote the plan
  allowNextGrid();
  // The entry's expert first (one read by every thread), so that the weights are in flight while
  // thread 0 reads the entry's tokens.
  const int idx = blockIdx.y;
  const bool shared = idx == A;
  const int ex = shared ? 0 : __ldg(a.plan + idx);
  if (ex < 0 || ex >= a.E) return;  // no such entry (uniform across the CTA)
  const int I = shared ? a.Is : a.I;
  const int i = blockIdx.x * kGateUpOutsPerCta + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  const bf16* w = shared ? a.sharedW : a.w + static_cast<size_t>(ex) * 2 * I * a.H;
  const bf16* rows[2] = {i < I ? w + static_cast<size_t>(i) * a.H : nullptr,
                         i < I ? w + static_cast<size_t>(I + i) * a.H : nullptr};
  WeightChunks<2, 8> wc;
  wc.load(rows, 0, a.H / 8, lane);
  if (threadIdx.x == 0) loadEntry(a.plan, idx, a.T, a.k, A, et);
  __syncthreads();
  if (et.count == 0 || i >= I) return;  // no later barrier
  const int count = et.count;
  withTokenBucket<MAXNT>(count, [&](auto tag) {
    constexpr int NT = decltype(tag)::value;
    const bf16* xs[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) xs[n] = a.in + static_cast<size_t>(et.token[min(n, count - 1)]) * a.H;
    float acc[2][NT];
    warpDotFrom<2, NT, 8>(wc, rows, xs, count, a.H, acc, lane);
#pragma unroll
    for (int n = 0; n < NT; ++n)
      if (n < count && lane == n)
        a.out[static_cast<size_t>(et.slot[n]) * a.Imax + i] = __float2bfloat16_rn(siluMul(acc[0][n], acc[1][n]));
  });
}

/** Chunks per row and lane in flight in the down kernel (I = 768: 96 chunks, one batch). */
constexpr int kDownChunks = 3;
/** Largest rows per down CTA (downRowsPerCta(1)). */
constexpr int kDownMaxRows = kDownRowsPerWarp * kWarps;

/** Shared state of a down CTA: the token's routing weights and the bf16-rounded y of each slot. */
struct DownState {
  float weight[HS_MOE_MAX_TOPK];
  float y[(HS_MOE_MAX_TOPK + 1) * kDownMaxRows];  // [slot][row of the block]
};

/** Where item `it` of a down CTA reads: slot j's expert rows r0 .. r0 + 3 (null past H). */
struct DownItem {
  int j, g;
  const bf16* rows[kDownRowsPerWarp];
  int K;
};

__device__ __forceinline__ DownItem downItem(const ExpertArgs& a, int t, int it, int groups, int row0) {
  DownItem d;
  d.j = it / groups;
  d.g = it - d.j * groups;
  const bool shared = d.j == a.k;
  d.K = shared ? a.Is : a.I;
  const int e = shared ? 0 : max(0, min(a.E - 1, __ldg(a.ids + static_cast<size_t>(t) * a.k + d.j)));
  const bf16* w = shared ? a.sharedW : a.w + static_cast<size_t>(e) * a.H * d.K;
  const int r0 = row0 + d.g * kDownRowsPerWarp;
#pragma unroll
  for (int r = 0; r < kDownRowsPerWarp; ++r) d.rows[r] = r0 + r < a.H ? w + static_cast<size_t>(r0 + r) * d.K : nullptr;
  return d;
}

__global__ void __launch_bounds__(kThreads, kExpertCtasPerSm) decodeDownKernel(const ExpertArgs a) {
  __shared__ DownState st;  // one declaration (the emulator rewrites `__shared__ Type name;`)
  const int t = blockIdx.y;
  const int slots = a.k + (a.sharedW != nullptr ? 1 : 0);
  const int rowsPer = downRowsPerCta(slots);
  const int groups = rowsPer / kDownRowsPerWarp;
  const int items = slots * groups;
  const int row0 = blockIdx.x * rowsPer;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int S = a.T * a.k;
  // Before the wait: the routing (two kernels back, complete once gate_up's CTAs have started)
  // and the first item's weights.
  if (threadIdx.x < a.k) st.weight[threadIdx.x] = __ldg(a.weights + static_cast<size_t>(t) * a.k + threadIdx.x);
  DownItem d = downItem(a, t, warp < items ? warp : 0, groups, row0);
  WeightChunks<kDownRowsPerWarp, kDownChunks> wc;
  if (warp < items) wc.load(d.rows, 0, d.K / 8, lane);
  waitPrevGrid();  // gate_up wrote act
  allowNextGrid();
  for (int it = warp; it < items; it += kWarps) {
    if (it != warp) {
      d = downItem(a, t, it, groups, row0);
      wc.load(d.rows, 0, d.K / 8, lane);
    }
    const size_t slot = d.j == a.k ? static_cast<size_t>(S + t) : static_cast<size_t>(t) * a.k + d.j;
    const bf16* xs[1] = {a.in + slot * a.Imax};
    float acc[kDownRowsPerWarp][1];
    warpDotFrom<kDownRowsPerWarp, 1, kDownChunks>(wc, d.rows, xs, 1, d.K, acc, lane);
#pragma unroll
    for (int r = 0; r < kDownRowsPerWarp; ++r)
      if (lane == r) st.y[d.j * rowsPer + d.g * kDownRowsPerWarp + r] = bf16Round(acc[r][0]);
  }
  __syncthreads();
  // out[t, row] = T(sum_j f32(w[t, j] * y[t * k + j, row]) + y[S + t, row]): hsMoeUnpermute's order.
  const int r = threadIdx.x;
  if (r >= rowsPer || row0 + r >= a.H) return;
  float acc = 0.f;
  for (int j = 0; j < a.k; ++j) acc = __fadd_rn(acc, __fmul_rn(st.y[j * rowsPer + r], st.weight[j]));
  if (a.sharedW != nullptr) acc = __fadd_rn(acc, st.y[a.k * rowsPer + r]);
  a.out[static_cast<size_t>(t) * a.H + row0 + r] = __float2bfloat16_rn(acc);
}

/** @returns the arguments' common checks (cudaSuccess when the launch may go ahead). */
cudaError_t checkArgs(const ExpertArgs& a) {
  if (a.T < 1 || a.T > HS_MOE_DECODE_MAX_TOKENS || a.k < 1 || a.k > HS_MOE_MAX_TOPK || a.E < 1 || a.k > a.E)
    return cudaErrorInvalidValue;
  if (a.H < 8 || a.H % 8 != 0 || a.I < 8 || a.I % 8 != 0) return cudaErrorInvalidValue;
  if (a.sharedW != nullptr && (a.Is < 8 || a.Is % 8 != 0)) return cudaErrorInvalidValue;
  if (a.in == nullptr || a.w == nullptr || a.out == nullptr) return cudaErrorInvalidValue;
  if (!aligned(a.in, 16) || !aligned(a.w, 16) || (a.sharedW != nullptr && !aligned(a.sharedW, 16)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

ExpertArgs makeArgs(const void* in, const void* w, const void* sharedW, void* out, int T, int k, int E, int H, int I,
                    int Is) {
  const int shI = sharedW != nullptr ? Is : 0;
  return ExpertArgs{static_cast<const bf16*>(in),
                    static_cast<const bf16*>(w),
                    static_cast<const bf16*>(sharedW),
                    nullptr,
                    nullptr,
                    nullptr,
                    static_cast<bf16*>(out),
                    T,
                    k,
                    E,
                    H,
                    I,
                    shI,
                    I > shI ? I : shI};
}

}  // namespace
}  // namespace moe_decode
}  // namespace hs

extern "C" cudaError_t hsMoeDecodeGateUp(const void* x, const void* gateUp, const void* sharedGateUp,
                                         const int32_t* plan, void* act, int numTokens, int topK, int numExperts,
                                         int hidden, int inter, int sharedInter, cudaStream_t stream) {
  using namespace hs::moe_decode;
  ExpertArgs a = makeArgs(x, gateUp, sharedGateUp, act, numTokens, topK, numExperts, hidden, inter, sharedInter);
  a.plan = plan;
  const cudaError_t err = checkArgs(a);
  if (err != cudaSuccess) return err;
  if (plan == nullptr) return cudaErrorInvalidValue;
  const int entries = planEntries(a.T, a.k, a.E) + (a.sharedW != nullptr ? 1 : 0);
  const dim3 grid(hs::ceilDiv(a.Imax, kGateUpOutsPerCta), entries);
  return withTokenBucketHost(
      a.T, [&](auto tag) { return launchDependent(decodeGateUpKernel<decltype(tag)::value>, grid, 0, stream, a); });
}

extern "C" cudaError_t hsMoeDecodeDown(const void* act, const void* down, const void* sharedDown,
                                       const int32_t* topkIds, const float* topkWeights, void* out, int numTokens,
                                       int topK, int numExperts, int hidden, int inter, int sharedInter,
                                       cudaStream_t stream) {
  using namespace hs::moe_decode;
  ExpertArgs a = makeArgs(act, down, sharedDown, out, numTokens, topK, numExperts, hidden, inter, sharedInter);
  a.ids = topkIds;
  a.weights = topkWeights;
  const cudaError_t err = checkArgs(a);
  if (err != cudaSuccess) return err;
  if (topkIds == nullptr || topkWeights == nullptr) return cudaErrorInvalidValue;
  const int rows = downRowsPerCta(a.k + (a.sharedW != nullptr ? 1 : 0));
  const dim3 grid(hs::ceilDiv(a.H, rows), a.T);
  return launchDependent(decodeDownKernel, grid, 0, stream, a);
}
