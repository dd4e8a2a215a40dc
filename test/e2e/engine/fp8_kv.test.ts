/**
 * `--kv-cache-dtype fp8` end to end on the CPU backend (the e4m3 oracle, src/backends/fp8.ts):
 * ref-small scores HF's greedy continuations of the fixture prompts (forced tokens, one decode
 * step each, after a prefill that reads the fp8 cache too) with a negative log-likelihood within
 * 1% of the f32 cache's, and the fp8 run differs from f32 (the cache really is rounded).
 */
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { LLM } from "../../../src/engine/llm.js";
import { describeIfFound, loadFixture, refModelDir } from "../../helpers/reference.js";

const dir = refModelDir("ref-small");

describeIfFound("fp8 KV cache on the CPU backend: ref-small", "ref-small", dir, () => {
  let f32: LLM;
  let fp8: LLM;
  before(() => {
    f32 = new LLM({ model: dir!, device: "cpu", maxModelLen: 256 });
    fp8 = new LLM({ model: dir!, device: "cpu", maxModelLen: 256, kvCacheDtype: "fp8" });
  });
  after(async () => {
    await f32.shutdown();
    await fp8.shutdown();
  });

  it("HF's greedy continuations score within 1% of the f32 cache's NLL", async (t) => {
    const cases = loadFixture("ref-small");
    /** Σ -log p of each case's HF greedy ids, forced after its prompt. */
    const nll = async (llm: LLM) => {
      const outs = await llm.generate(
        cases.map((c) => ({ promptTokenIds: c.input_ids })),
        cases.map((c) => ({
          temperature: 0,
          maxTokens: c.greedy_ids.length,
          ignoreEos: true,
          logprobs: 0,
          forcedTokenIds: c.greedy_ids,
        })),
      );
      return outs.map((o) => -o.outputs[0]!.logprobs!.reduce((s, l) => s + l.sampledLogprob, 0));
    };
    const a = await nll(f32);
    const b = await nll(fp8);
    const total = (v: number[]) => v.reduce((s, x) => s + x, 0);
    const rel = (total(b) - total(a)) / total(a);
    t.diagnostic(`NLL f32 ${total(a).toFixed(4)}, fp8 ${total(b).toFixed(4)} (${(100 * rel).toFixed(3)}%)`);
    assert.ok(
      Math.abs(rel) < 0.01,
      `NLL f32 ${total(a).toFixed(3)} vs fp8 ${total(b).toFixed(3)} (${(100 * rel).toFixed(2)}%)`,
    );
    assert.notDeepEqual(b, a, "the fp8 cache changes the logprobs");
  });
});
