/**
 * The Megatron shape rules (core/tensor_parallel.ts): which models split over N ranks (with the
 * reason when not), the slices a rank holds, KV heads split or replicated.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseModelConfig } from "../../../src/config/model_config.js";
import {
  kvHeadShard,
  shardOf,
  tensorParallelReasons,
  vocabIsSharded,
} from "../../../src/core/tensor_parallel.js";

const llama = (o: Record<string, unknown> = {}) =>
  parseModelConfig({
    architectures: ["LlamaForCausalLM"],
    hidden_size: 4096,
    intermediate_size: 14336,
    num_hidden_layers: 2,
    num_attention_heads: 32,
    num_key_value_heads: 8,
    vocab_size: 128256,
    max_position_embeddings: 1024,
    ...o,
  });

describe("tensorParallelReasons", () => {
  it("Llama-3.1-8B's shape splits over 1, 2, 4, 8 ranks (KV heads 8: one per rank at 8)", () => {
    for (const tp of [1, 2, 4, 8]) assert.deepEqual(tensorParallelReasons(llama(), tp), []);
  });
  it("16 ranks: 8 KV heads replicate (16 is a multiple of 8), so only nothing else stops it", () => {
    assert.deepEqual(tensorParallelReasons(llama(), 16), []);
  });
  it("names every dimension that does not divide", () => {
    const r = tensorParallelReasons(
      llama({ num_attention_heads: 6, num_key_value_heads: 3, intermediate_size: 1002, head_dim: 128 }),
      4,
    );
    assert.deepEqual(r, [
      "the model's 6 attention heads cannot be split over 4 ranks (not a multiple)",
      "the model's 3 KV heads cannot be replicated over 4 ranks (4 is not a multiple)",
      "the model's intermediate_size 1002 cannot be split over 4 ranks (not a multiple)",
    ]);
  });
  it("MoE and MLA families are refused through their family traits, whatever their shape", () => {
    const moe = parseModelConfig({
      architectures: ["Qwen3MoeForCausalLM"],
      hidden_size: 64,
      intermediate_size: 128,
      moe_intermediate_size: 32,
      num_experts: 4,
      num_experts_per_tok: 2,
      num_hidden_layers: 1,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      vocab_size: 64,
      max_position_embeddings: 64,
    });
    assert.match(tensorParallelReasons(moe, 2)[0]!, /mixture-of-experts layers is not implemented yet/);
    assert.deepEqual(tensorParallelReasons(moe, 1), []);
  });
});

describe("rank slices", () => {
  it("shardOf: rank r of N holds [r * n / N, (r + 1) * n / N)", () => {
    assert.deepEqual(shardOf(14336, { rank: 3, size: 4 }), { start: 10752, count: 3584 });
  });
  it("kvHeadShard: 8 heads over 4 ranks split 2 each; 2 heads over 4 ranks: ranks 0-1 hold head 0, ranks 2-3 head 1", () => {
    assert.deepEqual(kvHeadShard(8, { rank: 2, size: 4 }), { start: 4, count: 2 });
    assert.deepEqual(
      [0, 1, 2, 3].map((rank) => kvHeadShard(2, { rank, size: 4 }).start),
      [0, 0, 1, 1],
    );
  });
  it("vocabIsSharded: when the vocabulary divides (128256 over 8 does; 151665 over 2 does not)", () => {
    assert.equal(vocabIsSharded(128256, 8), true);
    assert.equal(vocabIsSharded(151665, 2), false);
  });
});
