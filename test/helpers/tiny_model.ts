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
