/**
 * The engine end to end on the CPU backend (worker thread executor, as `hisparse generate` runs
 * it): greedy outputs of ref-small and ref-base equal HF transformers' for the fixture prompts
 * when the five prompts run as one batch; batching, chunked prefill and preemption are invisible
 * in the tokens; forced-token scoring reports the same logprobs as sampling.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { LLM } from "../../../src/engine/llm.js";
import type { RequestOutput } from "../../../src/engine/outputs.js";
import { describeIfFound, loadFixture, type RefModel, refModelDir } from "../../helpers/reference.js";

/** A greedy divergence from HF is accepted only where the engine's top-2 logits differ by less. */
const TIE_EPS = 1e-3;

/**
 * Checks one output against HF's greedy ids: identical, or diverging only at a step where the
 * engine's own top-2 logprobs (= logits gap) are within TIE_EPS.
 */
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

for (const name of ["ref-small", "ref-base"] as RefModel[]) {
  const dir = refModelDir(name);
  describeIfFound(`engine greedy vs HF: ${name}`, name, dir, () => {
    let llm: LLM;
    before(() => {
      llm = new LLM({ model: dir!, device: "cpu", maxModelLen: 256 });
    });
    after(() => llm.shutdown());

    it("five fixture prompts in one batch: 48 greedy tokens equal HF's", async () => {
      const cases = loadFixture(name);
      const outs = await llm.generate(
        cases.map((c) => ({ promptTokenIds: c.input_ids })),
        { temperature: 0, maxTokens: 48, ignoreEos: true, logprobs: 2 },
      );
      for (const [i, c] of cases.entries()) assertGreedyMatches(outs[i]!, c.greedy_ids, `case ${i}`);
      // Text is the tokenizer's decode of the ids (streamed through the incremental detokenizer).
      assert.equal(outs[0]!.outputs[0]!.text.length > 0, true);
    });
  });
}

describe("batching is invisible (ref-small)", () => {
  const prompts = [
    "The Linux kernel",
    "int main(int argc, char **argv) {",
    "PostgreSQL is a powerful, open source object-relational database system that uses and extends the SQL language",
    "Once upon a time",
    "def fibonacci(n):",
    "The access code for the amber falcon vault is 48213. Remember it well, because the door will not open without it.",
    "#include <stdio.h>\n#include <stdlib.h>\n",
    "Perl is a highly capable, feature-rich programming language with over 30 years of development.",
  ];
  const params = { temperature: 0, maxTokens: 24, ignoreEos: true };

  it("8 requests together, with chunked prefill and preemption, equal each run alone", async () => {
    const alone = new LLM({ device: "cpu", maxModelLen: 256 });
    const solo: number[][] = [];
    try {
      for (const p of prompts) solo.push((await alone.generate(p, params))[0]!.outputs[0]!.tokenIds);
    } finally {
      await alone.shutdown();
    }
    // 16 blocks of 4 tokens (64 slots) cannot hold 8 requests of 5-31 prompt + 24 output tokens:
    // the scheduler must preempt; a 16-token budget forces chunked prefill of the long prompts.
    const tight = new LLM({
      device: "cpu",
      maxModelLen: 64,
      blockSize: 4,
      numGpuBlocksOverride: 16,
      maxNumBatchedTokens: 16,
    });
    try {
      const engine = await tight.getEngine();
      const outs = await tight.generate(prompts, params);
      const stats = engine.scheduler.makeStats();
      assert.ok(stats.numPreemptions > 0, "the tight pool must force at least one preemption");
      for (const [i, o] of outs.entries()) assert.deepEqual(o.outputs[0]!.tokenIds, solo[i], `prompt ${i}`);
      assert.equal(engine.scheduler.kvCacheManager.numFreeBlocks, 16, "every block is free again");
    } finally {
      await tight.shutdown();
    }
  });

  it("forced tokens score a continuation with the logprobs sampling reported", async () => {
    const llm = new LLM({ device: "cpu", maxModelLen: 128 });
    try {
      const [g] = await llm.generate("The Linux kernel", {
        temperature: 0,
        maxTokens: 8,
        ignoreEos: true,
        logprobs: 1,
      });
      const ids = g!.outputs[0]!.tokenIds;
      const [f] = await llm.generate("The Linux kernel", {
        temperature: 0,
        maxTokens: ids.length,
        ignoreEos: true,
        logprobs: 0,
        forcedTokenIds: ids,
      });
      assert.deepEqual(f!.outputs[0]!.tokenIds, ids);
      const a = g!.outputs[0]!.logprobs!.map((l) => l.sampledLogprob);
      const b = f!.outputs[0]!.logprobs!.map((l) => l.sampledLogprob);
      assert.deepEqual(b, a);
    } finally {
      await llm.shutdown();
    }
  });
});
