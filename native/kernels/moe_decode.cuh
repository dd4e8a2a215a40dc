// Device helpers of the small-batch MoE path (moe_decode.h): streaming 16-byte weight loads, the
// multi-row x multi-token bf16 dot product every kernel of the path is built on, and the plan and
// sync layouts. Internal to native/kernels.
#pragma once

#include <cstdlib>
#include <cstring>

#include "common.cuh"
#include "moe_decode.h"

namespace hs {
namespace moe_decode {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
/** Down projection: rows per warp (one routed slot of one token per warp). */
constexpr int kDownRowsPerWarp = 4;
/** Gate_up: outputs (a gate row and its up row) per warp and per CTA. */
constexpr int kGateUpOutsPerCta = kWarps;
/** Router GEMV: experts per CTA (one per warp). */
constexpr int kRouterExpertsPerCta = kWarps;

/**
 * Rows of the output per down CTA for `slots` slots a token sums (k, + 1 with a shared expert):
 * kDownRowsPerWarp x ceil(kWarps / slots), so that the CTA has about one (slot, 4 rows) item per warp.
 */
__host__ __device__ inline int downRowsPerCta(int slots) {
  return kDownRowsPerWarp * ((kWarps + slots - 1) / slots);
}

/** Entries of the plan: distinct experts any batch of T tokens with top-k can hit. */
__host__ __device__ inline int planEntries(int T, int k, int E) { return T * k < E ? T * k : E; }

/**
 * Programmatic dependent launch (PTX griddepcontrol, sm_90): waitPrevGrid() returns once the
 * kernel launched before this one on the stream has completed and its writes are visible (at
 * once when this launch was not programmatic); every thread calls it before its first read of
 * the previous kernel's outputs and before any global write. allowNextGrid() lets the next
 * kernel's CTAs start (they only prefetch weights until their own waitPrevGrid()).
 */
__device__ __forceinline__ void waitPrevGrid() {
#ifndef HS_ATTN_HOST_EMU
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allowNextGrid() {
#ifndef HS_ATTN_HOST_EMU
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

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
 * B 16-byte chunks of each of NR weight rows for one warp: lane l holds chunks c0 + 32 q + l
 * (q < B) of every row, zeros past the row's end or for a null row. Loading the first batch
 * before the token vectors are known puts the weight bytes in flight during a kernel's prologue.
 */
template <int NR, int B>
struct WeightChunks {
  uint4 w[NR][B];
  __device__ __forceinline__ void load(const bf16* const (&rows)[NR], int c0, int chunks, int lane) {
#pragma unroll
    for (int r = 0; r < NR; ++r)
#pragma unroll
      for (int q = 0; q < B; ++q) {
        const int ch = c0 + 32 * q + lane;
        w[r][q] = rows[r] != nullptr && ch < chunks ? ldStream(reinterpret_cast<const uint4*>(rows[r]) + ch)
                                                    : make_uint4(0, 0, 0, 0);
      }
  }
};

/**
 * One warp: acc[r][n] = dot(rows[r], xs[n]) over K bf16 elements for NR weight rows and the
 * first `count` (<= NT) token vectors, every lane receiving the sums; `wc` holds the first batch
 * of chunks (wc.load(rows, 0, K / 8, lane)) and is reloaded for the next ones. Lane l reads
 * 16-byte chunks l, l + 32, ... of each row, B chunks per row in flight, and accumulates its
 * chunks in ascending order; the lane sums meet in a fixed butterfly. So acc[r][n] depends on
 * rows[r] and xs[n] only, not on NT, count or the other vectors. rows[r] == nullptr: a row
 * outside the matrix (acc 0). K % 8 == 0; rows and xs 16-byte aligned.
 */
template <int NR, int NT, int B>
__device__ __forceinline__ void warpDotFrom(WeightChunks<NR, B>& wc, const bf16* const (&rows)[NR],
                                            const bf16* const* xs, int count, int K, float (&acc)[NR][NT],
                                            int lane) {
#pragma unroll
  for (int r = 0; r < NR; ++r)
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[r][n] = 0.f;
  const int chunks = K / 8;
  for (int c0 = 0; c0 < chunks; c0 += 32 * B) {
    if (c0 > 0) wc.load(rows, c0, chunks, lane);
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
        for (int r = 0; r < NR; ++r) acc[r][n] = dot8(wc.w[r][q], x, acc[r][n]);
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

/** False when HISPARSE_MOE_PDL=0: the path's kernels then launch as plain stream-ordered kernels. */
inline bool pdlEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("HISPARSE_MOE_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

/**
 * Launches kernel over grid x kThreads with smem dynamic shared bytes as a programmatic dependent of the
 * kernel before it on the stream (cudaLaunchAttributeProgrammaticStreamSerialization; a
 * programmatic edge when a graph captures it): its CTAs may start once the previous kernel's
 * have all started and called allowNextGrid(), and must waitPrevGrid() before reading its outputs.
 */
template <typename... KArgs, typename... Args>
inline cudaError_t launchDependent(void (*kernel)(KArgs...), dim3 grid, size_t smem, cudaStream_t stream,
                                   Args... args) {
#ifdef HS_ATTN_HOST_EMU
  hs_emu::launch(kernel, grid, dim3(kThreads), smem, stream, args...);
#else
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdlEnabled() ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (err != cudaSuccess) return err;
#endif
  return cudaGetLastError();
}

}  // namespace
}  // namespace moe_decode
}  // namespace hs
