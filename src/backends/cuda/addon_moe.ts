/**
 * Addon typings, mixture-of-experts area: the launchers of native/kernels/moe.h (native/addon/moe.cc).
 * Part of the addon's typed surface: import these through addon.ts, the only loader (DESIGN.md §1).
 * Argument order = the C launcher's, stream first; optional pointers are 0 for null.
 */

/** Scoring codes of moeRoute (HsMoeScoring). */
export const MOE_SCORING = { softmax: 0, sigmoid: 1 } as const;

/** Limits of the routing kernel (HS_MOE_MAX_EXPERTS, HS_MOE_MAX_TOPK, numGroups <= 32). */
export const MOE_LIMITS = { maxExperts: 512, maxTopK: 32, maxGroups: 32 } as const;

/** Largest T of the small-batch path (HS_MOE_DECODE_MAX_TOKENS, native/kernels/moe_decode.h). */
export const MOE_DECODE_MAX_TOKENS = 16;

/** The MoE part of the module object (HisparseNative in addon.ts). */
export interface NativeMoeApi {
  /**
   * Routing: ids i32 [T, k] (ascending per row), weights f32 [T, k] from logits f32 [T, E]
   * (hsMoeRoute). bias: f32 [E] or 0.
   */
  moeRoute(
    stream: number,
    logits: number,
    bias: number,
    topkIds: number,
    topkWeights: number,
    numTokens: number,
    numExperts: number,
    topK: number,
    scoring: number,
    renormalize: boolean,
    numGroups: number,
    topkGroup: number,
    routedScalingFactor: number,
  ): void;
  /** Device scratch bytes moePermute needs (0 for up to 4096 slots). */
  moePermuteScratchBytes(numTokens: number, topK: number, numExperts: number): number;
  /**
   * Stable counting sort of the T*k slots by expert: hidden [T*k, rowBytes], expertOffsets i32
   * [E + 1], slotToRow i32 [T, k] (hsMoePermute). scratch: moePermuteScratchBytes bytes or 0.
   */
  moePermute(
    stream: number,
    x: number,
    topkIds: number,
    hidden: number,
    expertOffsets: number,
    slotToRow: number,
    scratch: number,
    scratchBytes: number,
    numTokens: number,
    rowBytes: number,
    topK: number,
    numExperts: number,
  ): void;
  /**
   * Grouped bf16 GEMM over the expert segments: out [P, N] = x [P, K] @ w[e] [N, K]^T per segment;
   * with gateUpSilu, out [P, N / 2] = silu_and_mul of it (hsMoeGroupedGemm).
   */
  moeGroupedGemm(
    stream: number,
    x: number,
    w: number,
    out: number,
    expertOffsets: number,
    numRows: number,
    numExperts: number,
    N: number,
    K: number,
    gateUpSilu: boolean,
  ): void;
  /**
   * out [T, H] = sum_j w[t, j] * y[slotToRow[t, j]] (slot order, f32) + shared (hsMoeUnpermute).
   * shared: [T, H] or 0; y, shared and out of `dtype`.
   */
  moeUnpermute(
    stream: number,
    y: number,
    slotToRow: number,
    topkWeights: number,
    shared: number,
    out: number,
    numTokens: number,
    topK: number,
    hidden: number,
    numRows: number,
    dtype: number,
  ): void;
  /** i32 elements of the persistent, zeroed sync buffer of the small-batch path for hidden size H. */
  moeDecodeSyncInts(hidden: number): number;
  /** i32 elements of the small-batch plan for (T, k, E) (hsMoeDecodePlanInts). */
  moeDecodePlanInts(numTokens: number, topK: number, numExperts: number): number;
  /**
   * Small batch, 1/3: logits f32 [T, E] = x bf16 [T, H] @ router [E, H]^T, then routing as
   * moeRoute (ids, weights [T, k]) and the plan (hsMoeDecodeRoute). bias: f32 [E] or 0.
   */
  moeDecodeRoute(
    stream: number,
    x: number,
    router: number,
    bias: number,
    logits: number,
    topkIds: number,
    topkWeights: number,
    plan: number,
    sync: number,
    numTokens: number,
    hidden: number,
    numExperts: number,
    topK: number,
    scoring: number,
    renormalize: boolean,
    numGroups: number,
    topkGroup: number,
    routedScalingFactor: number,
  ): void;
  /**
   * Small batch, 2/3: act bf16 [T*k + T, max(I, Is)] = silu_and_mul(gate_up[e] @ x[t]) per slot of
   * the plan (+ the shared expert's slots when sharedGateUp != 0) (hsMoeDecodeGateUp).
   */
  moeDecodeGateUp(
    stream: number,
    x: number,
    gateUp: number,
    sharedGateUp: number,
    plan: number,
    act: number,
    numTokens: number,
    topK: number,
    numExperts: number,
    hidden: number,
    inter: number,
    sharedInter: number,
  ): void;
  /**
   * Small batch, 3/3: out bf16 [T, H] = the weighted sum over each token's slots in slot order of
   * bf16(down[topkIds[t, j]] @ act[t*k + j]) (+ the shared slot) (hsMoeDecodeDown).
   */
  moeDecodeDown(
    stream: number,
    act: number,
    down: number,
    sharedDown: number,
    topkIds: number,
    topkWeights: number,
    out: number,
    numTokens: number,
    topK: number,
    numExperts: number,
    hidden: number,
    inter: number,
    sharedInter: number,
  ): void;
}
