/**
 * Benchmark datasets with the bundled ref-small tokenizer: lengths drawn as vLLM draws them,
 * prompts whose token counts are what the request reports, reproducible by seed; ShareGPT
 * filtering and oversampling; one-sentence errors for bad inputs.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type DatasetName,
  type DatasetOptions,
  getSamples,
  lognormalLengths,
  SHAREGPT_MAX_PROMPT_LEN,
  uniformLengths,
} from "../../../src/bench/datasets.js";
import { Rng } from "../../../src/bench/rng.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";

const opts = (name: DatasetName, over: Partial<DatasetOptions> = {}): DatasetOptions => ({
  name,
  numPrompts: 6,
  inputLen: 64,
  outputLen: 16,
  rangeRatio: 0.5,
  lognormalSigma: 0.5,
  ...over,
});

describe("bench datasets", () => {
  let tok: Tokenizer;
  let dir: string;
  const sentence = (i: number) =>
    `Line ${i}: the kernel schedules tasks and frees pages when memory is low.\n`;
  before(() => {
    tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
    dir = mkdtempSync(join(tmpdir(), "hisparse-ds-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("random: lengths uniform in [32, 96] and [8, 24]; each prompt re-encodes to its promptLen", () => {
    const [ins, outs] = uniformLengths(opts("random"), 0, new Rng(9));
    const samples = getSamples(tok, opts("random"), new Rng(9));
    assert.deepEqual(
      samples.map((s) => s.expectedOutputLen),
      outs,
    );
    for (const [i, s] of samples.entries()) {
      assert.ok(ins[i]! >= 32 && ins[i]! <= 96 && outs[i]! >= 8 && outs[i]! <= 24);
      assert.equal(tok.encode(s.prompt, { addSpecialTokens: false }).length, s.promptLen, `prompt ${i}`);
      assert.equal(s.promptLen, ins[i], `prompt ${i} has the drawn length`);
    }
    assert.deepEqual(getSamples(tok, opts("random"), new Rng(9)), samples, "same seed, same prompts");
    assert.notDeepEqual(getSamples(tok, opts("random"), new Rng(10)), samples);
  });

  it("lognormal: mean lengths near the targets, clipped to [1, 4 × mean]", () => {
    const [ins, outs] = lognormalLengths(
      { ...opts("lognormal"), numPrompts: 4000, inputLen: 1000 },
      0.5,
      new Rng(2),
    );
    const m = ins.reduce((a, b) => a + b, 0) / ins.length;
    assert.ok(Math.abs(m / 1000 - 1) < 0.03, `mean ${m}`);
    assert.ok(ins.every((x) => x >= 1 && x <= 4000) && outs.every((x) => x >= 1 && x <= 64));
    const samples = getSamples(tok, opts("lognormal", { numPrompts: 3 }), new Rng(4));
    for (const s of samples)
      assert.equal(tok.encode(s.prompt, { addSpecialTokens: false }).length, s.promptLen);
  });

  it("file: windows of real text at random offsets, lengths as drawn", () => {
    const path = join(dir, "doc.txt");
    const text = Array.from({ length: 200 }, (_, i) => sentence(i)).join("");
    writeFileSync(path, text);
    const [ins] = uniformLengths(opts("file"), 0, new Rng(5));
    const samples = getSamples(tok, opts("file", { path }), new Rng(5));
    for (const [i, s] of samples.entries()) {
      assert.equal(s.promptLen, ins[i]);
      assert.ok(text.includes(s.prompt), `prompt ${i} is a piece of the file`);
    }
  });

  it("sharegpt: skips one-turn, too short and too long pairs; oversamples to the count", () => {
    const path = join(dir, "sg.json");
    const long = "word ".repeat(SHAREGPT_MAX_PROMPT_LEN + 10);
    const conv = (h: string, g: string) => ({
      conversations: [
        { from: "human", value: h },
        { from: "gpt", value: g },
      ],
    });
    writeFileSync(
      path,
      JSON.stringify([
        { conversations: [{ from: "human", value: "only one turn here, which is skipped" }] },
        conv("hi", "a reply that is long enough to count"),
        conv(long, "a reply that is long enough to count"),
        conv("What does the scheduler do with waiting requests?", "It admits them in arrival order."),
        conv("How are KV cache blocks freed after a request?", "They return to the free queue."),
      ]),
    );
    const samples = getSamples(tok, opts("sharegpt", { path, numPrompts: 5 }), new Rng(1));
    assert.equal(samples.length, 5);
    const prompts = new Set(samples.map((s) => s.prompt));
    assert.deepEqual([...prompts].sort(), [
      "How are KV cache blocks freed after a request?",
      "What does the scheduler do with waiting requests?",
    ]);
    for (const s of samples) {
      assert.equal(s.promptLen, tok.encode(s.prompt).length);
      const reply = s.prompt.startsWith("What")
        ? "It admits them in arrival order."
        : "They return to the free queue.";
      assert.equal(s.expectedOutputLen, tok.encode(reply).length);
    }
    const fixed = getSamples(
      tok,
      opts("sharegpt", { path, numPrompts: 2, sharegptOutputLen: 7 }),
      new Rng(1),
    );
    assert.deepEqual(
      fixed.map((s) => s.expectedOutputLen),
      [7, 7],
    );
  });

  it("bad inputs give one-sentence errors", () => {
    assert.throws(
      () => getSamples(tok, opts("file"), new Rng(0)),
      /^DatasetError: --dataset-name file needs --dataset-path FILE$/,
    );
    assert.throws(
      () => getSamples(tok, opts("file", { path: join(dir, "nope.txt") }), new Rng(0)),
      /cannot read dataset file .*nope\.txt \(ENOENT\)/,
    );
    const small = join(dir, "small.txt");
    writeFileSync(small, "a few words");
    assert.throws(
      () => getSamples(tok, opts("file", { path: small }), new Rng(0)),
      /small\.txt has \d+ tokens, fewer than the \d+ a prompt needs/,
    );
    const bad = join(dir, "bad.json");
    writeFileSync(bad, "{not json");
    assert.throws(
      () => getSamples(tok, opts("sharegpt", { path: bad }), new Rng(0)),
      /bad\.json is not valid JSON/,
    );
    assert.throws(
      () => getSamples(tok, opts("nope" as DatasetName), new Rng(0)),
      /unknown dataset nope \(choose one of: random, lognormal, file, sharegpt, multiturn\)/,
    );
    assert.throws(
      () => getSamples(tok, opts("random", { rangeRatio: 1 }), new Rng(0)),
      /--random-range-ratio must be in \[0, 1\)/,
    );
  });
});
