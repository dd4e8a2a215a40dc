// Expert GEMVs of the small-batch MoE path (hsMoeDecodeGateUp, hsMoeDecodeDown; moe_decode.h).
//
// Grid (row blocks, plan entries [+ 1 for the shared expert]): CTA (b, a) streams row block b of
// plan entry a's expert once and applies it to every token routed there (moe_decode.cuh warpDot:
// 16-byte non-L1 weight loads, several chunks per row in flight, the token vectors through L1).
// Entries past the distinct experts hit exit at once, so the grid depends on (T, k, E) only.
// - gate_up: a warp per output i (gate row i and up row I + i, 2 x 4 KiB in flight per warp at
//   H = 2048): 8 outputs per CTA, I / 8 CTAs per expert (96 for Qwen3-30B-A3B: 768 CTAs at T = 1);
// - down: a warp per 4 rows of [H, I], 32 rows per CTA, H / 32 CTAs per expert; each CTA writes
//   its y rows, then takes a ticket for every token it served in that row block; the CTA that
//   completes a (token, row block) (k tickets, k + 1 with a shared expert) sums the token's slots
//   in slot order and writes out[t] for those 32 rows (deterministic: the order never depends on
//   which CTA finishes last) and resets the counter.
#include "moe_decode.cuh"
#include "moe.h"

namespace hs {
namespace moe_decode {
namespace {

static_assert(kDownRowsPerCta == 32, "the reduce maps a lane to a row of the block");

struct ExpertArgs {
  const bf16* in;       // gate_up: x [T, H]; down: act [S + T, Imax]
  const bf16* w;        // gate_up: [E, 2I, H]; down: [E, H, I]
  const bf16* sharedW;  // gate_up: [2Is, H]; down: [H, Is]; null without a shared expert
  const int32_t* plan;
  const float* weights;  // down: topkWeights [T, k]
  bf16* out;             // gate_up: act [S + T, Imax]; down: y [S + T, H]
  bf16* result;          // down: [T, H]
  int32_t* sync;
  int T, k, E, H, I, Is, Imax;
};

template <int MAXNT>
__global__ void __launch_bounds__(kThreads) decodeGateUpKernel(const ExpertArgs a) {
  __shared__ EntryTokens et;
  const int A = planEntries(a.T, a.k, a.E);
  if (threadIdx.x == 0) loadEntry(a.plan, blockIdx.y, a.T, a.k, A, et);
  __syncthreads();
  if (et.count == 0) return;  // no such entry (uniform across the CTA)
  const bool shared = et.expert == kSharedEntry;
  const int I = shared ? a.Is : a.I;
  const int i = blockIdx.x * kGateUpOutsPerCta + (threadIdx.x >> 5);
  if (i >= I) return;  // no later barrier
  const int lane = threadIdx.x & 31;
  const bf16* w = shared ? a.sharedW : a.w + static_cast<size_t>(et.expert) * 2 * I * a.H;
  const bf16* rows[2] = {w + static_cast<size_t>(i) * a.H, w + static_cast<size_t>(I + i) * a.H};
  const int count = et.count;
  withTokenBucket<MAXNT>(count, [&](auto tag) {
    constexpr int NT = decltype(tag)::value;
    const bf16* xs[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) xs[n] = a.in + static_cast<size_t>(et.token[min(n, count - 1)]) * a.H;
    float acc[2][NT];
    warpDot<2, NT, 8>(rows, xs, count, a.H, acc, lane);
#pragma unroll
    for (int n = 0; n < NT; ++n)
      if (n < count && lane == n)
        a.out[static_cast<size_t>(et.slot[n]) * a.Imax + i] = __float2bfloat16_rn(siluMul(acc[0][n], acc[1][n]));
  });
}

/** bf16 written by another CTA of this launch, as a float. */
__device__ __forceinline__ float loadY(const bf16* p) {
  return __uint_as_float(static_cast<uint32_t>(ldShared(reinterpret_cast<const unsigned short*>(p))) << 16);
}

/**
 * The reduce of (token t, row block rb) by the CTA that completed it: lane = row of the block,
 * out[t, row] = T(sum_j f32(w[t, j] * y[t * k + j, row]) + y[S + t, row]), hsMoeUnpermute's order.
 */
__device__ void reduceToken(const ExpertArgs& a, int t, int row) {
  const int S = a.T * a.k;
  float acc = 0.f;
  for (int j = 0; j < a.k; ++j) {
    const float wj = __ldg(a.weights + static_cast<size_t>(t) * a.k + j);
    acc = __fadd_rn(acc, __fmul_rn(loadY(a.out + static_cast<size_t>(t * a.k + j) * a.H + row), wj));
  }
  if (a.sharedW != nullptr) acc = __fadd_rn(acc, loadY(a.out + static_cast<size_t>(S + t) * a.H + row));
  a.result[static_cast<size_t>(t) * a.H + row] = __float2bfloat16_rn(acc);
}

/** Shared state of a down CTA: its entry and which of its tokens it completed. */
struct DownState {
  EntryTokens et;
  int completes[HS_MOE_DECODE_MAX_TOKENS];
};

template <int MAXNT>
__global__ void __launch_bounds__(kThreads) decodeDownKernel(const ExpertArgs a) {
  __shared__ DownState st;  // one declaration (the emulator rewrites `__shared__ Type name;`)
  EntryTokens& et = st.et;
  int* completes = st.completes;
  const int A = planEntries(a.T, a.k, a.E);
  if (threadIdx.x == 0) loadEntry(a.plan, blockIdx.y, a.T, a.k, A, et);
  __syncthreads();
  const int count = et.count;
  if (count == 0) return;  // uniform across the CTA
  const bool shared = et.expert == kSharedEntry;
  const int K = shared ? a.Is : a.I;
  const int lane = threadIdx.x & 31;
  const int r0 = blockIdx.x * kDownRowsPerCta + (threadIdx.x >> 5) * kDownRowsPerWarp;
  if (r0 < a.H) {  // warps past the last row skip to the barrier
    const bf16* w = shared ? a.sharedW : a.w + static_cast<size_t>(et.expert) * a.H * K;
    const bf16* rows[kDownRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kDownRowsPerWarp; ++r) rows[r] = r0 + r < a.H ? w + static_cast<size_t>(r0 + r) * K : nullptr;
    withTokenBucket<MAXNT>(count, [&](auto tag) {
      constexpr int NT = decltype(tag)::value;
      const bf16* xs[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) xs[n] = a.in + static_cast<size_t>(et.slot[min(n, count - 1)]) * a.Imax;
      float acc[kDownRowsPerWarp][NT];
      warpDot<kDownRowsPerWarp, NT, 4>(rows, xs, count, K, acc, lane);
#pragma unroll
      for (int r = 0; r < kDownRowsPerWarp; ++r)
#pragma unroll
        for (int n = 0; n < NT; ++n)
          if (n < count && lane == r && r0 + r < a.H)
            a.out[static_cast<size_t>(et.slot[n]) * a.H + r0 + r] = __float2bfloat16_rn(acc[r][n]);
    });
  }
  __threadfence();  // y rows reach L2 before the tickets
  __syncthreads();
  const int contributors = a.k + (a.sharedW != nullptr ? 1 : 0);
  if (threadIdx.x < count) {
    int32_t* ctr = a.sync + kSyncDownBase + static_cast<size_t>(et.token[threadIdx.x]) * downRowBlocks(a.H) + blockIdx.x;
    const bool done = atomicAdd(ctr, 1) == contributors - 1;
    if (done) *ctr = 0;  // every contributor has arrived: ready for the next layer
    completes[threadIdx.x] = done ? 1 : 0;
  }
  __syncthreads();
  __threadfence();
  const int row = blockIdx.x * kDownRowsPerCta + lane;
  if (row >= a.H) return;
  for (int n = threadIdx.x >> 5; n < count; n += kWarps)
    if (completes[n]) reduceToken(a, et.token[n], row);
}

/** @returns the arguments' common checks (cudaSuccess when the launch may go ahead). */
cudaError_t checkArgs(const ExpertArgs& a) {
  if (a.T < 1 || a.T > HS_MOE_DECODE_MAX_TOKENS || a.k < 1 || a.k > HS_MOE_MAX_TOPK || a.E < 1 || a.k > a.E)
    return cudaErrorInvalidValue;
  if (a.H < 8 || a.H % 8 != 0 || a.I < 8 || a.I % 8 != 0) return cudaErrorInvalidValue;
  if (a.sharedW != nullptr && (a.Is < 8 || a.Is % 8 != 0)) return cudaErrorInvalidValue;
  if (a.in == nullptr || a.w == nullptr || a.plan == nullptr || a.out == nullptr) return cudaErrorInvalidValue;
  if (!aligned(a.in, 16) || !aligned(a.w, 16) || (a.sharedW != nullptr && !aligned(a.sharedW, 16)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

ExpertArgs makeArgs(const void* in, const void* w, const void* sharedW, const int32_t* plan, void* out, int T, int k,
                    int E, int H, int I, int Is) {
  const int shI = sharedW != nullptr ? Is : 0;
  return ExpertArgs{static_cast<const bf16*>(in), static_cast<const bf16*>(w), static_cast<const bf16*>(sharedW),
                    plan, nullptr, static_cast<bf16*>(out), nullptr, nullptr, T, k, E, H, I, shI,
                    I > shI ? I : shI};
}

}  // namespace
}  // namespace moe_decode
}  // namespace hs

extern "C" cudaError_t hsMoeDecodeGateUp(const void* x, const void* gateUp, const void* sharedGateUp,
                                         const int32_t* plan, void* act, int numTokens, int topK, int numExperts,
                                         int hidden, int inter, int sharedInter, cudaStream_t stream) {
  using namespace hs::moe_decode;
  const ExpertArgs a =
      makeArgs(x, gateUp, sharedGateUp, plan, act, numTokens, topK, numExperts, hidden, inter, sharedInter);
  const cudaError_t err = checkArgs(a);
  if (err != cudaSuccess) return err;
  const int entries = planEntries(a.T, a.k, a.E) + (a.sharedW != nullptr ? 1 : 0);
  const dim3 grid(hs::ceilDiv(a.Imax, kGateUpOutsPerCta), entries);
  withTokenBucketHost(a.T, [&](auto tag) { decodeGateUpKernel<decltype(tag)::value><<<grid, kThreads, 0, stream>>>(a); });
  return cudaGetLastError();
}

extern "C" cudaError_t hsMoeDecodeDown(const void* act, const void* down, const void* sharedDown, const int32_t* plan,
                                       const float* topkWeights, void* y, void* out, int32_t* sync, int numTokens,
                                       int topK, int numExperts, int hidden, int inter, int sharedInter,
                                       cudaStream_t stream) {
  using namespace hs::moe_decode;
  ExpertArgs a = makeArgs(act, down, sharedDown, plan, y, numTokens, topK, numExperts, hidden, inter, sharedInter);
  a.weights = topkWeights;
  a.result = static_cast<bf16*>(out);
  a.sync = sync;
  const cudaError_t err = checkArgs(a);
  if (err != cudaSuccess) return err;
  if (topkWeights == nullptr || out == nullptr || sync == nullptr) return cudaErrorInvalidValue;
  const int entries = planEntries(a.T, a.k, a.E) + (a.sharedW != nullptr ? 1 : 0);
  const dim3 grid(downRowBlocks(a.H), entries);
  withTokenBucketHost(a.T, [&](auto tag) { decodeDownKernel<decltype(tag)::value><<<grid, kThreads, 0, stream>>>(a); });
  return cudaGetLastError();
}
