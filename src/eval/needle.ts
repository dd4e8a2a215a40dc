/**
 * `hisparse eval needle`: passkey retrieval accuracy per document length × needle depth. The
 * documents are built once from a seed and given to every engine variant, so variants differ
 * only in how the engine attends. Each document is decoded greedily for a few tokens; a hit is a
 * continuation starting with the queried code.
 */
import { Rng } from "../bench/rng.js";
import type { LLM } from "../engine/llm.js";
import { buildPasskeyDoc, isHit, type PasskeyDoc, type PasskeyTokenizer } from "./passkey.js";

/** What a run asks for. */
export interface NeedleOptions {
  /** Document lengths in tokens. */
  lengths: readonly number[];
  /** Depths of the queried needle in [0, 1]. */
  depths: readonly number[];
  /** Documents per (length, depth). */
  trials: number;
  /** Needles per document, drawn uniformly in [min, max] (the models' README: 1–4). */
  needles: readonly [number, number];
  seed: number;
  /** Tokens decoded per document. */
  maxTokens: number;
}

/** Depths 0, 1/(n−1), ..., 1 for `--depths N` (one depth, 0.5, when N = 1). */
export function evenDepths(n: number): number[] {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`the number of depths must be >= 1, got ${n}`);
  return n === 1 ? [0.5] : Array.from({ length: n }, (_, i) => i / (n - 1));
}

/**
 * Reasons a run cannot be decoded by an engine of `maxModelLen` tokens (empty when it can):
 * --trials and --max-tokens >= 1, and every document (at most `length` prompt tokens) plus
 * --max-tokens decoded tokens within the engine's length. Checked before any engine starts.
 * @param maxModelLenSource how the user sets the length, e.g. "--max-model-len (200)".
 */
export function needleOptionReasons(
  o: Pick<NeedleOptions, "lengths" | "trials" | "maxTokens">,
  maxModelLen: number,
  maxModelLenSource: string,
): string[] {
  const r: string[] = [];
  if (!(o.trials >= 1)) r.push(`--trials must be >= 1, got ${o.trials}`);
  if (!(o.maxTokens >= 1)) r.push(`--max-tokens must be >= 1, got ${o.maxTokens}`);
  const longest = Math.max(...o.lengths);
  if (longest + o.maxTokens > maxModelLen)
    r.push(`--lengths ${longest} + --max-tokens ${o.maxTokens} must be <= ${maxModelLenSource}`);
  return r;
}

/**
 * The documents of a run, length-major then depth then trial, reproducible from the seed.
 * @throws PasskeyError when a document cannot be built (filler too short, length too small).
 */
export function buildNeedleDocs(
  tok: PasskeyTokenizer,
  fillerIds: readonly number[],
  o: NeedleOptions,
): PasskeyDoc[] {
  const rng = new Rng(o.seed);
  const docs: PasskeyDoc[] = [];
  for (const length of o.lengths)
    for (const depth of o.depths)
      for (let t = 0; t < o.trials; t++) {
        const numNeedles = rng.integer(o.needles[0], o.needles[1]);
        docs.push(buildPasskeyDoc(tok, fillerIds, { length, depth, numNeedles }, rng));
      }
  return docs;
}

/** One decoded document. */
export interface NeedleTrial {
  length: number;
  depth: number;
  numNeedles: number;
  promptLen: number;
  code: string;
  continuation: string;
  hit: boolean;
}

/**
 * Greedy-decodes every document in one batch and scores it.
 * @param onProgress called as documents finish: (documents done, documents)
 */
export async function runNeedleTrials(
  llm: Pick<LLM, "generate">,
  docs: readonly PasskeyDoc[],
  maxTokens: number,
  onProgress?: (done: number, total: number) => void,
): Promise<NeedleTrial[]> {
  const outs = await llm.generate(
    docs.map((d) => ({ promptTokenIds: d.promptTokenIds })),
    { temperature: 0, maxTokens },
    { onProgress },
  );
  return docs.map((d, i) => {
    const text = outs[i]?.outputs[0]?.text ?? "";
    return {
      length: d.length,
      depth: d.depth,
      numNeedles: d.numNeedles,
      promptLen: d.promptTokenIds.length,
      code: d.needle.code,
      continuation: text,
      hit: isHit(text, d.needle.code),
    };
  });
}

/** Accuracy of a group of trials. */
export interface NeedleCell {
  /** null = every length / depth. */
  length: number | null;
  depth: number | null;
  trials: number;
  hits: number;
  /** hits / trials in [0, 1]. */
  accuracy: number;
}

/** Cells per (length, depth), then per length (depth null), then overall, in the options' order. */
export function summarizeNeedle(
  trials: readonly NeedleTrial[],
  o: Pick<NeedleOptions, "lengths" | "depths">,
): NeedleCell[] {
  const cell = (length: number | null, depth: number | null): NeedleCell => {
    const ts = trials.filter(
      (t) => (length === null || t.length === length) && (depth === null || t.depth === depth),
    );
    const hits = ts.filter((t) => t.hit).length;
    return { length, depth, trials: ts.length, hits, accuracy: ts.length === 0 ? 0 : hits / ts.length };
  };
  const cells: NeedleCell[] = [];
  for (const length of o.lengths) {
    for (const depth of o.depths) cells.push(cell(length, depth));
    cells.push(cell(length, null));
  }
  cells.push(cell(null, null));
  return cells;
}
