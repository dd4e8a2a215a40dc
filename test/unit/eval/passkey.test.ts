/**
 * Passkey documents in the models' format (/work/shared/models/README.md): exact needle and
 * question text, needles at sentence starts at the asked depth, length within the budget.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { Rng } from "../../../src/bench/rng.js";
import {
  buildPasskeyDoc,
  drawNeedles,
  insertSentences,
  isHit,
  needleSentence,
  questionText,
  sentenceStartAtOrAfter,
} from "../../../src/eval/passkey.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";

/** Real prose-like filler (numbered sentences, so positions can be read back). */
const FILLER = Array.from(
  { length: 400 },
  (_, i) => `Sentence ${i} says that free software may be copied.`,
).join(" ");

describe("passkey documents", () => {
  let tok: Tokenizer;
  before(() => {
    tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
  });

  it("needle and question text are the README's, byte for byte", () => {
    const n = { name: "amber falcon", code: "48213" };
    assert.equal(needleSentence(n), "The access code for the amber falcon vault is 48213.");
    assert.equal(
      questionText(n.name),
      "\nQuestion: What is the access code for the amber falcon vault?\nAnswer: The access code for the amber falcon vault is",
    );
  });

  it("needles have distinct names and 5-digit codes", () => {
    const ns = drawNeedles(4, new Rng(3));
    assert.equal(new Set(ns.map((n) => n.name)).size, 4);
    assert.equal(new Set(ns.map((n) => n.code)).size, 4);
    for (const n of ns) {
      assert.match(n.code, /^[1-9]\d{4}$/);
      assert.match(n.name, /^[a-z]+ [a-z]+$/);
    }
  });

  it("sentences go in at the next sentence start, with spacing kept", () => {
    const text = "One. Two three.\nFour five. Six.";
    assert.equal(sentenceStartAtOrAfter(text, 0), 0);
    assert.equal(sentenceStartAtOrAfter(text, 1), 5); // after "One. "
    assert.equal(sentenceStartAtOrAfter(text, 6), 16); // after the newline
    assert.equal(sentenceStartAtOrAfter(text, 28), 31); // end of text
    assert.equal(
      insertSentences(text, [
        { fraction: 0, sentence: "A." },
        { fraction: 0.1, sentence: "B." }, // position 3 → after "One. "
        { fraction: 1, sentence: "C." },
      ]),
      "A. One. B. Two three.\nFour five. Six. C.",
    );
  });

  it("a document fits its length, ends with the question and holds every needle once", () => {
    const ids = tok.encode(FILLER, { addSpecialTokens: false });
    for (const [length, depth, k] of [
      [256, 0, 1],
      [512, 0.5, 3],
      [300, 1, 4],
    ] as const) {
      const d = buildPasskeyDoc(tok, ids, { length, depth, numNeedles: k }, new Rng(length));
      assert.ok(
        d.promptTokenIds.length <= length && d.promptTokenIds.length > length - 24,
        `${d.promptTokenIds.length} tokens for ${length}`,
      );
      assert.deepEqual(d.promptTokenIds, tok.encode(d.prompt, { addSpecialTokens: false }));
      assert.ok(d.prompt.endsWith(questionText(d.needle.name)));
      const body = d.prompt.slice(0, -questionText(d.needle.name).length);
      const pos = body.indexOf(needleSentence(d.needle));
      assert.ok(pos >= 0 && body.indexOf(needleSentence(d.needle), pos + 1) < 0);
      assert.equal((body.match(/The access code for the /g) ?? []).length, k);
      // The queried needle sits near its depth (a sentence here is ~55 characters).
      assert.ok(Math.abs(pos / body.length - depth) < 0.15, `depth ${depth}: at ${pos}/${body.length}`);
      assert.equal(d.depth, depth);
      assert.equal(d.length, length);
    }
  });

  it("a hit is a continuation that starts with the code", () => {
    assert.equal(isHit(" 48213.", "48213"), true);
    assert.equal(isHit("\n48213", "48213"), true);
    assert.equal(isHit(" 4821", "48213"), false);
    assert.equal(isHit(" the code 48213", "48213"), false);
  });

  it("a filler too short for the length is refused", () => {
    const ids = tok.encode("Too short. Really.", { addSpecialTokens: false });
    assert.throws(
      () => buildPasskeyDoc(tok, ids, { length: 256, depth: 0.5, numNeedles: 1 }, new Rng(0)),
      /the filler text has \d+ tokens; a 256-token document needs more/,
    );
  });
});
