// Device helpers of the small-batch MoE path (moe_decode.h): streaming 16-byte weight loads, the
// multi-row x multi-token bf16 dot product every kernel of the path is built on, and the plan and
// sync layouts. Internal to native/kernels.
#pragma once

#include "common.cuh"
#include "moe_decode.h"

namespace hs {
namespace moe_decode {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
/** sync[0]: the route ticket; the down-reduce counters start here (own 128-byte line). */
constexpr int kSyncDownBase = 32;
/** Down projection: rows per warp and per CTA (a CTA = one row block of one plan entry). */
constexpr int kDownRowsPerWarp = 4;
constexpr int kDownRowsPerCta = kWarps * kDownRowsPerWarp;
/** Gate_up: outputs (a gate row and its up row) per warp and per CTA. */
constexpr int kGateUpOutsPerCta = kWarps;
/** Router GEMV: experts per CTA (one per warp). */
constexpr int kRouterExpertsPerCta = kWarps;

/** Down-reduce row blocks for hidden size H. */
__host__ __device__ inline int downRowBlocks(int H) { return (H + kDownRowsPerCta - 1) / kDownRowsPerCta; }

/** Entries of the plan: distinct experts any batch of T tokens with top-k can hit. */
__host__ __device__ inline int planEntries(int T, int k, int E) { return T * k < E ? T * k : E; }

/** 16 bytes of a weight stream, read once: no L1 allocation (the token vectors keep L1). */
__device__ __forceinline__ uint4 ldStream(const uint4* p) {
#ifdef HS_ATTN_HOST_EMU
  return *p;
#else
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

/** A value written by another CTA of the same launch (L2, never a stale L1 line). */
template <typename T>
__device__ __forceinline__ T ldShared(const T* p) {
#ifdef HS_ATTN_HOST_EMU
  return *p;
#else
  return __ldcg(p);
#endif
}

__device__ __forceinline__ float bf16Lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16Hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

/** acc + sum_i w[i] * x[i] over 8 bf16 pairs, fused multiply-adds in element order. */
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  acc = fmaf(bf16Lo(w.x), bf16Lo(x.x), acc);
  acc = fmaf(bf16Hi(w.x), bf16Hi(x.x), acc);
  acc = fmaf(bf16Lo(w.y), bf16Lo(x.y), acc);
  acc = fmaf(bf16Hi(w.y), bf16Hi(x.y), acc);
  acc = fmaf(bf16Lo(w.z), bf16Lo(x.z), acc);
  acc = fmaf(bf16Hi(w.z), bf16Hi(x.z), acc);
  acc = fmaf(bf16Lo(w.w), bf16Lo(x.w), acc);
  acc = fmaf(bf16Hi(w.w), bf16Hi(x.w), acc);
  return acc;
}

/**
 * One warp: acc[r][n] = dot(rows[r], xs[n]) over K bf16 elements for NR weight rows and the
 * first `count` (<= NT) token vectors, every lane receiving the sums. Lane l reads 16-byte chunks
 * l, l + 32, ... of each row, B chunks per row in flight, and accumulates its chunks in ascending
 * order; the lane sums meet in a fixed butterfly. So acc[r][n] depends on rows[r] and xs[n] only,
 * not on NT, count or the other vectors. rows[r] == nullptr: a row outside the matrix (acc 0).
 * K % 8 == 0; rows and xs 16-byte aligned.
 */
template <int NR, int NT, int B>
__device__ __forceinline__ void warpDot(const bf16* const (&rows)[NR], const bf16* const* xs, int count, int K,
                                        float (&acc)[NR][NT], int lane) {
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[r][n] = 0.f;
  const int chunks = K / 8;
  for (int c0 = 0; c0 < chunks; c0 += 32 * B) {
    uint4 w[NR][B];
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int q = 0; q < B; ++q) {
        const int ch = c0 + 32 * q + lane;
        w[r][q] = rows[r] != nullptr && ch < chunks ? ldStream(reinterpret_cast<const uint4*>(rows[r]) + ch)
                                                    : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      if (n >= count) break;  // uniform across the warp
      const uint4* xv = reinterpret_cast<const uint4*>(xs[n]);
#pragma unroll
      for (int q = 0; q < B; ++q) {
        const int ch = c0 + 32 * q + lane;
        if (ch >= chunks) break;  // q ascending: the rest of this lane's chunks are past the end too
        const uint4 x = __ldg(xv + ch);
#pragma unroll
        for (int r = 0; r < NR; ++r) acc[r][n] = dot8(w[r][q], x, acc[r][n]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[r][n] = warpReduceSum(acc[r][n]);
}

/** A compile-time token count (the accumulator rows of warpDot). */
template <int N>
struct TokenBucket {
  static constexpr int value = N;
};

/**
 * Calls f(TokenBucket<NT>{}) with NT the smallest of 1, 2, 4, 8, 16 >= count (count <= MAXNT).
 * Kernels are instantiated per MAXNT (the bucket of T, chosen at launch), so that a batch of one
 * token does not pay the registers of sixteen.
 */
template <int MAXNT, typename F>
__device__ __forceinline__ void withTokenBucket(int count, F&& f) {
  if constexpr (MAXNT == 1) {
    f(TokenBucket<1>{});
  } else {
    if (count <= MAXNT / 2)
      withTokenBucket<MAXNT / 2>(count, f);
    else
      f(TokenBucket<MAXNT>{});
  }
}

/** Host: calls f(TokenBucket<NT>{}) with NT the smallest of 1, 2, 4, 8, 16 >= T (T <= 16). */
template <typename F>
inline auto withTokenBucketHost(int T, F&& f) {
  if (T <= 1) return f(TokenBucket<1>{});
  if (T <= 2) return f(TokenBucket<2>{});
  if (T <= 4) return f(TokenBucket<4>{});
  if (T <= 8) return f(TokenBucket<8>{});
  return f(TokenBucket<16>{});
}

/** bf16 value of an f32, as a float. */
__device__ __forceinline__ float bf16Round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/** hsSiluAndMul's roundings on the gate and up sums: T(T(silu(T(g))) * T(u)), as a float. */
__device__ __forceinline__ float siluMul(float g, float u) {
  const float gf = bf16Round(g);
  const float silu = bf16Round(gf / (1.f + expf(-gf)));
  return silu * bf16Round(u);
}

/** Expert id of the shared-expert entry (EntryTokens.expert). */
constexpr int kSharedEntry = -2;

/** Shared state of a plan entry's CTA: its expert, its tokens and their slots. */
struct EntryTokens {
  int expert;  // -1: no such entry (past the last distinct expert); kSharedEntry: the shared expert
  int count;
  int token[HS_MOE_DECODE_MAX_TOKENS];
  int slot[HS_MOE_DECODE_MAX_TOKENS];
};

/**
 * Thread 0 fills `et` for plan entry `idx` (idx == A = planEntries(T, k, E): the shared expert,
 * every token, slots S + t); the caller syncs. Values read from the plan are clamped so that a
 * corrupt plan cannot index outside the buffers.
 */
__device__ void loadEntry(const int32_t* plan, int idx, int T, int k, int A, EntryTokens& et) {
  const int S = T * k;
  if (idx == A) {
    et.expert = kSharedEntry;
    et.count = T;
    for (int n = 0; n < T; ++n) {
      et.token[n] = n;
      et.slot[n] = S + n;
    }
    return;
  }
  et.expert = __ldg(plan + idx);
  const int b = max(0, min(S, __ldg(plan + A + idx)));
  const int end = max(b, min(S, __ldg(plan + A + idx + 1)));
  et.count = et.expert < 0 ? 0 : min(end - b, T);
  for (int n = 0; n < et.count; ++n) {
    const int s = max(0, min(S - 1, __ldg(plan + 2 * A + 1 + b + n)));
    et.slot[n] = s;
    et.token[n] = s / k;
  }
}

}  // namespace
}  // namespace moe_decode
}  // namespace hs
