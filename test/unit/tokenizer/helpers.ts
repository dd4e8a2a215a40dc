import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Writes a Llama-2-style SentencePiece BPE tokenizer with byte fallback into `dir`: "▁"-prefixed
 * pieces, <0xXX> tokens for every byte (ids 3..258) so characters outside the tiny vocabulary
 * (CJK, emoji) become one token per UTF-8 byte, and the Llama decoder chain (Replace "▁" -> " ",
 * ByteFallback, Fuse, Strip one leading space). Vocabulary: <unk>=0, <s>=1, </s>=2, bytes,
 * then ▁ h e l o i ▁h ▁he ll ▁hell ▁hello ▁hi (ids 259..270).
 */
export function writeByteFallbackTokenizer(dir: string): void {
  mkdirSync(dir, { recursive: true });
  const vocab: Record<string, number> = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  let next = 259;
  for (const t of ["▁", "h", "e", "l", "o", "i", "▁h", "▁he", "ll", "▁hell", "▁hello", "▁hi"])
    vocab[t] = next++;
  const special = (id: number, content: string) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: true,
  });
  const tokenizer = {
    version: "1.0",
    added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
    normalizer: {
      type: "Sequence",
      normalizers: [
        { type: "Prepend", prepend: "▁" },
        { type: "Replace", pattern: { String: " " }, content: "▁" },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [],
      special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
    },
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: "▁" }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
        { type: "Strip", content: " ", start: 1, stop: 0 },
      ],
    },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: "<unk>",
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges: [
        ["▁", "h"],
        ["▁h", "e"],
        ["l", "l"],
        ["▁he", "ll"],
        ["▁hell", "o"],
        ["▁h", "i"],
      ],
    },
  };
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tokenizer));
  writeFileSync(
    join(dir, "tokenizer_config.json"),
    JSON.stringify({
      bos_token: "<s>",
      eos_token: "</s>",
      unk_token: "<unk>",
      clean_up_tokenization_spaces: false,
    }),
  );
}
