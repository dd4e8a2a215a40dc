import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { IncrementalDetokenizer } from "../../../src/tokenizer/detokenizer.js";
import { StopStringChecker } from "../../../src/tokenizer/stop_strings.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

describe("StopStringChecker", () => {
  it("finds a stop string split across pieces and holds back the part that may become one", () => {
    const c = new StopStringChecker(["\n\nUser:"]);
    // step 1: "Answer\n" - the "\n" could start the stop string, so it is held back.
    assert.deepEqual(c.push("Answer\n"), { text: "Answer", stop: null });
    // step 2: "\nUs" - the whole tail "\n\nUs" is still a prefix of the stop string.
    assert.deepEqual(c.push("\nUs"), { text: "", stop: null });
    // step 3: "er: hi" completes "\n\nUser:" - the held tail and the rest are dropped.
    assert.deepEqual(c.push("er: hi"), { text: "", stop: "\n\nUser:" });
    assert.equal(c.output, "Answer");
    assert.equal(c.stop, "\n\nUser:");
    // After the match nothing more is released.
    assert.deepEqual(c.push("more"), { text: "", stop: "\n\nUser:" });
    assert.equal(c.flush(), "");
  });

  it("releases a held tail as soon as it can no longer become a stop string", () => {
    const c = new StopStringChecker(["STOP"]);
    assert.deepEqual(c.push("go ST"), { text: "go ", stop: null });
    assert.deepEqual(c.push("O"), { text: "", stop: null });
    assert.deepEqual(c.push("NE"), { text: "STONE", stop: null });
    assert.deepEqual(c.push("S"), { text: "", stop: null });
    assert.equal(c.flush(), "S");
    assert.equal(c.output, "go STONES");
    assert.equal(c.stop, null);
  });

  it("cuts at the earliest match; at one position the first listed stop wins", () => {
    const c = new StopStringChecker(["world", "lo w"]);
    assert.deepEqual(c.push("hello world"), { text: "hel", stop: "lo w" });
    const same = new StopStringChecker(["ab", "abc"]);
    assert.deepEqual(same.push("xxabc"), { text: "xx", stop: "ab" });
  });

  it("a match inside one piece, including the stop string in the output when asked", () => {
    const c = new StopStringChecker(["</s>"], { includeStopStrInOutput: true });
    assert.deepEqual(c.push("a</"), { text: "a", stop: null });
    assert.deepEqual(c.push("s>tail"), { text: "</s>", stop: "</s>" });
    assert.equal(c.output, "a</s>");
  });

  it("without stop strings everything streams through", () => {
    const c = new StopStringChecker([]);
    assert.deepEqual(c.push("abc"), { text: "abc", stop: null });
    assert.equal(c.flush(), "");
  });

  it("on model output: stops at ' of the value' across token boundaries (ref-small fixture)", () => {
    const tok = Tokenizer.fromDir(join(ROOT, "models/ref-small"));
    const fixture = JSON.parse(
      readFileSync(new URL("./fixtures/hf-ref-small-tokens.json", import.meta.url), "utf8"),
    ) as { cases: { input_ids: number[]; greedy_ids: number[]; greedy_text: string }[] };
    const c0 = fixture.cases[0]!; // "-of-2)\n\nThe default value of the value of ..."
    const detok = new IncrementalDetokenizer(tok, { promptTokenIds: c0.input_ids, skipSpecialTokens: true });
    const stops = new StopStringChecker(["value of the value", "\n\nThe"]);
    let streamed = "";
    let stoppedAt = -1;
    for (let i = 0; i < c0.greedy_ids.length; i++) {
      const r = stops.push(detok.push(c0.greedy_ids[i]!));
      streamed += r.text;
      if (r.stop !== null) {
        stoppedAt = i;
        break;
      }
    }
    // "\n\nThe" is split over tokens 202, 202, 734 (indices 5..7) and matches first.
    assert.equal(stops.stop, "\n\nThe");
    assert.equal(stoppedAt, 7);
    assert.equal(streamed, "-of-2)");
    assert.equal(c0.greedy_text.indexOf("\n\nThe"), streamed.length);
  });
});
