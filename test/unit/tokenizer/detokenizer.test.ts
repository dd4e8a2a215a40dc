import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { IncrementalDetokenizer, REPLACEMENT_CHAR } from "../../../src/tokenizer/detokenizer.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { writeByteFallbackTokenizer } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const tok = Tokenizer.fromDir(join(ROOT, "models/ref-small"));
const FIXTURE = JSON.parse(
  readFileSync(new URL("./fixtures/hf-ref-small-tokens.json", import.meta.url), "utf8"),
) as {
  cases: { input_ids: number[]; greedy_ids: number[]; greedy_text: string }[];
};
const tmp = mkdtempSync(join(tmpdir(), "hisparse-detok-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Streams `ids` one token at a time; returns the per-token deltas and the flushed tail. */
function stream(d: IncrementalDetokenizer, ids: readonly number[]): { deltas: string[]; tail: string } {
  const deltas = ids.map((id) => d.push(id));
  return { deltas, tail: d.flush() };
}

describe("IncrementalDetokenizer: byte-level BPE (ref-small)", () => {
  it("holds back split UTF-8 characters (emoji, CJK) and never emits U+FFFD mid-stream", () => {
    const text = "Hello 😀 世界 — naïve ✓ 中文字符 🎉🎉";
    const ids = tok.encode(text);
    assert.equal(ids.length, 32);
    const d = new IncrementalDetokenizer(tok, { skipSpecialTokens: true });
    const { deltas, tail } = stream(d, ids);
    // "Hello", " ", then the emoji's four byte tokens: three pending, the fourth completes it.
    assert.deepEqual(deltas.slice(0, 8), ["Hello", " ", "", "", "", "😀", " ", ""]);
    for (const delta of deltas) assert.ok(!delta.includes(REPLACEMENT_CHAR), JSON.stringify(delta));
    assert.equal(tail, "");
    assert.equal(deltas.join(""), text);
    assert.equal(d.output, tok.decode(ids));
  });

  it("reproduces HF's greedy_text token by token for every fixture case, in the prompt's context", () => {
    for (const c of FIXTURE.cases) {
      const d = new IncrementalDetokenizer(tok, { promptTokenIds: c.input_ids, skipSpecialTokens: true });
      const { deltas, tail } = stream(d, c.greedy_ids);
      assert.equal(deltas.join("") + tail, c.greedy_text);
      // Each delta is what the output grew by: prefixes of the final text.
      let acc = "";
      for (const delta of deltas) {
        acc += delta;
        assert.ok(c.greedy_text.startsWith(acc));
      }
    }
  });

  it("skips special tokens, or keeps them, like a full decode", () => {
    const ids = [...tok.encode("Hello"), 0, 3, ...tok.encode(" there")]; // [14577, 0, 3, 1316]
    const skip = new IncrementalDetokenizer(tok, { skipSpecialTokens: true });
    assert.deepEqual(stream(skip, ids).deltas, ["Hello", "", "", " there"]);
    assert.equal(skip.output, tok.decode(ids, { skipSpecialTokens: true }));
    const keep = new IncrementalDetokenizer(tok, { skipSpecialTokens: false });
    assert.deepEqual(stream(keep, ids).deltas, ["Hello", "<|endoftext|>", "<|assistant|>", " there"]);
    assert.equal(keep.output, "Hello<|endoftext|><|assistant|> there");
  });

  it("flush emits a character left incomplete at the end as U+FFFD, as a full decode does", () => {
    const emoji = tok.encode("a 😀"); // a, Ġ, then 4 byte tokens
    const cut = emoji.slice(0, -1);
    const d = new IncrementalDetokenizer(tok, { skipSpecialTokens: true });
    const { deltas, tail } = stream(d, cut);
    assert.deepEqual(deltas, ["a", " ", "", "", ""]);
    assert.equal(tail, REPLACEMENT_CHAR);
    assert.equal(d.output, tok.decode(cut));
    assert.equal(d.flush(), "");
  });
});

describe("IncrementalDetokenizer: SentencePiece byte fallback", () => {
  const dir = join(tmp, "bf");
  writeByteFallbackTokenizer(dir);
  const sp = Tokenizer.fromDir(dir);

  it("assembles <0xXX> byte tokens into characters and keeps word spaces", () => {
    const ids = sp.encode("hello 世界 😀 hi"); // <s> first
    const d = new IncrementalDetokenizer(sp, { skipSpecialTokens: true });
    const { deltas, tail } = stream(d, ids);
    assert.deepEqual(deltas, ["", "hello", " ", "", "", "世", "", "", "界", " ", "", "", "", "😀", " hi"]);
    assert.equal(tail, "");
    assert.equal(d.output, sp.decode(ids, { skipSpecialTokens: true }));
  });

  it("the prompt's last tokens give the first output token its leading space", () => {
    const prompt = sp.encode("hello");
    const out = sp.encode("hi 世", { addSpecialTokens: false }); // ▁hi ▁ <E4 B8 96>
    const d = new IncrementalDetokenizer(sp, { promptTokenIds: prompt, skipSpecialTokens: true });
    assert.deepEqual(stream(d, out).deltas, [" hi", " ", "", "", "世"]);
    const full = sp.decode([...prompt, ...out], { skipSpecialTokens: true });
    assert.equal(d.output, full.slice(sp.decode(prompt, { skipSpecialTokens: true }).length));
  });
});
