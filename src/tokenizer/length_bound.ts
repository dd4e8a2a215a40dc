/**
 * A sound lower bound on the number of tokens of a text, from its byte length alone, so a text
 * that cannot fit the context is refused before it is tokenized (tokenizing costs time and
 * memory proportional to the text: a 4 MiB prompt took a minute).
 *
 * Each token of an encoding stands for a contiguous piece of the text the model saw (the text
 * after the normalizer), and together the tokens cover all of it, so
 *   tokens >= normalizedBytes / L,   L = the most bytes one token can stand for,
 * and with S = the most a normalizer can shrink a text (inputBytes <= S × normalizedBytes):
 *   tokens >= ceil(inputBytes / (L × S)).
 * {@link tokenByteBound} computes L × S from `tokenizer.json`, or answers null where no such
 * bound holds; those tokenizers skip the early check (their text is still tokenized off the
 * event loop, by the TokenizerPool).
 *
 * L, per model kind (HF tokenizers' semantics):
 * - byte-level BPE (a ByteLevel pre-tokenizer: GPT-2, Llama 3, Qwen2/3, the reference models):
 *   the text's bytes are mapped one to one onto 256 printable characters before BPE, so a vocab
 *   entry of k characters stands for exactly k bytes: L = the longest entry in characters. With
 *   every one of the 256 byte characters in the vocab no byte is ever unknown.
 * - other BPE (SentencePiece-style, Metaspace): an entry stands for at most its own UTF-8 bytes
 *   ("▁" is 3 bytes for a 1-byte space; `<0x41>` byte-fallback tokens are 6 for 1; a `##`
 *   prefix only adds), so L = the longest entry in UTF-8 bytes. Unknown characters must become
 *   byte-fallback tokens: without `byte_fallback` they are dropped or folded into one `unk`
 *   (`fuse_unk`), which can stand for any number of bytes: no bound.
 * - WordPiece and Unigram: a whole word can become one [UNK], and their usual pre-tokenizers
 *   drop whitespace: no bound.
 * Added tokens stand for their content's UTF-8 bytes; one with `lstrip`/`rstrip` also swallows
 * any run of whitespace beside it: no bound.
 *
 * S, per normalizer: none, Prepend, a ByteLevel normalizer and a literal Replace whose content is
 * not shorter than its pattern only lengthen the text (S = 1); a literal Replace that shortens
 * it gives S = pattern bytes / content bytes; NFC, NFD, NFKC, NFKD and Lowercase change one code
 * point into at least one, and shrink a text by at most {@link UNICODE_SHRINK} (U+107A5, 4 bytes,
 * is "q" in NFKC; Hangul jamo L+V+T, 9 bytes, compose into one 3-byte syllable; checked over
 * every code point in the unit tests, and once over every pair of a code point that normalizes
 * or composes and a combining one). Sequence multiplies.
 * Strip, StripAccents, BertNormalizer, Nmt, Precompiled and regex Replace can delete
 * arbitrary runs of characters: no bound. Pre-tokenizers must not drop text either: ByteLevel,
 * Metaspace, Digits, Punctuation and Split keep every character (unless their behavior is
 * "Removed"); Whitespace, WhitespaceSplit, BertPreTokenizer and CharDelimiterSplit drop
 * separators: no bound.
 */

/** How much NFC/NFD/NFKC/NFKD or Lowercase can shrink a text at most (input bytes / output bytes). */
export const UNICODE_SHRINK = 4;

/** Normalizers that change code points into code points, shrinking a text by at most UNICODE_SHRINK. */
const UNICODE_NORMALIZERS = new Set(["NFC", "NFD", "NFKC", "NFKD", "Lowercase"]);
/** Normalizers that only lengthen a text. */
const GROWING_NORMALIZERS = new Set(["Prepend", "ByteLevel"]);
/** Pre-tokenizers that keep every character (unless their behavior is "Removed"). */
const KEEPING_PRE_TOKENIZERS = new Set(["ByteLevel", "Metaspace", "Digits", "Punctuation", "Split"]);
/** Number of byte characters of a byte-level vocabulary. */
const NUM_BYTES = 256;

type Json = Record<string, unknown>;

/** The bound and the reasoning behind it, for logs and messages. */
export interface TokenByteBound {
  /**
   * No token stands for more than this many bytes of input text (L × S above), or null when
   * no bound holds for this tokenizer.
   */
  maxBytesPerToken: number | null;
  /** Why: "byte-level BPE, longest token 49 bytes" or the reason there is no bound. */
  reason: string;
}

/**
 * The most bytes of input text one token of this tokenizer can stand for (see the file comment).
 * @param tokenizerJson the parsed `tokenizer.json`
 */
export function tokenByteBound(tokenizerJson: Json): TokenByteBound {
  const none = (reason: string): TokenByteBound => ({ maxBytesPerToken: null, reason });
  const model = asObject(tokenizerJson.model);
  if (model === null || model.type !== "BPE") return none(`a ${String(model?.type ?? "unknown")} model`);
  const vocab = asObject(model.vocab);
  if (vocab === null) return none("a BPE model without a vocab");
  const pre = preTokenizerCheck(tokenizerJson.pre_tokenizer);
  if (pre.drops !== null) return none(`its pre-tokenizer ${pre.drops} drops text`);
  const shrink = normalizerShrink(tokenizerJson.normalizer);
  if (typeof shrink === "string") return none(`its normalizer ${shrink} can delete text`);
  const entries = Object.keys(vocab);
  let longest: number;
  let kind: string;
  if (pre.byteLevel) {
    const missing = byteAlphabet().filter((c) => !(c in vocab)).length;
    if (missing > 0) return none(`byte-level BPE whose vocab lacks ${missing} of the 256 byte characters`);
    longest = maxOf(entries, (t) => [...t].length);
    kind = "byte-level BPE";
  } else {
    if (model.byte_fallback !== true)
      return none("BPE without byte_fallback (unknown characters are dropped or fused)");
    const missing = byteFallbackTokens().filter((t) => !(t in vocab)).length;
    if (missing > 0)
      return none(`BPE with byte_fallback whose vocab lacks ${missing} of the 256 <0xXX> tokens`);
    longest = maxOf(entries, utf8Length);
    kind = "BPE with byte fallback";
  }
  const added = Array.isArray(tokenizerJson.added_tokens) ? (tokenizerJson.added_tokens as Json[]) : [];
  for (const t of added) {
    if (t.lstrip === true || t.rstrip === true)
      return none(`added token ${JSON.stringify(t.content)} strips whitespace`);
    if (typeof t.content === "string") longest = Math.max(longest, utf8Length(t.content));
  }
  const bound = longest * shrink;
  const by = shrink === 1 ? "" : ` × ${shrink} (normalizer)`;
  return { maxBytesPerToken: bound, reason: `${kind}, longest token ${longest} bytes${by}` };
}

/**
 * Fewest tokens a text of `numBytes` UTF-8 bytes can have (0 when there is no bound).
 * @param maxBytesPerToken {@link TokenByteBound.maxBytesPerToken}
 */
export function minTokensForBytes(numBytes: number, maxBytesPerToken: number | null): number {
  if (maxBytesPerToken === null || maxBytesPerToken <= 0) return 0;
  return Math.ceil(numBytes / maxBytesPerToken);
}

/** Byte-level pre-tokenizer found, and the first step that drops text (null when none). */
function preTokenizerCheck(p: unknown): { byteLevel: boolean; drops: string | null } {
  const o = asObject(p);
  if (o === null) return { byteLevel: false, drops: null };
  if (o.type === "Sequence") {
    let byteLevel = false;
    for (const step of Array.isArray(o.pretokenizers) ? o.pretokenizers : []) {
      const r = preTokenizerCheck(step);
      if (r.drops !== null) return r;
      byteLevel ||= r.byteLevel;
    }
    return { byteLevel, drops: null };
  }
  const type = String(o.type);
  if (!KEEPING_PRE_TOKENIZERS.has(type) || o.behavior === "Removed") return { byteLevel: false, drops: type };
  return { byteLevel: type === "ByteLevel", drops: null };
}

/** S of a normalizer (>= 1), or the name of a step that can delete text. */
function normalizerShrink(n: unknown): number | string {
  const o = asObject(n);
  if (o === null) return 1;
  const type = String(o.type);
  if (type === "Sequence") {
    let s = 1;
    for (const step of Array.isArray(o.normalizers) ? o.normalizers : []) {
      const r = normalizerShrink(step);
      if (typeof r === "string") return r;
      s *= r;
    }
    return s;
  }
  if (GROWING_NORMALIZERS.has(type)) return 1;
  if (UNICODE_NORMALIZERS.has(type)) return UNICODE_SHRINK;
  if (type === "Replace") {
    const pattern = asObject(o.pattern)?.String;
    const content = o.content;
    if (typeof pattern !== "string" || typeof content !== "string" || pattern === "")
      return "Replace (regex)";
    if (content === "") return "Replace (to nothing)";
    return Math.max(1, utf8Length(pattern) / utf8Length(content));
  }
  return type;
}

/** The 256 characters byte-level BPE maps bytes onto (GPT-2's bytes_to_unicode). */
export function byteAlphabet(): string[] {
  const out: string[] = [];
  let next = NUM_BYTES;
  for (let b = 0; b < NUM_BYTES; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    out.push(String.fromCodePoint(printable ? b : next++));
  }
  return out;
}

/** The 256 byte-fallback tokens `<0x00>` ... `<0xFF>` (SentencePiece's names). */
function byteFallbackTokens(): string[] {
  return Array.from({ length: NUM_BYTES }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
}

function maxOf(items: readonly string[], f: (s: string) => number): number {
  let m = 0;
  for (const x of items) m = Math.max(m, f(x));
  return m;
}

function utf8Length(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

function asObject(v: unknown): Json | null {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Json) : null;
}
