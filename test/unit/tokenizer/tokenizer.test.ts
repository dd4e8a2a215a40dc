import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { TokenizerError } from "../../../src/tokenizer/errors.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { writeByteFallbackTokenizer } from "./helpers.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const REF = join(ROOT, "models/ref-small");
interface FixtureCase {
  prompt: string;
  input_ids: number[];
  greedy_ids: number[];
  greedy_text: string;
}
const FIXTURE = JSON.parse(
  readFileSync(new URL("./fixtures/hf-ref-small-tokens.json", import.meta.url), "utf8"),
) as {
  cases: FixtureCase[];
};
const tok = Tokenizer.fromDir(REF);
const tmp = mkdtempSync(join(tmpdir(), "hisparse-tok-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A copy of ref-small's tokenizer.json with the given tokenizer_config.json and extra files. */
function tokenizerDir(
  name: string,
  config: Record<string, unknown>,
  files: Record<string, string> = {},
): string {
  const dir = join(tmp, name);
  mkdirSync(dir);
  copyFileSync(join(REF, "tokenizer.json"), join(dir, "tokenizer.json"));
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config));
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text);
  return dir;
}

function tokError(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof TokenizerError, `expected TokenizerError, got ${e}`);
    return e.message;
  }
  assert.fail("expected a TokenizerError");
}

describe("Tokenizer: ref-small against HF transformers", () => {
  it('encodes "Once upon a time" as HF does (no BOS added)', () => {
    assert.deepEqual(tok.encode("Once upon a time"), [10950, 6761, 272, 886]);
    assert.deepEqual(tok.encode("Once upon a time", { addSpecialTokens: false }), [10950, 6761, 272, 886]);
  });

  it("encodes all five fixture prompts to HF's input_ids", () => {
    assert.equal(FIXTURE.cases.length, 5);
    for (const c of FIXTURE.cases) assert.deepEqual(tok.encode(c.prompt), c.input_ids, c.prompt);
  });

  it("decodes HF's greedy continuations to HF's greedy_text", () => {
    for (const c of FIXTURE.cases) assert.equal(tok.decode(c.greedy_ids), c.greedy_text, c.prompt);
  });

  it("reports vocabulary size and special tokens", () => {
    assert.equal(tok.vocabSize, 16384);
    assert.deepEqual(tok.specialTokenIds, [0, 1, 2, 3]);
    assert.equal(tok.bosTokenId, 0);
    assert.equal(tok.eosTokenId, 0);
    assert.equal(tok.padTokenId, 0);
    assert.equal(tok.isSpecialToken(3), true);
    assert.equal(tok.isSpecialToken(4), false);
    assert.equal(tok.idToToken(281), "Ġthe");
    assert.equal(tok.tokenToId("<|assistant|>"), 3);
  });

  it("keeps or skips special tokens when decoding", () => {
    const ids = [2, 202, 500, 0];
    assert.equal(tok.decode(ids), "<|user|>\nfor<|endoftext|>");
    assert.equal(tok.decode(ids, { skipSpecialTokens: true }), "\nfor");
    assert.equal(tok.decode([]), "");
  });
});

describe("Tokenizer: chat templates", () => {
  const conversation = [
    { role: "system", content: "You are a helpful assistant." },
    { role: "user", content: "What is 2+2?" },
  ];

  it("renders a system + user conversation with the model's template", () => {
    assert.equal(tok.hasChatTemplate, true);
    const text = tok.applyChatTemplate(conversation, { addGenerationPrompt: true });
    assert.equal(text, "<|system|>\nYou are a helpful assistant.\n<|user|>\nWhat is 2+2?\n<|assistant|>\n");
    assert.equal(
      tok.applyChatTemplate(conversation),
      "<|system|>\nYou are a helpful assistant.\n<|user|>\nWhat is 2+2?\n",
    );
    assert.deepEqual(
      tok.encode(text, { addSpecialTokens: false }),
      [
        1, 202, 4873, 494, 272, 13854, 3925, 390, 840, 17, 202, 2, 202, 8963, 342, 534, 14, 21, 34, 202, 3,
        202,
      ],
    );
  });

  it("flattens content arrays of text parts with newlines", () => {
    const text = tok.applyChatTemplate([
      {
        role: "user",
        content: [
          { type: "text", text: "first" },
          { type: "text", text: "second" },
        ],
      },
    ]);
    assert.equal(text, "<|user|>\nfirst\nsecond\n");
    assert.equal(
      tokError(() => tok.applyChatTemplate([{ role: "user", content: [{ type: "image_url" } as never] }])),
      "chat message 0 content part 0 is not a text part (only text is supported)",
    );
  });

  it("passes bos_token / eos_token and template kwargs; prefers chat_template.jinja", () => {
    const dir = tokenizerDir(
      "jinja",
      { bos_token: "<|endoftext|>", eos_token: { content: "<|assistant|>" }, chat_template: "IGNORED" },
      {
        "chat_template.jinja":
          "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}{{ extra }}",
      },
    );
    const t = Tokenizer.fromDir(dir);
    assert.equal(t.eosTokenId, 3);
    assert.equal(
      t.applyChatTemplate(conversation, { chatTemplateKwargs: { extra: "!" } }),
      "<|endoftext|>[system]You are a helpful assistant.<|assistant|>[user]What is 2+2?<|assistant|>!",
    );
  });

  it("picks the default of a list of named templates", () => {
    const dir = tokenizerDir("named", {
      chat_template: [
        { name: "tool_use", template: "TOOLS" },
        { name: "default", template: "{{ messages[0].content }}" },
      ],
    });
    assert.equal(Tokenizer.fromDir(dir).applyChatTemplate(conversation), "You are a helpful assistant.");
  });

  it("errors clearly when there is no template or the template raises", () => {
    const none = tokenizerDir("none", { eos_token: "<|endoftext|>" });
    const t = Tokenizer.fromDir(none);
    assert.equal(t.hasChatTemplate, false);
    assert.equal(
      tokError(() => t.applyChatTemplate(conversation)),
      `the tokenizer in ${none} has no chat template, so chat messages cannot be formatted`,
    );
    const raising = tokenizerDir("raise", { chat_template: "{{ raise_exception('roles must alternate') }}" });
    assert.match(
      tokError(() => Tokenizer.fromDir(raising).applyChatTemplate(conversation)),
      /^the chat template failed to render \(.*roles must alternate.*\)$/,
    );
  });
});

describe("Tokenizer: loading", () => {
  it("a config-only folder has no tokenizer", () => {
    const dir = join(ROOT, "configs/llama-3.1-8b");
    assert.equal(Tokenizer.existsIn(dir), false);
    assert.equal(
      tokError(() => Tokenizer.fromDir(dir)),
      `no tokenizer.json in ${dir} (text prompts need a tokenizer; pass --tokenizer DIR)`,
    );
  });

  it("corrupt tokenizer_config.json", () => {
    const dir = tokenizerDir("corrupt", {});
    writeFileSync(join(dir, "tokenizer_config.json"), "{");
    assert.match(
      tokError(() => Tokenizer.fromDir(dir)),
      /tokenizer_config\.json is not valid JSON/,
    );
  });

  it("a SentencePiece-style tokenizer with byte fallback adds BOS and round-trips CJK and emoji", () => {
    const dir = join(tmp, "bytefallback");
    writeByteFallbackTokenizer(dir);
    const t = Tokenizer.fromDir(dir);
    const ids = t.encode("hello 世界 😀 hi");
    // <s> ▁hello ▁ <E4 B8 96> <E7 95 8C> ▁ <F0 9F 98 80> ▁hi
    assert.deepEqual(ids, [1, 269, 259, 231, 187, 153, 234, 152, 143, 259, 243, 162, 155, 131, 270]);
    assert.equal(t.decode(ids, { skipSpecialTokens: true }), "hello 世界 😀 hi");
    assert.equal(t.bosTokenId, 1);
    assert.equal(t.eosTokenId, 2);
  });
});
