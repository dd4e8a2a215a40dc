// Launchers of the small-batch (decode) path of a MoE layer, T <= HS_MOE_DECODE_MAX_TOKENS tokens:
// three memory-bound kernels in place of router linear + route + permute + two grouped GEMMs +
// un-permute (moe.h), for the batch sizes where those six launches and their bookkeeping cost more
// than the expert weights take to stream. Same conventions as moe.h: device pointers, row-major,
// bf16 weights and activations, asynchronous on `stream`, grids that depend on (T, k, E) and the
// model dims only (never on device data), so the three kernels replay inside a CUDA graph. Each is
// launched as a programmatic dependent of the kernel before it (PDL: it starts while that kernel
// drains and streams its first weights before waiting for its inputs; HISPARSE_MOE_PDL=0 turns
// this off).
//
// Data flow (x [T, H] the layer's normed input, S = T * k routed slots, slot s = t * k + j; a
// shared expert, when given, is slot S + t of token t):
//   hsMoeDecodeRoute:  logits = x @ router^T (f32, many CTAs), then the last CTA to finish routes
//                      every token (moe_route.cuh: the rule of hsMoeRoute) and writes the plan:
//                      the distinct experts hit, each with the slots that use it;
//   hsMoeDecodeGateUp: act[s] = silu_and_mul(gate_up[e] @ x[t]) for every slot, one weight read per
//                      distinct expert (all its tokens at once), shared expert included;
//   hsMoeDecodeDown:   out[t] = sum_j w[t, j] * bf16(down[e] @ act[t * k + j]) (+ the shared slot)
//                      in slot order, one CTA per (row block, token): deterministic, nothing is
//                      un-permuted and no y buffer or counter is used.
// Roundings are those of the grouped path (moe_gemm.cu + hsMoeUnpermute): gate and up products
// rounded to bf16, silu rounded, their product rounded; y rounded to bf16; the weighted sum in f32
// (each product and partial sum rounded), the shared expert added last, one rounding. The dot
// products accumulate in f32 in a fixed order per element (lane-strided 16-byte chunks, then a
// butterfly over the warp) that does not depend on T or on which tokens share an expert, so a
// token's result is the same in any batch this path runs (batch invariance); it is not bitwise the
// tensor-core grouped GEMM's (a different summation order: bf16 tolerance).
//
// `sync` is a persistent, zero-initialised i32 buffer of hsMoeDecodeSyncInts(H) (one per stream:
// layers run one after another); the route kernel leaves it zero again. Workspace buffers per
// layer: logits f32 [T, E], topkIds i32 [T, k], topkWeights f32 [T, k], plan i32
// [hsMoeDecodePlanInts], act bf16 [S + T, max(I, Is)], out bf16 [T, H].
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest T of the small-batch path. */
#define HS_MOE_DECODE_MAX_TOKENS 16

/** i32 elements of the persistent sync buffer for hidden size H (the route ticket; 0 when H < 1). */
size_t hsMoeDecodeSyncInts(int hidden);

/**
 * i32 elements of the plan for (T, k, E): with A = min(E, T * k) entries, plan[0, A) = expert of
 * entry a (ascending; -1 past the last), plan[A, 2A + 1) = first pair of entry a, then the T * k
 * pairs (slot ids, ascending within an entry).
 */
int hsMoeDecodePlanInts(int numTokens, int topK, int numExperts);

/**
 * Router GEMV + routing + plan. x: bf16 [T, H]; router: bf16 [E, H]; bias: f32 [E] or null;
 * logits: f32 [T, E] (written, also for tests); topkIds i32 [T, k] / topkWeights f32 [T, k]: as
 * hsMoeRoute writes them (ids ascending per row); plan: i32 [hsMoeDecodePlanInts]. Routing
 * arguments and their limits as hsMoeRoute's; 1 <= T <= HS_MOE_DECODE_MAX_TOKENS, H % 8 == 0,
 * 16-byte aligned x and router.
 */
cudaError_t hsMoeDecodeRoute(const void* x, const void* router, const float* bias, float* logits, int32_t* topkIds,
                             float* topkWeights, int32_t* plan, int32_t* sync, int numTokens, int hidden,
                             int numExperts, int topK, int scoring, int renormalize, int numGroups, int topkGroup,
                             double routedScalingFactor, cudaStream_t stream);

/**
 * act[s] = bf16(T(T(silu(T(g))) * T(u))) with g, u = rows i and I + i of gate_up[e] @ x[t], for
 * every routed slot s = (t, j) of the plan (e = topkIds[t, j]) and, when sharedGateUp is not
 * null, the shared expert's slot S + t of every token (intermediate size sharedInter).
 * x: bf16 [T, H]; gateUp: bf16 [E, 2I, H] (gate rows first); sharedGateUp: bf16 [2Is, H] or null;
 * act: bf16 [S + T, max(I, Is)]. Requires H, I (and Is) % 8 == 0 and 16-byte aligned pointers.
 */
cudaError_t hsMoeDecodeGateUp(const void* x, const void* gateUp, const void* sharedGateUp, const int32_t* plan,
                              void* act, int numTokens, int topK, int numExperts, int hidden, int inter,
                              int sharedInter, cudaStream_t stream);

/**
 * out[t] = bf16(sum_j f32(topkWeights[t, j] * bf16(down[e] @ act[t * k + j])) + bf16(sharedDown @
 * act[S + t])) in slot order, e = topkIds[t, j] (clamped to [0, E)); the shared term only with
 * sharedDown. act: bf16 [S + T, max(I, Is)]; down: bf16 [E, H, I]; sharedDown: bf16 [H, Is] or
 * null; topkIds i32 / topkWeights f32 [T, k] (as hsMoeDecodeRoute writes them); out: bf16 [T, H].
 */
cudaError_t hsMoeDecodeDown(const void* act, const void* down, const void* sharedDown, const int32_t* topkIds,
                            const float* topkWeights, void* out, int numTokens, int topK, int numExperts, int hidden,
                            int inter, int sharedInter, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
