/**
 * An upper bound on the activation bytes a step of T tokens needs (the CUDA backend's step
 * workspace), from the model's shapes alone. The decoder runs each layer in a workspace scope
 * (models/decoder.ts): every temporary of one layer lives until the layer ends, beside the
 * residual stream and the previous layer's output, so the peak is one layer's temporaries summed,
 * per token, times T. vLLM sizes the same memory by a profiling forward of max_num_batched_tokens
 * (determine_available_memory); we compute it, so the KV budget is known before anything runs.
 */
import type { ModelConfig } from "./model_config.js";

/** bf16 activations. */
const ACT_BYTES = 2;

/** Headroom over the summed shapes (fused-op copies, alignment, the sampler's rows). */
const MARGIN = 1.25;

/** Fixed part: decode split-KV partials, logits of the sampled rows, small per-step tensors. */
const FIXED_BYTES = 256 * 2 ** 20;

/** The smallest workspace the backend is created with (bytes; what it had before this bound). */
export const MIN_STEP_WORKSPACE_BYTES = 2048 * 2 ** 20;

/**
 * Bytes per token of one decoder layer's temporaries plus the two rows that outlive a layer
 * (residual stream, previous layer's output), at bf16. Dense and MoE MLPs: the larger of the
 * two; MoE counts the permuted top-k rows (gate_up, silu, down) and the shared experts.
 */
export function activationBytesPerToken(c: ModelConfig): number {
  const H = c.hiddenSize;
  const attention = c.mla
    ? mlaWidth(c)
    : 2 * (c.numAttentionHeads + 2 * c.numKeyValueHeads) * c.headDim + c.numAttentionHeads * c.headDim + H;
  const dense = 3 * c.intermediateSize + H;
  const moe = c.moe
    ? c.moe.routing.topK * (2 * H + 3 * c.moe.moeIntermediateSize) +
      3 * c.moe.moeIntermediateSize * c.moe.numSharedExperts +
      H +
      2 * c.moe.numExperts // router logits (f32)
    : 0;
  return (2 * H + attention + Math.max(dense, moe)) * ACT_BYTES;
}

/** MLA's per-token widths: q path, absorbed q, latent row, latent output, value up-projection, o. */
function mlaWidth(c: ModelConfig): number {
  const m = c.mla!;
  const Hq = c.numAttentionHeads;
  const latent = m.kvLoraRank + m.qkRopeHeadDim;
  const ix = m.indexer;
  const indexer = ix ? ix.numHeads * ix.headDim + ix.headDim + ix.numHeads : 0;
  return (
    (m.qLoraRank ?? 0) +
    Hq * (m.qkNopeHeadDim + m.qkRopeHeadDim) +
    Hq * latent +
    latent +
    Hq * m.kvLoraRank +
    Hq * m.vHeadDim +
    c.hiddenSize +
    indexer
  );
}

/**
 * Step workspace bytes for steps of up to `maxNumBatchedTokens` tokens: the per-token bound times
 * the tokens with {@link MARGIN}, plus {@link FIXED_BYTES}, and never below
 * {@link MIN_STEP_WORKSPACE_BYTES}. Llama-3.1-8B at 8192 tokens: 2 GiB (the floor); at 32768: ~6 GiB.
 */
export function stepWorkspaceBytes(c: ModelConfig, maxNumBatchedTokens: number): number {
  const need = Math.ceil(MARGIN * activationBytesPerToken(c) * maxNumBatchedTokens) + FIXED_BYTES;
  return Math.max(MIN_STEP_WORKSPACE_BYTES, Math.ceil(need / 2 ** 20) * 2 ** 20);
}
