/**
 * A tiny Llama config for engine tests with `--load-format dummy` on the CPU backend: 4 layers,
 * 1 KV head of 32, so 2 x 4 x 1 x 32 x 4 B = 1 KiB of f32 KV per token, 16 KiB per 16-token
 * block; pool sizes in tests follow from that.
 */
export const TINY_LLAMA_CONFIG = {
  architectures: ["LlamaForCausalLM"],
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 4,
  num_attention_heads: 2,
  num_key_value_heads: 1,
  head_dim: 32,
  vocab_size: 256,
  max_position_embeddings: 1024,
  rms_norm_eps: 1e-5,
  torch_dtype: "float32",
};

/**
 * A tiny Qwen3-MoE config for engine tests with `--load-format dummy` (or random checkpoints,
 * test/helpers/moe_checkpoint.ts): 3 layers, layer 1 dense (mlp_only_layers), 8 experts of 32,
 * top-2 renormalised; GQA 4:2 of head_dim 16, so 2 x 3 x 2 x 16 x 4 B = 768 B of f32 KV per token.
 */
export const TINY_QWEN3_MOE_CONFIG = {
  architectures: ["Qwen3MoeForCausalLM"],
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 3,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  vocab_size: 256,
  max_position_embeddings: 1024,
  rms_norm_eps: 1e-6,
  torch_dtype: "float32",
  num_experts: 8,
  num_experts_per_tok: 2,
  moe_intermediate_size: 32,
  norm_topk_prob: true,
  mlp_only_layers: [1],
};

/**
 * A tiny GLM-4.5-style config (Glm4MoeForCausalLM) for dummy-weight engine tests: partial rotary
 * (half of head_dim 16), q/k norm, q/k/v bias, layer 0 dense, 8 experts in 4 groups (2 chosen),
 * top-2 sigmoid routing scaled 2.5, one shared expert.
 */
export const TINY_GLM4_MOE_CONFIG = {
  architectures: ["Glm4MoeForCausalLM"],
  hidden_size: 64,
  intermediate_size: 96,
  num_hidden_layers: 3,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  vocab_size: 256,
  max_position_embeddings: 1024,
  rms_norm_eps: 1e-5,
  torch_dtype: "float32",
  attention_bias: true,
  use_qk_norm: true,
  partial_rotary_factor: 0.5,
  first_k_dense_replace: 1,
  n_routed_experts: 8,
  n_shared_experts: 1,
  n_group: 4,
  topk_group: 2,
  num_experts_per_tok: 2,
  moe_intermediate_size: 32,
  norm_topk_prob: true,
  routed_scaling_factor: 2.5,
};
