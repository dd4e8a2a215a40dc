/**
 * Model families the engine runs. They share one decoder (models/decoder.ts): GQA or MLA
 * attention with a dense or mixture-of-experts MLP per layer; family_traits.ts says how each
 * reads its config. Its own file, so that model_config.ts and family_traits.ts both import it
 * without an import cycle.
 */
export const SUPPORTED_ARCHITECTURES = {
  LlamaForCausalLM: "llama",
  MistralForCausalLM: "mistral",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  Qwen3MoeForCausalLM: "qwen3_moe",
  Glm4MoeForCausalLM: "glm4_moe",
  DeepseekV3ForCausalLM: "deepseek_v3",
  DeepseekV32ForCausalLM: "deepseek_v32",
  GlmMoeDsaForCausalLM: "glm_moe_dsa",
} as const;
export type ModelFamily = (typeof SUPPORTED_ARCHITECTURES)[keyof typeof SUPPORTED_ARCHITECTURES];
