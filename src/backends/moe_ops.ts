/**
 * The mixture-of-experts ops of the Backend contract (Backend.moe, backend.ts): routing,
 * permutation, grouped GEMMs, un-permutation, and the optional small-batch path. Implemented by
 * cpu/moe_ops.ts and cuda/moe_ops.ts.
 */

import type { MoeRoutingRule } from "../config/moe_config.js";
import type { Tensor } from "./tensor.js";

/** Selected experts of every token (output of {@link BackendMoeOps.route}). */
export interface MoeRouting {
  /** i32 [T, k] expert ids of each token, ascending within the row (no repeats). */
  topkIds: Tensor;
  /** f32 [T, k] the weight of each selected expert (same order as topkIds). */
  topkWeights: Tensor;
}

/** Tokens grouped by expert (output of {@link BackendMoeOps.permute}). */
export interface MoePermutation {
  /**
   * [P, H] (activation dtype) the token rows, expert 0's first: expert e's rows are
   * [expertOffsets[e], expertOffsets[e+1]). The order within a segment is the backend's (the CPU
   * backend keeps ascending (token, slot); a GPU may place rows with atomics): no result depends
   * on it, since every row is computed on its own and unpermute finds rows by slotToRow. P >= T*k
   * is the backend's choice and a function of (T, k, E) only, so it is fixed inside a captured
   * graph: the CPU backend uses P = T*k; a GPU backend may pad each expert's segment to its GEMM
   * tile (P <= T*k + E*(tile-1)). Padding rows hold unspecified values; ops may compute on them
   * but never return them (unpermute reads only rows named by slotToRow).
   */
  hidden: Tensor;
  /** i32 [E + 1] segment starts in `hidden`; expertOffsets[0] = 0, expertOffsets[E] <= P. */
  expertOffsets: Tensor;
  /** i32 [T, k] the row of `hidden` that holds (token t, slot j) of the routing. */
  slotToRow: Tensor;
}

/**
 * Mixture-of-experts ops (vLLM fused_moe's stages: routing, moe_align / permute, grouped GEMMs,
 * un-permute). A MoE layer runs, with x [T, H] its normed input:
 *   logits = linear(x, routerWeight [E, H], null, "f32")            // [T, E] f32
 *   r      = moe.route(logits, rule, correctionBias)                // [T, k] ids + weights
 *   p      = moe.permute(x, r.topkIds, E)                           // [P, H] grouped by expert
 *   h      = siluAndMul(moe.groupedLinear(p.hidden, gateUp [E, 2I, H], p.expertOffsets))  // [P, I]
 *            (or moe.groupedGateUpSilu(p.hidden, gateUp, p.expertOffsets), the same fused)
 *   y      = moe.groupedLinear(h, down [E, H, I], p.expertOffsets)  // [P, H]
 *   out    = moe.unpermute(y, p.slotToRow, r.topkWeights, shared)   // [T, H]
 * Every shape depends on T (and the model) only and every count lives in device tensors, so a
 * step needs no host round trip and the sequence can be captured in a CUDA graph. Each token's
 * result depends only on its own row (batch invariance): routing is per row, the grouped GEMMs
 * compute each row on its own, and unpermute sums a token's k rows in slot order.
 */
export interface BackendMoeOps {
  /**
   * Routing (HF Qwen3MoeTopKRouter; DeepseekV3TopkRouter / Glm4MoeTopkRouter "noaux_tc"), per row
   * of logits, in fp32:
   *   s = softmax(logits) (rule.scoring "softmax") or sigmoid(logits) ("sigmoid");
   *   c = s + correctionBias (selection scores; c = s without a bias);
   *   numGroups > 1: the E experts form numGroups consecutive groups; a group's score is the sum
   *     of its two largest c; experts outside the topkGroup best groups get c = -inf (DeepSeek's
   *     reference Gate; HF writes 0.0 there, which differs only when a chosen group has fewer
   *     than k experts with c > 0);
   *   the k = rule.topK experts of largest c (ties: the lower expert id first; the same rule for
   *     groups), then sorted by ascending id;
   *   w = s of those experts (the bias never enters the weights); rule.renormalize:
   *     w /= (sum(w) + 1e-20); finally w *= rule.routedScalingFactor.
   * logits: f32 [T, E]; correctionBias: f32 [E] or null (required iff rule.correctionBias).
   * @throws Error on shapes or a rule that cannot pick k experts.
   */
  route(logits: Tensor, rule: MoeRoutingRule, correctionBias: Tensor | null): MoeRouting;
  /**
   * Groups token rows by expert (vLLM moe_align + permute): row (t, j) of the routing is a copy
   * of x[t] placed in expert topkIds[t, j]'s segment; expert counts stay on the device.
   * x: [T, H]; topkIds: i32 [T, k] with ids in [0, numExperts).
   * @throws Error on shapes or an id outside [0, numExperts).
   */
  permute(x: Tensor, topkIds: Tensor, numExperts: number): MoePermutation;
  /**
   * Per-expert matmul: out[r] = x[r] @ weight[e]^T for every row r of expert e's segment
   * [expertOffsets[e], expertOffsets[e+1]) (one grouped GEMM launch; empty segments cost
   * nothing). Rows outside every segment are padding (unspecified values). x: [P, K];
   * weight: [E, N, K] (HF 5.x packed expert layout: gate_up_proj [E, 2I, H] with gate rows
   * first, down_proj [E, H, I]); expertOffsets: i32 [E + 1] -> [P, N].
   */
  groupedLinear(x: Tensor, weight: Tensor, expertOffsets: Tensor): Tensor;
  /**
   * Optional fusion, equal bit for bit to siluAndMul(groupedLinear(x, gateUp, expertOffsets))
   * (the CUDA backend applies silu_and_mul in the GEMM's epilogue: the [P, 2I] product never
   * reaches memory and a MoE layer saves a launch, which counts at decode batch sizes).
   * x: [P, H]; gateUp: [E, 2I, H] (gate rows first) -> [P, I].
   */
  readonly groupedGateUpSilu?: (x: Tensor, gateUp: Tensor, expertOffsets: Tensor) => Tensor;
  /**
   * Weighted sum of each token's expert rows, in slot order, then the shared-expert output:
   *   out[t] = (sum_j topkWeights[t, j] * y[slotToRow[t, j]]) + shared[t]
   * accumulated in fp32 (the CPU backend rounds each product and partial sum to f32, as HF's
   * index_add_ does); shared omitted when null. y: [P, H]; slotToRow: i32 [T, k]; topkWeights:
   * f32 [T, k]; shared: [T, H] or null -> [T, H].
   */
  unpermute(y: Tensor, slotToRow: Tensor, topkWeights: Tensor, shared: Tensor | null): Tensor;
  /**
   * Optional small-batch path (decode): the whole block for a few tokens in a few launches, with
   * no permutation (see {@link MoeSmallBatchOps}).
   */
  readonly smallBatch?: MoeSmallBatchOps;
}

/** The weights of one MoE block, as the small-batch path takes them. */
export interface MoeLayerWeights {
  /** [E, H] the router (`mlp.gate.weight`). */
  router: Tensor;
  /** f32 [E] or null (required iff the rule has a correction bias). */
  correctionBias: Tensor | null;
  /** [E, 2I, H] gate rows first. */
  gateUp: Tensor;
  /** [E, H, I]. */
  down: Tensor;
  /** The shared experts' fused gate_up [2Is, H] and down [H, Is], or null (no shared experts). */
  shared: { gateUp: Tensor; down: Tensor } | null;
}

/**
 * A MoE block for T <= maxTokens tokens without the permutation (the CUDA backend: router GEMV +
 * routing, gate_up + silu_and_mul and down GEMVs over the distinct experts hit, and a
 * deterministic weighted sum over each token's slots; native/kernels/moe_decode.h):
 *   forward(x, w, rule) = unpermute(down(siluAndMul(gateUp(permute(x)))), weights) + shared(x)
 * with logits = linear(x, router, null, "f32") routed by the rule, equal to the op sequence of
 * {@link BackendMoeOps} within bf16 tolerance (its dot products sum in another order), and equal
 * bit for bit for a token whatever the other tokens of the batch (T <= maxTokens).
 */
export interface MoeSmallBatchOps {
  /** Largest T forward takes. */
  readonly maxTokens: number;
  /**
   * Whether forward takes this block (dtypes and sizes within the kernels' limits); reserves what
   * forward needs. Called at load (never while a graph is being captured).
   */
  prepare(w: MoeLayerWeights, rule: MoeRoutingRule): boolean;
  /** x: [T, H], 1 <= T <= maxTokens -> [T, H]. @throws Error on shapes, dtypes or an unprepared block. */
  forward(x: Tensor, w: MoeLayerWeights, rule: MoeRoutingRule): Tensor;
}
