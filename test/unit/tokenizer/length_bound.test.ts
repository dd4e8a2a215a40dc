/**
 * The token-count lower bound (tokenizer/length_bound.ts): which tokenizer.json shapes get a
 * bound and which are refused, that the bound is sound against the real encoders (no text
 * encodes to fewer tokens than it promises, including texts made of the longest tokens), and
 * the Unicode shrink factor over every code point.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  byteAlphabet,
  minTokensForBytes,
  tokenByteBound,
  UNICODE_SHRINK,
} from "../../../src/tokenizer/length_bound.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { writeByteFallbackTokenizer } from "./helpers.js";

const REF = fileURLToPath(new URL("../../../models/ref-small", import.meta.url));
const refJson = JSON.parse(readFileSync(join(REF, "tokenizer.json"), "utf8")) as Record<string, unknown>;
const tmp = mkdtempSync(join(tmpdir(), "hisparse-bound-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** ref-small's tokenizer.json with some top-level fields replaced. */
const variant = (fields: Record<string, unknown>) => ({ ...refJson, ...fields });
const model = refJson.model as Record<string, unknown>;

/** Texts that stress the bound: the longest tokens back to back, runs, mixed scripts. */
function stressTexts(tok: Tokenizer): string[] {
  const vocab = Object.keys(model.vocab as Record<string, number>);
  const byLength = [...vocab].sort((a, b) => [...b].length - [...a].length);
  const decode = (t: string) => tok.decode([tok.tokenToId(t)!]);
  return [
    byLength.slice(0, 50).map(decode).join(""),
    decode(byLength[0]!).repeat(40),
    "x".repeat(5000),
    " ".repeat(5000),
    "\n".repeat(3000),
    "-".repeat(4000),
    "日本語のテキスト、😀 emoji, e\u0301 combining, \u212a kelvin ".repeat(50),
    readFileSync(fileURLToPath(new URL("../../../README.md", import.meta.url)), "utf8").slice(0, 20_000),
    "<|endoftext|><|user|><|assistant|>".repeat(100),
  ];
}

describe("tokenByteBound: which tokenizers get a bound", () => {
  it("ref-small (byte-level BPE, no normalizer): the longest vocab entry in characters", () => {
    const b = tokenByteBound(refJson);
    const longest = Math.max(...Object.keys(model.vocab as object).map((t) => [...t].length));
    assert.equal(b.maxBytesPerToken, longest);
    assert.match(b.reason, /^byte-level BPE, longest token \d+ bytes$/);
  });

  it("byte-level with an NFC normalizer (Qwen2's): L × UNICODE_SHRINK", () => {
    const b = tokenByteBound(variant({ normalizer: { type: "NFC" } }));
    assert.equal(b.maxBytesPerToken, tokenByteBound(refJson).maxBytesPerToken! * UNICODE_SHRINK);
  });

  it("a literal Replace that shortens the text scales the bound by pattern/content bytes", () => {
    const n = {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: "▁" },
        { type: "Replace", pattern: { String: "abcd" }, content: "x" },
      ],
    };
    assert.equal(
      tokenByteBound(variant({ normalizer: n })).maxBytesPerToken,
      tokenByteBound(refJson).maxBytesPerToken! * 4,
    );
  });

  for (const [what, fields, reason] of [
    [
      "a Strip normalizer",
      { normalizer: { type: "Strip", strip_left: true, strip_right: true } },
      /normalizer Strip/,
    ],
    [
      "StripAccents inside a Sequence",
      { normalizer: { type: "Sequence", normalizers: [{ type: "NFD" }, { type: "StripAccents" }] } },
      /StripAccents/,
    ],
    [
      "a regex Replace",
      { normalizer: { type: "Replace", pattern: { Regex: "\\s+" }, content: " " } },
      /Replace \(regex\)/,
    ],
    [
      "a Replace to nothing",
      { normalizer: { type: "Replace", pattern: { String: "a" }, content: "" } },
      /to nothing/,
    ],
    ["a Whitespace pre-tokenizer", { pre_tokenizer: { type: "Whitespace" } }, /pre-tokenizer Whitespace/],
    [
      "a Split that removes",
      {
        pre_tokenizer: {
          type: "Sequence",
          pretokenizers: [{ type: "Split", behavior: "Removed" }, { type: "ByteLevel" }],
        },
      },
      /pre-tokenizer Split/,
    ],
    ["a WordPiece model", { model: { type: "WordPiece", vocab: {} } }, /WordPiece model/],
    ["a Unigram model", { model: { type: "Unigram", vocab: [] } }, /Unigram model/],
    ["BPE without byte level or byte fallback", { pre_tokenizer: null }, /without byte_fallback/],
    [
      "an added token that strips",
      { added_tokens: [{ id: 0, content: "<s>", lstrip: true, rstrip: false }] },
      /strips whitespace/,
    ],
  ] as const) {
    it(`no bound with ${what}`, () => {
      const b = tokenByteBound(variant(fields as Record<string, unknown>));
      assert.equal(b.maxBytesPerToken, null);
      assert.match(b.reason, reason);
      assert.equal(minTokensForBytes(10_000_000, b.maxBytesPerToken), 0);
    });
  }

  it("byte-level BPE missing a byte character gets no bound", () => {
    const vocab = { ...(model.vocab as Record<string, number>) };
    delete vocab[byteAlphabet()[0]!];
    assert.equal(tokenByteBound(variant({ model: { ...model, vocab } })).maxBytesPerToken, null);
  });

  it("byteAlphabet is GPT-2's: 256 distinct characters, all in ref-small's vocab", () => {
    const a = byteAlphabet();
    assert.equal(new Set(a).size, 256);
    assert.equal(a[0x41], "A");
    assert.equal(a[0x20], "Ġ");
    assert.equal(a[0x0a], "Ċ");
    for (const c of a) assert.ok(c in (model.vocab as object), c);
  });
});

describe("the bound is sound against the real encoders", () => {
  it("ref-small: no stress text encodes to fewer tokens than minTokens", () => {
    const tok = Tokenizer.fromDir(REF);
    for (const text of stressTexts(tok)) {
      const n = tok.encode(text).length;
      const min = tok.minTokens(text);
      assert.ok(min > 0 && n >= min, `${JSON.stringify(text.slice(0, 40))}: ${n} tokens, bound ${min}`);
    }
  });

  it("a text made only of the longest token meets the bound within one token", () => {
    const tok = Tokenizer.fromDir(REF);
    const vocab = Object.keys(model.vocab as Record<string, number>);
    const chars = (t: string) => Array.from(t).length;
    const longest = vocab.reduce((a, b) => (chars(b) > chars(a) ? b : a));
    const text = tok.decode([tok.tokenToId(longest)!]);
    assert.equal(Buffer.byteLength(text), tok.lengthBound.maxBytesPerToken);
    assert.equal(tok.minTokens(text), 1);
    assert.equal(tok.encode(text, { addSpecialTokens: false }).length, 1);
  });

  it("Llama-2-style BPE with byte fallback (Prepend + Replace normalizer): sound on mixed scripts", () => {
    const dir = join(tmp, "bf");
    writeByteFallbackTokenizer(dir);
    const tok = Tokenizer.fromDir(dir);
    assert.match(tok.lengthBound.reason, /^BPE with byte fallback/);
    for (const text of ["hello hi hello", "日本語 😀 é", "   ", "hellohellohello", "x".repeat(300)]) {
      const n = tok.encode(text).length;
      assert.ok(n >= tok.minTokens(text), `${text}: ${n} < ${tok.minTokens(text)}`);
    }
  });
});

describe("UNICODE_SHRINK", () => {
  it("no code point shrinks by more under NFC, NFD, NFKC, NFKD or lower-casing", () => {
    let worst = 0;
    for (let cp = 0; cp <= 0x10ffff; cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      const ch = String.fromCodePoint(cp);
      const bytes = Buffer.byteLength(ch);
      for (const out of [
        ch.normalize("NFC"),
        ch.normalize("NFD"),
        ch.normalize("NFKC"),
        ch.normalize("NFKD"),
        ch.toLowerCase(),
      ]) {
        worst = Math.max(worst, bytes / Buffer.byteLength(out));
      }
    }
    assert.equal(worst, UNICODE_SHRINK);
  });

  it("compositions stay within it: Hangul L+V+T (9 bytes) -> one syllable (3 bytes)", () => {
    const s = "\u1100\u1161\u11a8";
    assert.equal(Buffer.byteLength(s) / Buffer.byteLength(s.normalize("NFC")), 3);
  });
});
