/** The rounds and column labels of bench/hisparse_throughput.ts (bench/throughput_rounds.ts). */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  checkPrefetchRounds,
  parseOverlaps,
  parsePrefetches,
  roundLabel,
  roundLabelsOf,
  roundsOfMode,
  uniqueLabels,
} from "../../../bench/throughput_rounds.js";

describe("hisparse_throughput rounds", () => {
  it("parses --overlap and --row-prefetch, refusing values outside their sets in one line", () => {
    assert.deepEqual(parseOverlaps(""), [null]);
    assert.deepEqual(parseOverlaps("0,0.87"), [0, 0.87]);
    assert.throws(
      () => parseOverlaps("1.5"),
      /^Error: --overlap must be probabilities in \[0, 1\], got 1.5$/,
    );
    assert.deepEqual(parsePrefetches(""), [null]);
    assert.deepEqual(parsePrefetches("on,off,on"), [true, false, true]);
    assert.throws(
      () => parsePrefetches("on,maybe"),
      /^Error: --row-prefetch takes on and\/or off, got on,maybe$/,
    );
  });

  it("off runs one round; HiSparse modes one per overlap x prefetch setting, labelled by what varies", () => {
    assert.deepEqual(roundsOfMode(true, [0.87], [true, false]), [{ p: null, prefetch: null }]);
    const rounds = roundsOfMode(false, [0, 0.87], [true, false]);
    assert.deepEqual(rounds, [
      { p: 0, prefetch: true },
      { p: 0, prefetch: false },
      { p: 0.87, prefetch: true },
      { p: 0.87, prefetch: false },
    ]);
    assert.deepEqual(
      rounds.map((r) => roundLabel("auto", r, true)),
      [
        "auto p=0 [prefetch on]",
        "auto p=0 [prefetch off]",
        "auto p=0.87 [prefetch on]",
        "auto p=0.87 [prefetch off]",
      ],
    );
    assert.equal(roundLabel("auto", { p: 0.87, prefetch: null }, false), "auto");
    assert.deepEqual(roundLabelsOf(["off", "auto", "auto", "on"]), ["off", "auto#1", "auto#2", "on"]);
  });

  it("repeated round labels are numbered, so --row-prefetch on,off,on,off gives four distinct columns", () => {
    const rows = roundsOfMode(false, [null], [true, false, true, false]).map((r) =>
      roundLabel("auto", r, false),
    );
    assert.deepEqual(uniqueLabels([["off"], rows]), [
      ["off"],
      ["auto [prefetch on]#1", "auto [prefetch off]#1", "auto [prefetch on]#2", "auto [prefetch off]#2"],
    ]);
  });

  it("--row-prefetch needs a DSA model", () => {
    assert.throws(() => checkPrefetchRounds([true, false], null), /^Error: --row-prefetch is for DSA models/);
    checkPrefetchRounds([null], null);
    checkPrefetchRounds([true], ["full", "shared"]);
  });
});
