/**
 * MLA / DSA models through the whole engine on the CPU backend (scheduler, paged latent and
 * indexer key caches, worker thread): the tiny transformers 5.17 checkpoints (their
 * vocabulary-pruned copies in test/fixtures/models, scripts/fixtures/prune_vocab.py, and
 * tiny-glm5-dsa-shared when found) give HF's 24 greedy tokens for the three fixture prompts run
 * as one batch, and again with chunked prefill, a tight pool that forces preemption and 4-token
 * pages (the indexer's top-k over the cache must not see the chunking); `--load-format dummy`
 * loads each family; a GLM-5 config with "shared" indexer layers decodes the same tokens alone
 * and batched, chunked or not.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { LLM, type LLMOptions } from "../../../src/engine/llm.js";
import type { RequestOutput } from "../../../src/engine/outputs.js";
import {
  describeIfFound,
  loadFixture,
  type RefModel,
  referencedModelDir,
  refModelDir,
} from "../../helpers/reference.js";

/** A greedy divergence from HF is accepted only where the engine's top-2 logits differ by less. */
const TIE_EPS = 1e-3;

function assertGreedyMatches(out: RequestOutput, expected: number[], what: string): void {
  const got = out.outputs[0]!.tokenIds;
  const lps = out.outputs[0]!.logprobs!;
  for (let i = 0; i < expected.length; i++) {
    if (got[i] === expected[i]) continue;
    const top = lps[i]!.topLogprobs;
    const gap = top[0]! - top[1]!;
    assert.ok(gap < TIE_EPS, `${what}: step ${i}: ${got[i]} vs HF ${expected[i]}, engine top-2 gap ${gap}`);
    return;
  }
  assert.equal(got.length, expected.length, `${what}: token count`);
}

/** Preemptions of the last {@link generate} call's engine. */
let lastPreemptions = 0;

/** Runs `prompts` (token ids) greedily for `maxTokens` on a fresh engine; returns the outputs. */
async function generate(opts: LLMOptions, prompts: number[][], maxTokens: number): Promise<RequestOutput[]> {
  const llm = new LLM({ device: "cpu", ...opts });
  try {
    const engine = await llm.getEngine();
    const outs = await llm.generate(
      prompts.map((p) => ({ promptTokenIds: p })),
      { temperature: 0, maxTokens, ignoreEos: true, logprobs: 2 },
    );
    lastPreemptions = engine.scheduler.makeStats().numPreemptions;
    return outs;
  } finally {
    await llm.shutdown();
  }
}

const MODELS = [
  "tiny-deepseek-v3-pv",
  "tiny-deepseek-v32-pv",
  "tiny-glm5-dsa-pv",
  "tiny-glm5-dsa-shared-pv",
] as RefModel[];

for (const name of [...MODELS, "tiny-glm5-dsa-shared" as RefModel]) {
  const dir = referencedModelDir(name);
  describeIfFound(`engine greedy vs HF: ${name}`, name, dir, () => {
    const cases = loadFixture(name);
    const prompts = cases.map((c) => c.input_ids);

    it("three fixture prompts in one batch: 24 greedy tokens equal HF's", async () => {
      const outs = await generate({ model: dir!, maxModelLen: 512 }, prompts, 24);
      for (const [i, c] of cases.entries()) assertGreedyMatches(outs[i]!, c.greedy_ids, `case ${i}`);
    });

    it("chunked prefill (40-token budget), preemption (90 pages of 4 tokens) give the same tokens", async () => {
      // 8 + 16 + 81 pages for the three requests at full length do not fit 90: one is preempted.
      const outs = await generate(
        { model: dir!, maxModelLen: 328, blockSize: 4, numGpuBlocksOverride: 90, maxNumBatchedTokens: 40 },
        prompts,
        24,
      );
      assert.ok(lastPreemptions > 0, "the tight pool must force a preemption");
      for (const [i, c] of cases.entries()) assertGreedyMatches(outs[i]!, c.greedy_ids, `case ${i}`);
    });
  });
}

describe("MLA dummy weights", () => {
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-mla-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  /** A config-only folder holding `cfg`. */
  const folder = (label: string, cfg: Record<string, unknown>): string => {
    const path = mkdtempSync(join(tmp, `${label}-`));
    writeFileSync(join(path, "config.json"), JSON.stringify(cfg));
    return path;
  };
  const prompt = Array.from({ length: 70 }, (_, i) => (i * 37 + 11) % 383);

  for (const name of MODELS) {
    const dir = refModelDir(name);
    it(`${name}'s config loads with --load-format dummy and decodes`, {
      skip: dir === null && `${name} not found`,
    }, async () => {
      const cfg = JSON.parse(readFileSync(join(dir!, "config.json"), "utf8")) as Record<string, unknown>;
      const path = folder(name, cfg);
      const [a] = await generate({ model: path, loadFormat: "dummy", maxModelLen: 128 }, [prompt], 6);
      const [b] = await generate({ model: path, loadFormat: "dummy", maxModelLen: 128 }, [prompt], 6);
      assert.equal(a!.outputs[0]!.tokenIds.length, 6);
      assert.deepEqual(a!.outputs[0]!.tokenIds, b!.outputs[0]!.tokenIds, "same seed, same tokens");
    });
  }

  it("GLM-5 with shared indexer layers: alone, batched, chunked and preempted decode the same tokens", async (t) => {
    const dir = refModelDir("tiny-glm5-dsa-pv");
    if (dir === null) return t.skip("tiny-glm5-dsa-pv not found");
    const cfg = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
    const path = folder("glm5-shared", { ...cfg, indexer_types: ["full", "shared", "full", "shared"] });
    const prompts = [prompt, prompt.slice(0, 9), prompt.slice(20, 60)];
    const base = { model: path, loadFormat: "dummy" as const, maxModelLen: 96 };
    const solo: number[][] = [];
    for (const p of prompts) solo.push((await generate(base, [p], 12))[0]!.outputs[0]!.tokenIds);
    const tight = await generate(
      { ...base, blockSize: 4, numGpuBlocksOverride: 30, maxNumBatchedTokens: 16 },
      prompts,
      12,
    );
    assert.ok(lastPreemptions > 0, "the tight pool must force a preemption");
    for (const [i, o] of tight.entries()) assert.deepEqual(o.outputs[0]!.tokenIds, solo[i], `prompt ${i}`);
  });
});
