/**
 * Perplexity: windows cut exactly, forced decoding requested as the protocol says, the figure
 * computed from the returned logprobs; and on the real engine, a repetitive text scores near 1.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Rng } from "../../../src/bench/rng.js";
import type { SamplingParams } from "../../../src/core/sampling_params.js";
import { LLM } from "../../../src/engine/llm.js";
import type { PromptInput } from "../../../src/engine/llm_engine.js";
import type { RequestOutput } from "../../../src/engine/outputs.js";
import { pplWindows, runPpl } from "../../../src/eval/ppl.js";

describe("perplexity", () => {
  it("windows are consecutive ctx-token slices; the short tail is dropped", () => {
    const ids = Array.from({ length: 10 }, (_, i) => i);
    assert.deepEqual(pplWindows(ids, { ctx: 4, prefixTokens: 2, maxWindows: null }), [
      [0, 1, 2, 3],
      [4, 5, 6, 7],
    ]);
    assert.deepEqual(pplWindows(ids, { ctx: 3, prefixTokens: 1, maxWindows: 1 }), [[0, 1, 2]]);
    assert.throws(
      () => pplWindows(ids, { ctx: 11, prefixTokens: 5, maxWindows: null }),
      /the text has 10 tokens, fewer than one --ctx window of 11/,
    );
    assert.throws(
      () => pplWindows(ids, { ctx: 4, prefixTokens: 4, maxWindows: null }),
      /--prefix-tokens must be in \[1, --ctx − 1\], got 4 with --ctx 4/,
    );
  });

  it("forces the scored tokens and sums their logprobs", async () => {
    const seen: { prompts: PromptInput[]; params: Partial<SamplingParams>[] }[] = [];
    // Scripted logprobs: window 0 scores ln(1/2), ln(1/4); window 1 scores ln(1/8), ln(1/2).
    const lps = [
      [Math.log(1 / 2), Math.log(1 / 4)],
      [Math.log(1 / 8), Math.log(1 / 2)],
    ];
    const llm = {
      async generate(
        prompts: PromptInput | PromptInput[],
        params: Partial<SamplingParams> | Partial<SamplingParams>[] = {},
      ) {
        seen.push({ prompts: prompts as PromptInput[], params: params as Partial<SamplingParams>[] });
        return lps.map(
          (w) =>
            ({ outputs: [{ logprobs: w.map((l) => ({ sampledLogprob: l })) }] }) as unknown as RequestOutput,
        );
      },
    };
    const r = await runPpl(
      llm,
      [
        [5, 6, 7, 8],
        [9, 10, 11, 12],
      ],
      2,
    );
    assert.deepEqual(seen[0]!.prompts, [{ promptTokenIds: [5, 6] }, { promptTokenIds: [9, 10] }]);
    assert.deepEqual(seen[0]!.params[1], {
      temperature: 0,
      maxTokens: 2,
      ignoreEos: true,
      logprobs: 0,
      forcedTokenIds: [11, 12],
    });
    // NLL = ln 2 + ln 4 + ln 8 + ln 2 = 7 ln 2 over 4 tokens: ppl = 2^(7/4).
    assert.ok(Math.abs(r.nll - 7 * Math.LN2) < 1e-12);
    assert.equal(r.numScoredTokens, 4);
    assert.ok(Math.abs(r.perplexity - 2 ** (7 / 4)) < 1e-12);
    assert.ok(Math.abs(r.windows[1]!.nll - 4 * Math.LN2) < 1e-12);
  });

  it("ref-small: a repeated line scores near 1 after its prefix, random tokens far above", async () => {
    const llm = new LLM({ device: "cpu", maxModelLen: 256 });
    try {
      const tok = (await llm.getEngine()).tokenizer!;
      const ids = tok.encode("int main(void) { return 0; }\n".repeat(40), { addSpecialTokens: false });
      const r = await runPpl(llm, pplWindows(ids, { ctx: 128, prefixTokens: 64, maxWindows: 2 }), 64);
      assert.equal(r.numScoredTokens, 128);
      assert.ok(r.perplexity >= 1 && r.perplexity < 1.2, `perplexity ${r.perplexity}`);
      const rng = new Rng(1);
      const noise = Array.from({ length: 128 }, () => rng.integer(10, 16000));
      const n = await runPpl(llm, pplWindows(noise, { ctx: 128, prefixTokens: 64, maxWindows: 1 }), 64);
      assert.ok(n.perplexity > 1000, `perplexity of random tokens ${n.perplexity}`);
    } finally {
      await llm.shutdown();
    }
  });
});
