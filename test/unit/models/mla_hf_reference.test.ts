/**
 * The tiny random MLA checkpoints of transformers 5.17 (tiny-deepseek-v3: MLA + MoE;
 * tiny-deepseek-v32: + the DSA lightning indexer with half-split RoPE; tiny-glm5-dsa: GLM-5's
 * form, interleaved indexer RoPE, rope_parameters, mlp_layer_types, indexer_types; index_topk 32,
 * so the 40- and 300-token prompts drop tokens) on the CPU backend against HF's fp32 outputs
 * (test/fixtures/hf-<model>.json; the -pv copies keep the vocabulary rows their fixtures use,
 * scripts/fixtures/prune_vocab.py, so CI runs them without ../shared): last-position logits of each prompt within 2e-3 and the 24
 * greedy tokens identical, decoding through the paged latent and indexer caches (the fixtures
 * come from full forwards without a cache). A divergence is accepted only where the engine's
 * own top-2 logits differ by less than 1e-3 (an fp32 near-tie); the test checks that.
 */
import assert from "node:assert/strict";
import { after, it } from "node:test";
import { DenseMlaAttention } from "../../../src/attention/mla.js";
import { CpuBackend } from "../../../src/backends/cpu/index.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { modelKVCacheGroups } from "../../../src/core/kv/kv_cache_interface.js";
import { DeepseekV3ForCausalLM } from "../../../src/models/llama.js";
import { SafetensorsCheckpoint } from "../../../src/models/safetensors.js";
import { allocateGroupCaches, allocateIndexerKeyCaches } from "../../../src/worker/kv_cache_setup.js";
import { describeIfFound, loadFixture, type RefModel, referencedModelDir } from "../../helpers/reference.js";
import { buildMetadata, maxAbsDiff } from "../backends/cpu/helpers.js";

const BLOCK_SIZE = 16;
const LOGITS_ATOL = 2e-3;
const TIE_EPS = 1e-3;

function top2(row: Float32Array): { id: number; first: number; second: number } {
  let id = 0;
  let first = Number.NEGATIVE_INFINITY;
  let second = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < row.length; i++) {
    const v = row[i]!;
    if (v > first) {
      second = first;
      first = v;
      id = i;
    } else if (v > second) second = v;
  }
  return { id, first, second };
}

/** The checkpoints of ../shared and their vocabulary-pruned copies in test/fixtures/models (CI). */
const MODELS = [
  "tiny-deepseek-v3",
  "tiny-deepseek-v32",
  "tiny-glm5-dsa",
  "tiny-glm5-dsa-shared",
  "tiny-deepseek-v3-pv",
  "tiny-deepseek-v32-pv",
  "tiny-glm5-dsa-pv",
  "tiny-glm5-dsa-shared-pv",
] as RefModel[];
for (const name of MODELS) {
  const modelDir = referencedModelDir(name);
  describeIfFound(`${name} vs HF transformers (fp32)`, name, modelDir, () => {
    const backend = new CpuBackend();
    after(() => backend.dispose());
    const cases = loadFixture(name);
    const longest = Math.max(...cases.map((c) => c.input_ids.length + c.greedy_ids.length));
    const MAX_POS = Math.ceil(longest / BLOCK_SIZE) * BLOCK_SIZE;
    const cfg = loadModelConfig(modelDir!);
    const source = SafetensorsCheckpoint.open(modelDir!);
    const model = DeepseekV3ForCausalLM.load(cfg, source, backend, MAX_POS);
    source.close();
    const numBlocks = MAX_POS / BLOCK_SIZE;
    const groups = modelKVCacheGroups(cfg, { elementBytes: 4 });
    const alloc = {
      numLayers: cfg.numHiddenLayers,
      blockSize: BLOCK_SIZE,
      dtype: "f32" as const,
      numBlocksOf: () => numBlocks,
    };
    const caches = {
      latent: allocateGroupCaches(backend, groups, alloc),
      indexerKeys: allocateIndexerKeyCaches(backend, groups, alloc) ?? undefined,
    };
    const mlaAttention = new DenseMlaAttention(backend, BLOCK_SIZE);
    // Blocks in reverse order, so the pages are not contiguous in token order.
    const blockIds = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);

    const run = (ids: number[], numComputed: number): Float32Array => {
      const { meta, positions } = buildMetadata(
        backend,
        [{ numComputed, numNew: ids.length, blockIds }],
        BLOCK_SIZE,
      );
      const input = backend.stage(Int32Array.from(ids), [ids.length], "i32");
      const idx = backend.stage(Int32Array.from([ids.length - 1]), [1], "i32");
      const ctx = {
        meta,
        attention: undefined as never,
        kvCaches: caches.latent,
        mlaAttention,
        indexerKeyCaches: caches.indexerKeys,
      };
      const logits = backend.toHost(model.forward(input, positions, ctx, idx)) as Float32Array;
      backend.resetWorkspace();
      return logits;
    };

    for (const c of cases) {
      it(`${c.input_ids.length} random ids: logits within 2e-3, ${c.greedy_ids.length} greedy tokens identical`, () => {
        let logits = run(c.input_ids, 0);
        const d = maxAbsDiff(logits, c.last_logits);
        assert.ok(d <= LOGITS_ATOL, `last-position logits differ by ${d}`);
        let len = c.input_ids.length;
        for (let step = 0; step < c.greedy_ids.length; step++) {
          const t = top2(logits);
          if (t.id !== c.greedy_ids[step]) {
            assert.ok(
              t.first - t.second < TIE_EPS,
              `step ${step}: greedy ${t.id} vs HF ${c.greedy_ids[step]} with a top-2 gap of ${t.first - t.second}`,
            );
            return;
          }
          if (step + 1 === c.greedy_ids.length) break;
          logits = run([t.id], len);
          len++;
        }
      });
    }
  });
}
