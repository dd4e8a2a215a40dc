/**
 * Mixture-of-experts models through the whole engine on the CPU backend (worker thread, as
 * `hisparse generate` runs them): the tiny transformers 5.17 checkpoints (when found, see
 * test/helpers/reference.ts) give HF's 24 greedy tokens for the three fixture prompts run as one
 * batch; and batching, chunked prefill and preemption are invisible in the tokens of a MoE model
 * (dummy-weight Qwen3-MoE and GLM-4.5-style configs always, tiny-qwen3-moe when found).
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { LLM, type LLMOptions } from "../../../src/engine/llm.js";
import { loadFixture, referencedModelDir, refModelDir, TINY_MODELS } from "../../helpers/reference.js";
import { TINY_GLM4_MOE_CONFIG, TINY_QWEN3_MOE_CONFIG } from "../../helpers/tiny_model.js";

/** A greedy divergence from HF is accepted only where the engine's top-2 logits differ by less. */
const TIE_EPS = 1e-3;

for (const name of TINY_MODELS) {
  const dir = referencedModelDir(name);
  describe(`engine greedy vs HF: ${name}`, { skip: dir === null && `${name} not found` }, () => {
    it("three fixture prompts (7, 40, 300 ids) in one batch: 24 greedy tokens equal HF's", async () => {
      const llm = new LLM({ model: dir!, device: "cpu", maxModelLen: 352 });
      try {
        const cases = loadFixture(name);
        const outs = await llm.generate(
          cases.map((c) => ({ promptTokenIds: c.input_ids })),
          { temperature: 0, maxTokens: 24, ignoreEos: true, logprobs: 2 },
        );
        for (const [i, c] of cases.entries()) {
          const got = outs[i]!.outputs[0]!;
          const j = c.greedy_ids.findIndex((id, k) => got.tokenIds[k] !== id);
          if (j < 0) continue;
          const top = got.logprobs![j]!.topLogprobs;
          assert.ok(
            top[0]! - top[1]! < TIE_EPS,
            `case ${i} step ${j}: ${got.tokenIds[j]} vs HF ${c.greedy_ids[j]}`,
          );
        }
      } finally {
        await llm.shutdown();
      }
    });
  });
}

/** 8 prompts of 5..31 random ids below `vocab` (seeded). */
function prompts(vocab: number): number[][] {
  let x = 12345;
  const next = () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return x;
  };
  return Array.from({ length: 8 }, (_, i) =>
    Array.from({ length: 5 + ((i * 7) % 27) }, () => next() % vocab),
  );
}

/**
 * Runs the 8 prompts one by one on a roomy engine, then together on a tight one (16 blocks of 4
 * tokens for 8 requests of up to 31 + 24 tokens: preemptions; a 16-token budget: chunked
 * prefills) and checks the tokens agree and the tight run preempted.
 */
async function batchingIsInvisible(model: Partial<LLMOptions>, vocab: number): Promise<void> {
  const params = { temperature: 0, maxTokens: 24, ignoreEos: true };
  const ps = prompts(vocab);
  const alone = new LLM({ device: "cpu", maxModelLen: 64, ...model });
  const solo: number[][] = [];
  try {
    for (const p of ps)
      solo.push((await alone.generate([{ promptTokenIds: p }], params))[0]!.outputs[0]!.tokenIds);
  } finally {
    await alone.shutdown();
  }
  const tight = new LLM({
    device: "cpu",
    maxModelLen: 64,
    blockSize: 4,
    numGpuBlocksOverride: 16,
    maxNumBatchedTokens: 16,
    ...model,
  });
  try {
    const engine = await tight.getEngine();
    const outs = await tight.generate(
      ps.map((p) => ({ promptTokenIds: p })),
      params,
    );
    assert.ok(engine.scheduler.makeStats().numPreemptions > 0, "the tight pool must force a preemption");
    for (const [i, o] of outs.entries()) assert.deepEqual(o.outputs[0]!.tokenIds, solo[i], `prompt ${i}`);
    assert.equal(engine.scheduler.kvCacheManager.numFreeBlocks, 16, "every block is free again");
  } finally {
    await tight.shutdown();
  }
}

describe("batching is invisible for MoE models (chunked prefill, preemption)", () => {
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-moe-e2e-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  for (const [label, config] of [
    ["Qwen3-MoE shape, dummy weights", TINY_QWEN3_MOE_CONFIG],
    [
      "GLM-4.5 shape (grouped sigmoid routing, shared expert, partial rotary), dummy weights",
      TINY_GLM4_MOE_CONFIG,
    ],
  ] as const) {
    it(label, async () => {
      const dir = join(tmp, config.architectures[0]!);
      mkdirSync(dir);
      writeFileSync(join(dir, "config.json"), JSON.stringify(config));
      await batchingIsInvisible({ model: dir, loadFormat: "dummy", seed: 7 }, config.vocab_size);
    });
  }
  const real = refModelDir("tiny-qwen3-moe");
  it(
    "tiny-qwen3-moe (transformers 5.17 checkpoint)",
    { skip: real === null && "tiny-qwen3-moe not found" },
    () => batchingIsInvisible({ model: real! }, 16384),
  );
});
