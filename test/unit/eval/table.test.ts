/** The side-by-side tables, character for character. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  countOf,
  markdownTable,
  needleHeading,
  needleTable,
  pplHeading,
  pplTable,
} from "../../../src/eval/table.js";

describe("eval tables", () => {
  it("aligns label columns left and value columns right", () => {
    assert.deepEqual(
      markdownTable(
        ["k", "value"],
        [
          ["a", "1"],
          ["bb", "22.5"],
        ],
      ),
      ["| k   | value |", "|-----|------:|", "| a   |     1 |", "| bb  |  22.5 |"],
    );
  });

  it("needle: one row per cell, one column per variant", () => {
    const cells = (h: number) => [
      { length: 512, depth: 0, trials: 2, hits: h, accuracy: h / 2 },
      { length: 512, depth: null, trials: 2, hits: h, accuracy: h / 2 },
      { length: null, depth: null, trials: 2, hits: h, accuracy: h / 2 },
    ];
    assert.deepEqual(
      needleTable([
        { name: "dense", cells: cells(2) },
        { name: "sparse", cells: cells(1) },
      ]),
      [
        "| length | depth |        dense |      sparse |",
        "|--------|-------|-------------:|------------:|",
        "| 512    | 0%    | 100.0% (2/2) | 50.0% (1/2) |",
        "| 512    | all   | 100.0% (2/2) | 50.0% (1/2) |",
        "| all    | all   | 100.0% (2/2) | 50.0% (1/2) |",
      ],
    );
  });

  it("ppl: perplexity and the change against the first variant", () => {
    const r = (p: number) => ({
      nll: Math.log(p) * 100,
      numScoredTokens: 100,
      numWindows: 2,
      perplexity: p,
      windows: [],
    });
    const lines = pplTable([
      { name: "dense", result: r(10) },
      { name: "topk", result: r(10.25) },
    ]);
    assert.deepEqual(lines.slice(2, 4), [
      "| perplexity         | 10.0000 | 10.2500 |",
      "| vs dense           |  +0.00% |  +2.50% |",
    ]);
  });

  it("headings: a count of 1 takes the singular noun (a user saw '1 windows')", () => {
    assert.deepEqual(
      [countOf(0, "window"), countOf(1, "window"), countOf(2, "window")],
      ["0 windows", "1 window", "2 windows"],
    );
    assert.equal(
      pplHeading("a.txt", 1, 64, 32),
      "Perplexity of a.txt: 1 window of 64 tokens, 32 prefilled, 32 scored by forced decoding",
    );
    assert.equal(
      pplHeading("a.txt", 3, 64, 63),
      "Perplexity of a.txt: 3 windows of 64 tokens, 63 prefilled, 1 scored by forced decoding",
    );
    assert.equal(
      needleHeading(1, [1, 1], ["a.txt"]),
      "Passkey retrieval: 1 document per cell, 1 needle each, greedy, filler: a.txt",
    );
    assert.equal(
      needleHeading(4, [1, 3], ["a.txt", "b.txt"]),
      "Passkey retrieval: 4 documents per cell, 1-3 needles each, greedy, filler: a.txt, b.txt",
    );
  });
});
