import type { Backend } from "../backends/backend.js";
import type { ModelConfig } from "../config/model_config.js";
import { GQA_ATTENTION } from "./attention_gqa.js";
import { MLA_ATTENTION } from "./attention_mla.js";
import type { ModelParallel } from "./blocks.js";
import { DecoderForCausalLM, type LoadProgress } from "./decoder.js";
import type { WeightSource } from "./weights.js";

export type { ForwardContext, LoadProgress } from "./decoder.js";

/**
 * The model class of the GQA families (Llama 2/3, Mistral, Qwen2 with q/k/v bias, Qwen3 with
 * q/k norm, Qwen3-MoE, GLM-4.5 with partial rotary): the shared decoder skeleton
 * (decoder.ts) with GQA attention (attention_gqa.ts). Its instances are DecoderForCausalLM;
 * the name is the one the worker and tests use.
 */
export const LlamaForCausalLM = {
  /**
   * Loads every weight from `source` onto `backend`.
   * @param maxPositions positions covered by the RoPE table (the engine's max model length).
   * @throws ModelConfigError when the model has MoE layers and the backend no MoE ops.
   * @throws WeightLoadError when a tensor is missing or has the wrong shape.
   */
  load(
    config: ModelConfig,
    source: WeightSource,
    backend: Backend,
    maxPositions: number,
    onProgress?: LoadProgress,
    tp?: ModelParallel,
  ): DecoderForCausalLM {
    return DecoderForCausalLM.load(config, source, backend, maxPositions, GQA_ATTENTION, onProgress, tp);
  },
};
export type LlamaForCausalLM = DecoderForCausalLM;

/**
 * The model class of the MLA families (DeepSeek-V3; DeepSeek-V3.2 and GLM-5 with the DSA
 * indexer): the shared decoder skeleton with MLA attention (attention_mla.ts) and DeepSeek's
 * MoE (moe_mlp.ts); the dense-resident MLA attention backend runs it (attention/mla.ts).
 */
export const DeepseekV3ForCausalLM = {
  /**
   * @throws ModelConfigError when the backend has no MLA (or MoE) ops.
   * @throws WeightLoadError when a tensor is missing or has the wrong shape.
   */
  load(
    config: ModelConfig,
    source: WeightSource,
    backend: Backend,
    maxPositions: number,
    onProgress?: LoadProgress,
  ): DecoderForCausalLM {
    return DecoderForCausalLM.load(config, source, backend, maxPositions, MLA_ATTENTION, onProgress);
  },
};
