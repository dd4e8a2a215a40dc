/** The needle evaluation's bookkeeping: depths, documents per cell, scoring and summaries. */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import type { SamplingParams } from "../../../src/core/sampling_params.js";
import type { PromptInput } from "../../../src/engine/llm_engine.js";
import type { RequestOutput } from "../../../src/engine/outputs.js";
import {
  buildNeedleDocs,
  evenDepths,
  type NeedleTrial,
  runNeedleTrials,
  summarizeNeedle,
} from "../../../src/eval/needle.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";

/** An engine stand-in that answers each prompt with a scripted continuation. */
function scriptedLLM(answer: (promptIndex: number) => string) {
  const calls: { n: number; params: Partial<SamplingParams> }[] = [];
  return {
    calls,
    async generate(
      prompts: PromptInput | PromptInput[],
      params: Partial<SamplingParams> | Partial<SamplingParams>[] = {},
    ): Promise<RequestOutput[]> {
      const list = Array.isArray(prompts) ? prompts : [prompts];
      calls.push({ n: list.length, params: params as Partial<SamplingParams> });
      return list.map((_, i) => ({ outputs: [{ text: answer(i) }] }) as unknown as RequestOutput);
    },
  };
}

describe("needle evaluation", () => {
  it("--depths N spreads N depths from 0 to 1", () => {
    assert.deepEqual(evenDepths(5), [0, 0.25, 0.5, 0.75, 1]);
    assert.deepEqual(evenDepths(1), [0.5]);
    assert.throws(() => evenDepths(0), /the number of depths must be >= 1/);
  });

  it("documents: lengths × depths × trials, reproducible from the seed", () => {
    const tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
    const filler = tok.encode(
      Array.from({ length: 300 }, (_, i) => `Line ${i} of the licence text.`).join(" "),
      {
        addSpecialTokens: false,
      },
    );
    const o = {
      lengths: [128, 192],
      depths: [0, 1],
      trials: 3,
      needles: [1, 2] as const,
      seed: 5,
      maxTokens: 6,
    };
    const docs = buildNeedleDocs(tok, filler, o);
    assert.equal(docs.length, 12);
    assert.deepEqual(
      docs.map((d) => [d.length, d.depth]),
      [128, 192].flatMap((l) =>
        [0, 1].flatMap((d) => [
          [l, d],
          [l, d],
          [l, d],
        ]),
      ),
    );
    assert.ok(
      docs.every((d) => d.numNeedles >= 1 && d.numNeedles <= 2 && d.promptTokenIds.length <= d.length),
    );
    assert.deepEqual(buildNeedleDocs(tok, filler, o), docs);
  });

  it("trials are scored by code prefix and summarized per cell, per length and overall", async () => {
    const docs = [128, 128, 128, 128, 256, 256].map((length, i) => ({
      prompt: "",
      promptTokenIds: [1, 2, 3],
      needle: { name: "teal comet", code: String(10000 + i) },
      numNeedles: 1,
      depth: i % 2,
      length,
    }));
    // Hits: docs 0, 1, 3, 4 (doc 2 answers a wrong code, doc 5 nothing useful).
    const answers = [" 10000.", " 10001", " 99999", "\n10003", " 10004 and", " the code"];
    const llm = scriptedLLM((i) => answers[i]!);
    const trials = await runNeedleTrials(llm, docs, 6);
    assert.deepEqual(llm.calls, [{ n: 6, params: { temperature: 0, maxTokens: 6 } }]);
    assert.deepEqual(
      trials.map((t: NeedleTrial) => t.hit),
      [true, true, false, true, true, false],
    );
    const cells = summarizeNeedle(trials, { lengths: [128, 256], depths: [0, 1] });
    assert.deepEqual(
      cells.map((c) => [c.length, c.depth, c.hits, c.trials]),
      [
        [128, 0, 1, 2], // docs 0, 2
        [128, 1, 2, 2], // docs 1, 3
        [128, null, 3, 4],
        [256, 0, 1, 1], // doc 4
        [256, 1, 0, 1], // doc 5
        [256, null, 1, 2],
        [null, null, 4, 6],
      ],
    );
    assert.equal(cells[2]!.accuracy, 0.75);
  });
});
