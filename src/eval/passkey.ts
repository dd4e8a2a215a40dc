/**
 * Passkey ("vault code") documents in the format the reference models learned
 * (/work/shared/models/README.md): real filler text with 1–4 needle sentences
 * "The access code for the <colour> <noun> vault is <5 digits>." inserted at sentence starts, then
 * the plain question "\nQuestion: What is the access code for the <name> vault?\nAnswer: The
 * access code for the <name> vault is". The queried needle sits at the requested depth (0 = start
 * of the document, 1 = end); the others at random depths.
 */
import type { Rng } from "../bench/rng.js";

/** What document building needs from a tokenizer (tokenizer/Tokenizer satisfies it). */
export interface PasskeyTokenizer {
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  decode(ids: readonly number[]): string;
}

/** Colours and nouns of vault names ("<colour> <noun>" pairs, as in the models' training data). */
export const COLOURS = [
  "amber",
  "azure",
  "crimson",
  "golden",
  "silver",
  "violet",
  "scarlet",
  "emerald",
  "ivory",
  "copper",
  "indigo",
  "olive",
  "coral",
  "teal",
  "maroon",
  "cobalt",
  "jade",
  "ochre",
  "saffron",
  "slate",
] as const;
export const NOUNS = [
  "falcon",
  "otter",
  "lantern",
  "harbor",
  "meadow",
  "glacier",
  "willow",
  "compass",
  "beacon",
  "orchid",
  "canyon",
  "sparrow",
  "anchor",
  "thistle",
  "quarry",
  "badger",
  "cedar",
  "comet",
  "heron",
  "summit",
] as const;

/** One needle: the vault's name and its 5-digit code. */
export interface Needle {
  name: string;
  code: string;
}

/** The needle sentence. */
export function needleSentence(n: Needle): string {
  return `The access code for the ${n.name} vault is ${n.code}.`;
}

/** The plain question closing the document; the model should continue with " <code>". */
export function questionText(name: string): string {
  return `\nQuestion: What is the access code for the ${name} vault?\nAnswer: The access code for the ${name} vault is`;
}

/** `k` needles with distinct names and distinct codes in [10000, 99999]. */
export function drawNeedles(k: number, rng: Rng): Needle[] {
  const names = new Set<string>();
  const codes = new Set<string>();
  const out: Needle[] = [];
  while (out.length < k) {
    const name = `${COLOURS[rng.integer(0, COLOURS.length - 1)]} ${NOUNS[rng.integer(0, NOUNS.length - 1)]}`;
    const code = String(rng.integer(10000, 99999));
    if (names.has(name) || codes.has(code)) continue;
    names.add(name);
    codes.add(code);
    out.push({ name, code });
  }
  return out;
}

/**
 * Index of the first sentence start at or after `pos`: just after ". " or a newline (or the text's
 * start / end).
 */
export function sentenceStartAtOrAfter(text: string, pos: number): number {
  if (pos <= 0) return 0;
  for (let i = Math.min(pos, text.length); i < text.length; i++) {
    const prev = text[i - 1];
    if (prev === "\n" || (prev === " " && text[i - 2] === ".")) return i;
  }
  return text.length;
}

/**
 * Inserts sentences into `text` at fractions of its length, each at the next sentence start
 * (a separating space or newline is added where the text lacks one).
 */
export function insertSentences(
  text: string,
  items: readonly { fraction: number; sentence: string }[],
): string {
  const at = items
    .map((it) => ({
      idx: sentenceStartAtOrAfter(text, Math.round(it.fraction * text.length)),
      s: it.sentence,
    }))
    .sort((a, b) => b.idx - a.idx);
  let out = text;
  for (const { idx, s } of at) {
    const before = out.slice(0, idx);
    const after = out.slice(idx);
    const lead = before.length === 0 || /\s$/.test(before) ? "" : " ";
    const trail = after.length === 0 || /^\s/.test(after) ? "" : " ";
    out = `${before}${lead}${s}${trail}${after}`;
  }
  return out;
}

/** One passkey trial. */
export interface PasskeyDoc {
  prompt: string;
  promptTokenIds: number[];
  /** The queried needle. */
  needle: Needle;
  numNeedles: number;
  /** Requested depth of the queried needle in [0, 1]. */
  depth: number;
  /** Requested length in tokens (the prompt has at most this many). */
  length: number;
}

/** Error for a document that cannot be built; the message is one sentence for the user. */
export class PasskeyError extends Error {
  override name = "PasskeyError";
}

/**
 * Builds a document of at most `length` tokens (a few below when sentence boundaries fall so):
 * a window of filler tokens from a random start (from its first sentence start on), the needles,
 * the question. The filler is shortened until the whole fits.
 * @param fillerIds the tokenized filler text
 * @throws PasskeyError when the filler is too short or the question alone exceeds `length`.
 */
export function buildPasskeyDoc(
  tok: PasskeyTokenizer,
  fillerIds: readonly number[],
  o: { length: number; depth: number; numNeedles: number },
  rng: Rng,
): PasskeyDoc {
  const needles = drawNeedles(o.numNeedles, rng);
  const needle = needles[0]!;
  const items = needles.map((n, i) => ({
    fraction: i === 0 ? o.depth : rng.random(),
    sentence: needleSentence(n),
  }));
  const question = questionText(needle.name);
  const fixed =
    tok.encode(question, { addSpecialTokens: false }).length +
    needles.reduce((a, n) => a + tok.encode(` ${needleSentence(n)}`, { addSpecialTokens: false }).length, 0);
  let numFiller = o.length - fixed;
  if (numFiller < 1)
    throw new PasskeyError(`a ${o.length}-token document cannot hold the question and needles`);
  // A sentence start can be up to a few hundred characters into the window: take extra tokens.
  const extra = Math.min(64, numFiller);
  if (fillerIds.length < numFiller + extra)
    throw new PasskeyError(
      `the filler text has ${fillerIds.length} tokens; a ${o.length}-token document needs more`,
    );
  const start = rng.integer(0, fillerIds.length - numFiller - extra);
  for (let attempt = 0; attempt < 8; attempt++) {
    const window = tok.decode(fillerIds.slice(start, start + numFiller + extra));
    const head = sentenceStartAtOrAfter(window, 1);
    let filler = window.slice(head < window.length ? head : 0);
    filler = cutToTokens(tok, filler, numFiller);
    const prompt = insertSentences(filler, items) + question;
    const ids = tok.encode(prompt, { addSpecialTokens: false });
    if (ids.length <= o.length)
      return {
        prompt,
        promptTokenIds: ids,
        needle,
        numNeedles: o.numNeedles,
        depth: o.depth,
        length: o.length,
      };
    numFiller -= ids.length - o.length;
  }
  throw new PasskeyError(`could not fit a passkey document into ${o.length} tokens`);
}

/** The longest prefix of `text` that encodes to at most `n` tokens (by token cut, then re-decode). */
function cutToTokens(tok: PasskeyTokenizer, text: string, n: number): string {
  const ids = tok.encode(text, { addSpecialTokens: false });
  return ids.length <= n ? text : tok.decode(ids.slice(0, n));
}

/**
 * True when the continuation starts with the code (after leading whitespace), the hit
 * criterion of the models' README.
 */
export function isHit(continuation: string, code: string): boolean {
  return continuation.trimStart().startsWith(code);
}
