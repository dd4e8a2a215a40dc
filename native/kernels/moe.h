// Launchers of the mixture-of-experts kernels (Backend.moe, src/backends/backend.ts: route,
// permute, groupedLinear, unpermute; vLLM fused_moe's stages). Same conventions as kernels.h:
// device pointers, row-major shapes, asynchronous on `stream`, cudaErrorInvalidValue without a
// launch for unsupported sizes, and grids that depend only on the sizes passed in (T, k, E and
// the model dims), never on device data: every count lives in device memory, so a MoE layer
// needs no host round trip and replays inside a CUDA graph.
//
// Data flow of one MoE layer (x [T, H] its normed input, P = T * k rows after permutation):
//   logits [T, E] f32 -> hsMoeRoute -> topkIds i32 [T, k], topkWeights f32 [T, k]
//   x, topkIds -> hsMoePermute -> hidden [P, H] (grouped by expert), expertOffsets i32 [E + 1],
//                                 slotToRow i32 [T, k]
//   hidden -> hsMoeGroupedGemm(gate_up [E, 2I, H]) -> [P, 2I] (or, fused, silu_and_mul -> [P, I])
//          -> hsMoeGroupedGemm(down [E, H, I]) -> y [P, H]
//   y -> hsMoeUnpermute (weights, + shared expert) -> out [T, H]
// Segments are not padded (P = T * k, as on the CPU backend): the grouped GEMM finds each CTA's
// (expert, row tile) from expertOffsets itself (see hsMoeGroupedGemm), which costs the same grid
// bound as padding every segment to the tile would.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest expert count the routing kernel handles (its per-warp shared arrays). */
#define HS_MOE_MAX_EXPERTS 512
/** Largest top-k. */
#define HS_MOE_MAX_TOPK 32

/** Scoring functions of hsMoeRoute. */
enum HsMoeScoring { HS_MOE_SOFTMAX = 0, HS_MOE_SIGMOID = 1 };

/**
 * Routing (Backend.moe.route), one warp per token, with the CPU oracle's rounding
 * (src/backends/cpu/kernels/moe.ts): s = softmax(logits) in float64 (each p rounded to f32) or
 * s = f32(1 / (1 + exp(-l))) in float64; c = f32(s + bias); numGroups > 1: a group scores the f32
 * sum of its two largest c and experts outside the topkGroup best groups get c = -inf; the k
 * largest c (ties: lower id first; NaN and -inf never selected), ids sorted ascending; weights
 * w = s (f32 running sum in pick order, denominator f32(sum + 1e-20) in float64), renormalised
 * when `renormalize`, then f32(w * routedScalingFactor) in float64.
 * Where the CPU backend throws (a row with fewer than k selectable experts, e.g. NaN logits of a
 * padded row), the kernel fills the remaining slots with the lowest unpicked ids, so that every
 * id stays valid and distinct.
 * logits: f32 [numTokens, numExperts]; bias: f32 [numExperts] or null; topkIds: i32
 * [numTokens, topK]; topkWeights: f32 [numTokens, topK]. Requires 1 <= topK <= min(E, 32),
 * E <= HS_MOE_MAX_EXPERTS, numGroups divides E (numGroups <= 32), 1 <= topkGroup <= numGroups
 * and topK <= topkGroup * E / numGroups.
 */
cudaError_t hsMoeRoute(const float* logits, const float* bias, int32_t* topkIds, float* topkWeights, int numTokens,
                       int numExperts, int topK, int scoring, int renormalize, int numGroups, int topkGroup,
                       double routedScalingFactor, cudaStream_t stream);

/** Device scratch bytes hsMoePermute needs for (numTokens, topK, numExperts) (0 for small batches). */
size_t hsMoePermuteScratchBytes(int numTokens, int topK, int numExperts);

/**
 * Permutation by expert (Backend.moe.permute), a stable counting sort of the T*k slots: slot
 * (t, j) of expert e = topkIds[t, j] goes to row expertOffsets[e] + (number of slots before it in
 * (t, j) order with the same expert), and hidden[row] = x[t]. Slots whose id is outside
 * [0, numExperts) are left out of every segment and get slotToRow -1 (the CPU backend throws).
 * Up to 4096 slots one kernel does it all (each CTA histograms every id, in shared memory);
 * beyond, three kernels (per-block counts, one scan CTA, scatter) use `scratch`
 * (hsMoePermuteScratchBytes).
 * x: [numTokens, rowBytes] (any dtype, rowBytes a multiple of 4); hidden: [numTokens * topK,
 * rowBytes]; expertOffsets: i32 [numExperts + 1]; slotToRow: i32 [numTokens, topK].
 */
cudaError_t hsMoePermute(const void* x, const int32_t* topkIds, void* hidden, int32_t* expertOffsets,
                         int32_t* slotToRow, void* scratch, size_t scratchBytes, int numTokens, size_t rowBytes,
                         int topK, int numExperts, cudaStream_t stream);

/**
 * Grouped GEMM (Backend.moe.groupedLinear): out[r] = x[r] @ w[e]^T for every row r of expert e's
 * segment [offsets[e], offsets[e+1]), bf16 operands on tensor cores (mma.sync m16n8k16, fp32
 * accumulation, one rounding to bf16), one launch for every expert. Rows outside every segment
 * are not written.
 * Grid: (ceil(N / BN), maxTiles) with maxTiles = floor((numRows + min(E, numRows) * (BM - 1)) /
 * BM), which bounds the number of BM-row tiles of any segmentation of numRows rows into E
 * segments. Each CTA scans offsets (E + 1 ints) to find the tile it owns (expert, first row) and
 * exits when its tile index is past the last one, so the grid depends on (numRows, E, N) only.
 * The tile shape follows the mean rows per expert: 16-row tiles (decode: each active expert's
 * weights are streamed once by ceil(N / 64) CTAs), 64 or 128 rows (prefill). Every config adds
 * the k16 products of an output element in the same order, so the result of a row does not
 * depend on the batch (batch invariance).
 * gateUpSilu: w is gate_up [E, 2I, K] (gate rows first, N = 2I) and out receives
 * silu_and_mul of the product, [numRows, I], with hsSiluAndMul's roundings (bf16 product, then
 * T(T(silu(g)) * u)): bitwise the unfused pair.
 * x: bf16 [numRows, K]; w: bf16 [E, N, K]; out: bf16 [numRows, N] (or [numRows, N / 2]);
 * offsets: i32 [E + 1], non-decreasing within [0, numRows]. Requires K % 8 == 0, N % 8 == 0
 * (N % 16 == 0 with gateUpSilu) and 16-byte aligned pointers.
 */
cudaError_t hsMoeGroupedGemm(const void* x, const void* w, void* out, const int32_t* offsets, int numRows,
                             int numExperts, int N, int K, int gateUpSilu, cudaStream_t stream);

/** Tile configs of the grouped GEMM (moe_gemm.cu): 16, 64 or 128 rows per tile; AUTO picks by rows per expert. */
enum HsMoeGemmConfig { HS_MOE_GEMM_AUTO = -1, HS_MOE_GEMM_SMALL = 0, HS_MOE_GEMM_MEDIUM = 1, HS_MOE_GEMM_LARGE = 2 };

/** The config hsMoeGroupedGemm uses for numRows rows over numExperts experts (mean rows per active expert). */
int hsMoeGemmAutoConfig(int numRows, int numExperts);

/** hsMoeGroupedGemm with an explicit tile config (tests and benchmarks compare them). */
cudaError_t hsMoeGroupedGemmWith(int config, const void* x, const void* w, void* out, const int32_t* offsets,
                                 int numRows, int numExperts, int N, int K, int gateUpSilu, cudaStream_t stream);

/**
 * Weighted un-permute (Backend.moe.unpermute): out[t] = round(sum_j f32(w[t, j] * y[slotToRow[t,
 * j]]) + shared[t]), the sum in slot order with each product and partial sum rounded to f32 (the
 * CPU oracle's order), rounded once to the output dtype. Slots with a row outside [0, numRows)
 * add nothing. y: [numRows, hidden]; slotToRow: i32 [numTokens, topK]; topkWeights: f32
 * [numTokens, topK]; shared: [numTokens, hidden] or null; out: [numTokens, hidden]; y, shared and
 * out of `dtype` (f32 | bf16 | f16).
 */
cudaError_t hsMoeUnpermute(const void* y, const int32_t* slotToRow, const float* topkWeights, const void* shared,
                           void* out, int numTokens, int topK, int hidden, int numRows, int dtype,
                           cudaStream_t stream);

#ifdef __cplusplus
}
#endif
