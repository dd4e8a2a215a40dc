/**
 * End to end: the decoder (models/decoder.ts through LlamaForCausalLM) on the CPU backend against
 * the naive reference forward (llama_reference.ts, moe_reference.ts), on tiny random configs: a
 * GQA Llama with tied bf16 embeddings; a Qwen3-style model with q/k norm, attention and MLP
 * biases, an untied lm_head and an explicit head_dim; a Qwen3-MoE (softmax top-2 of 8 experts,
 * renormalised, per-expert tensors, a dense layer from mlp_only_layers); a GLM-4.5-style MoE
 * (partial rotary, q/k norm, q/k/v bias, a dense first layer, sigmoid routing with a correction
 * bias limited to 2 of 4 expert groups, top-3, scaling 2.5, a shared expert, packed experts).
 * Logits must agree within 1e-4 for a one-shot prefill and for two requests that run chunked
 * prefills and decode steps through the paged cache in shared batches; the chunked run must
 * reproduce the one-shot logits exactly (batch invariance), and two threads the single thread's.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { DensePagedAttention } from "../../../../src/attention/backend.js";
import type { Tensor } from "../../../../src/backends/backend.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { type ModelConfig, parseModelConfig } from "../../../../src/config/model_config.js";
import { LlamaForCausalLM } from "../../../../src/models/llama.js";
import { buildMetadata, makeRand, maxAbsDiff, type StepRequest, shuffle } from "./helpers.js";
import { type MemoryWeightSource, randomWeights, referenceForward } from "./llama_reference.js";

const BLOCK_SIZE = 4;
const NUM_BLOCKS = 24;
const MAX_POS = 64;

const llamaCfg = parseModelConfig({
  architectures: ["LlamaForCausalLM"],
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  vocab_size: 50,
  rms_norm_eps: 1e-5,
  max_position_embeddings: MAX_POS,
  tie_word_embeddings: true,
  rope_parameters: { rope_theta: 10000, rope_type: "default" },
});
const qwen3Cfg = parseModelConfig({
  architectures: ["Qwen3ForCausalLM"],
  hidden_size: 40,
  intermediate_size: 56,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 1,
  head_dim: 12,
  vocab_size: 45,
  rms_norm_eps: 1e-6,
  max_position_embeddings: MAX_POS,
  tie_word_embeddings: false,
  attention_bias: true,
  mlp_bias: true,
  rope_theta: 1000000,
});

const qwen3MoeCfg = parseModelConfig({
  architectures: ["Qwen3MoeForCausalLM"],
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 3,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  vocab_size: 50,
  rms_norm_eps: 1e-6,
  max_position_embeddings: MAX_POS,
  num_local_experts: 8,
  num_experts_per_tok: 2,
  moe_intermediate_size: 16,
  norm_topk_prob: true,
  mlp_only_layers: [1],
  rope_parameters: { rope_theta: 10000, rope_type: "default" },
});
const glm4MoeCfg = parseModelConfig({
  architectures: ["Glm4MoeForCausalLM"],
  hidden_size: 32,
  intermediate_size: 40,
  num_hidden_layers: 3,
  num_attention_heads: 4,
  num_key_value_heads: 1,
  head_dim: 16,
  vocab_size: 50,
  rms_norm_eps: 1e-5,
  max_position_embeddings: MAX_POS,
  attention_bias: true,
  use_qk_norm: true,
  partial_rotary_factor: 0.5,
  first_k_dense_replace: 1,
  n_routed_experts: 8,
  n_shared_experts: 1,
  n_group: 4,
  topk_group: 2,
  num_experts_per_tok: 3,
  moe_intermediate_size: 12,
  norm_topk_prob: true,
  routed_scaling_factor: 2.5,
  rope_parameters: { rope_theta: 10000, rope_type: "default", partial_rotary_factor: 0.5 },
});

const backends = [new CpuBackend({ numThreads: 1 }), new CpuBackend({ numThreads: 2, chunkMacs: 1 })];
after(() => {
  for (const b of backends) b.dispose();
});

/** A loaded model with its paged cache. */
interface Engine {
  backend: CpuBackend;
  model: LlamaForCausalLM;
  kvCaches: Tensor[];
  attention: DensePagedAttention;
}

function makeEngine(backend: CpuBackend, cfg: ModelConfig, weights: MemoryWeightSource): Engine {
  const model = LlamaForCausalLM.load(cfg, weights, backend, MAX_POS);
  const kvCaches = backend.allocateKvCache({
    numLayers: cfg.numHiddenLayers,
    numBlocks: NUM_BLOCKS,
    blockSize: BLOCK_SIZE,
    numKvHeads: cfg.numKeyValueHeads,
    headDim: cfg.headDim,
    dtype: "f32",
  });
  return { backend, model, kvCaches, attention: new DensePagedAttention(backend, model.layout, BLOCK_SIZE) };
}

function disposeEngine(e: Engine): void {
  e.model.dispose();
  for (const c of e.kvCaches) e.backend.free(c);
}

/** One model step over the given request slices; returns logits [rows, V] of `logitRows`. */
function step(e: Engine, reqs: StepRequest[], ids: number[], logitRows: number[]): Float32Array {
  const b = e.backend;
  const { meta, positions } = buildMetadata(b, reqs, BLOCK_SIZE);
  const input = b.stage(Int32Array.from(ids), [ids.length], "i32");
  const idx = b.stage(Int32Array.from(logitRows), [logitRows.length], "i32");
  const logits = b.toHost(
    e.model.forward(input, positions, { meta, attention: e.attention, kvCaches: e.kvCaches }, idx),
  );
  b.resetWorkspace();
  return logits as Float32Array;
}

for (const [name, cfg, bf16, packed, seed] of [
  ["llama (GQA 2:1, tied bf16 weights)", llamaCfg, true, false, 7],
  ["qwen3 (q/k norm, biases, untied lm_head, head_dim 12)", qwen3Cfg, false, false, 8],
  ["qwen3_moe (top-2 of 8 experts, per-expert tensors, dense layer 1)", qwen3MoeCfg, true, false, 9],
  [
    "glm4_moe (partial rotary, grouped sigmoid routing, shared expert, packed experts)",
    glm4MoeCfg,
    false,
    true,
    10,
  ],
] as const) {
  describe(`LlamaForCausalLM ${name}`, () => {
    const rand = makeRand(seed);
    const weights = randomWeights(cfg, rand, bf16, packed);
    const V = cfg.vocabSize;
    const seqA = Array.from({ length: 19 }, () => Math.floor(rand() * V));
    const seqB = Array.from({ length: 9 }, () => Math.floor(rand() * V));
    const refA = referenceForward(cfg, weights, seqA);
    const refB = referenceForward(cfg, weights, seqB);
    const results: Float32Array[][] = [];
    let oneShot: Float32Array | null = null;

    for (const backend of backends) {
      it(`one-shot prefill (${backend.numThreads} thread(s)): logits of all 19 positions within 1e-4`, () => {
        const e = makeEngine(backend, cfg, weights);
        const blocks = shuffle(
          rand,
          Array.from({ length: NUM_BLOCKS }, (_, i) => i),
        ).slice(0, 5);
        const logits = step(e, [{ numComputed: 0, numNew: 19, blockIds: blocks }], seqA, [...seqA.keys()]);
        oneShot = logits;
        for (let t = 0; t < 19; t++) {
          const d = maxAbsDiff(logits.subarray(t * V, (t + 1) * V), refA[t]!);
          assert.ok(d <= 1e-4, `position ${t}: max |diff| ${d}`);
        }
        disposeEngine(e);
      });

      it(`chunked prefill + decode of two requests in shared batches (${backend.numThreads} thread(s))`, () => {
        const e = makeEngine(backend, cfg, weights);
        const order = shuffle(
          rand,
          Array.from({ length: NUM_BLOCKS }, (_, i) => i),
        );
        const blocksA = order.slice(0, 5); // 19 tokens -> 5 blocks of 4
        const blocksB = order.slice(10, 13); // 9 tokens -> 3 blocks
        // Schedule (tokens per step): A: 5, 8, then decodes; B joins at step 2 with 4 + 5 (chunked).
        const plan: { a: [number, number] | null; b: [number, number] | null }[] = [
          { a: [0, 5], b: null },
          { a: [5, 13], b: [0, 4] },
          { a: [13, 14], b: [4, 9] },
          ...Array.from({ length: 5 }, (_, i) => ({ a: [14 + i, 15 + i] as [number, number], b: null })),
        ];
        const got: Float32Array[] = [];
        for (const s of plan) {
          const reqs: StepRequest[] = [];
          const ids: number[] = [];
          const rows: number[] = [];
          const refs: number[][] = [];
          for (const [range, seq, blocks, ref] of [
            [s.a, seqA, blocksA, refA],
            [s.b, seqB, blocksB, refB],
          ] as const) {
            if (range === null) continue;
            const [from, to] = range;
            reqs.push({
              numComputed: from,
              numNew: to - from,
              blockIds: blocks.slice(0, Math.ceil(to / BLOCK_SIZE)),
            });
            ids.push(...seq.slice(from, to));
            rows.push(ids.length - 1);
            refs.push(ref[to - 1]!);
          }
          const logits = step(e, reqs, ids, rows);
          got.push(logits);
          refs.forEach((ref, r) => {
            const d = maxAbsDiff(logits.subarray(r * V, (r + 1) * V), ref);
            assert.ok(d <= 1e-4, `step ${got.length}, row ${r}: max |diff| ${d}`);
          });
          // Batch invariance: request A's logits equal the one-shot prefill's at that position, bit
          // for bit, whatever the chunking and the batch it shares.
          if (s.a !== null && oneShot !== null) {
            const t = s.a[1] - 1;
            assert.deepEqual([...logits.subarray(0, V)], [...oneShot.subarray(t * V, (t + 1) * V)]);
          }
        }
        results.push(got);
        disposeEngine(e);
      });
    }

    it("the threaded backend gives the single-threaded logits bit for bit", () => {
      assert.equal(results.length, 2);
      for (const [i, l] of results[0]!.entries()) assert.deepEqual([...results[1]![i]!], [...l]);
    });
  });
}
