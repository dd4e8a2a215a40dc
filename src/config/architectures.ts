/**
 * Model families the engine runs. They share one decoder (models/decoder.ts): GQA attention with
 * a dense or mixture-of-experts MLP per layer; family_traits.ts says how each reads its config.
 */
export const SUPPORTED_ARCHITECTURES = {
  LlamaForCausalLM: "llama",
  MistralForCausalLM: "mistral",
  Qwen2ForCausalLM: "qwen2",
  Qwen3ForCausalLM: "qwen3",
  Qwen3MoeForCausalLM: "qwen3_moe",
  Glm4MoeForCausalLM: "glm4_moe",
} as const;
export type ModelFamily = (typeof SUPPORTED_ARCHITECTURES)[keyof typeof SUPPORTED_ARCHITECTURES];
