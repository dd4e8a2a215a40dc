/**
 * Benchmark prompts (vllm/benchmarks/datasets/): each sample is a prompt string with its length
 * in tokens and the number of tokens to ask for. Prompts are built with a client-side tokenizer
 * (`--tokenizer`, default the bundled ref-small), so lengths are exact for servers that use the
 * same tokenizer and approximate for others, as with vLLM.
 */
import { readFileSync } from "node:fs";
import type { Rng } from "./rng.js";

/** One request of a benchmark (vLLM SampleRequest). */
export interface SampleRequest {
  prompt: string;
  /** Prompt length in tokens under the client tokenizer. */
  promptLen: number;
  /** Tokens to request (`max_tokens`). */
  expectedOutputLen: number;
}

/** What datasets need from a tokenizer (tokenizer/Tokenizer satisfies it). */
export interface DatasetTokenizer {
  /** Number of token ids, special tokens included. */
  readonly vocabSize: number;
  readonly specialTokenIds: readonly number[];
  encode(text: string, opts?: { addSpecialTokens?: boolean }): number[];
  decode(ids: readonly number[]): string;
}

/** Error for a dataset that cannot be built; the message is one sentence for the user. */
export class DatasetError extends Error {
  override name = "DatasetError";
}

/** Dataset names accepted by `--dataset-name`. */
export const DATASET_NAMES = ["random", "lognormal", "file", "sharegpt", "multiturn"] as const;
export type DatasetName = (typeof DATASET_NAMES)[number];

/** Lengths of synthetic requests (`--input-len`, `--output-len`, `--random-range-ratio`). */
export interface LengthOptions {
  numPrompts: number;
  inputLen: number;
  outputLen: number;
  /** Uniform lengths in [len × (1 − r), len × (1 + r)]; r in [0, 1). */
  rangeRatio: number;
}

/** Retries of the decode → re-encode length fix-up (vLLM gen_prompt_decode_to_target_len). */
const MAX_LENGTH_FIXUP_RETRIES = 10;

/**
 * Integer-uniform lengths around a mean, as vLLM's RandomDataset.get_sampling_params:
 * [floor(len × (1 − r)), ceil(len × (1 + r))], outputs at least 1.
 * @throws DatasetError when r is outside [0, 1) or a length is below 1.
 */
export function uniformLengths(o: LengthOptions, numSpecialTokens: number, rng: Rng): [number[], number[]] {
  if (!(o.rangeRatio >= 0 && o.rangeRatio < 1))
    throw new DatasetError(`--random-range-ratio must be in [0, 1), got ${o.rangeRatio}`);
  if (o.inputLen < 1 || o.outputLen < 1) throw new DatasetError("--input-len and --output-len must be >= 1");
  const realInput = Math.max(0, o.inputLen - numSpecialTokens);
  const inLow = Math.floor(realInput * (1 - o.rangeRatio));
  const inHigh = Math.ceil(realInput * (1 + o.rangeRatio));
  if (inLow < 1) throw new DatasetError(`--input-len ${o.inputLen} is too small for this range ratio`);
  const outLow = Math.max(1, Math.floor(o.outputLen * (1 - o.rangeRatio)));
  const outHigh = Math.max(1, Math.ceil(o.outputLen * (1 + o.rangeRatio)));
  const inputs = Array.from({ length: o.numPrompts }, () => rng.integer(inLow, inHigh));
  const outputs = Array.from({ length: o.numPrompts }, () => rng.integer(outLow, outHigh));
  return [inputs, outputs];
}

/**
 * Log-normal lengths with the given means: exp(N(ln(mean) − σ²/2, σ)) rounded, clipped to
 * [1, 4 × mean] (a heavy right tail like real chat traffic; the clip keeps prompts within a
 * model's length). Not a vLLM dataset: `--dataset-name lognormal` is ours.
 * @throws DatasetError when σ is not > 0.
 */
export function lognormalLengths(o: LengthOptions, sigma: number, rng: Rng): [number[], number[]] {
  if (!(sigma > 0)) throw new DatasetError(`--lognormal-sigma must be > 0, got ${sigma}`);
  if (o.inputLen < 1 || o.outputLen < 1) throw new DatasetError("--input-len and --output-len must be >= 1");
  const draw = (m: number) => {
    const x = Math.round(Math.exp(Math.log(m) - (sigma * sigma) / 2 + sigma * rng.normal()));
    return Math.min(4 * m, Math.max(1, x));
  };
  const inputs = Array.from({ length: o.numPrompts }, () => draw(o.inputLen));
  const outputs = Array.from({ length: o.numPrompts }, () => draw(o.outputLen));
  return [inputs, outputs];
}

/** Tokens the tokenizer adds to a text on its own (BOS and the like). */
export function numSpecialTokensToAdd(tok: DatasetTokenizer): number {
  return tok.encode("", { addSpecialTokens: true }).length;
}

/**
 * Turns token ids into a prompt whose re-encoding has `target` tokens (vLLM
 * gen_prompt_decode_to_target_len): decode, re-encode, truncate or pad with random ids, retry.
 * @returns the prompt and its token count (may differ from target after the retries).
 */
export function decodeToTargetLen(
  tok: DatasetTokenizer,
  ids: number[],
  target: number,
  rng: Rng,
): { prompt: string; promptLen: number } {
  let seq = ids;
  let prompt = "";
  for (let tries = MAX_LENGTH_FIXUP_RETRIES; ; tries--) {
    prompt = tok.decode(seq);
    seq = tok.encode(prompt, { addSpecialTokens: false });
    if (tries <= 0 || seq.length === target) break;
    if (seq.length > target) seq = seq.slice(0, target);
    else while (seq.length < target) seq.push(rng.integer(0, tok.vocabSize - 1));
  }
  return { prompt, promptLen: seq.length };
}

/**
 * Synthetic prompts from token ids, as vLLM's RandomDataset: request i takes
 * allowed[(offset_i + i + j) mod |allowed|] for j < len_i (allowed = non-special ids,
 * offset_i uniform), decoded to text and fixed up to the exact length.
 * @param lengths input and output lengths per request (uniformLengths or lognormalLengths)
 */
export function syntheticRequests(
  tok: DatasetTokenizer,
  lengths: [number[], number[]],
  rng: Rng,
): SampleRequest[] {
  const [inputs, outputs] = lengths;
  const offsets = inputs.map(() => rng.integer(0, tok.vocabSize - 1));
  const special = new Set(tok.specialTokenIds);
  const allowed: number[] = [];
  for (let id = 0; id < tok.vocabSize; id++) if (!special.has(id)) allowed.push(id);
  return inputs.map((len, i) => {
    const ids = Array.from({ length: len }, (_, j) => allowed[(offsets[i]! + i + j) % allowed.length]!);
    const { prompt, promptLen } = decodeToTargetLen(tok, ids, len, rng);
    return { prompt, promptLen, expectedOutputLen: outputs[i]! };
  });
}

/**
 * Real text cut to lengths: each request takes `len_i` consecutive tokens of the file from a
 * random start (so long prompts read like documents, as long-context traffic does).
 * @throws DatasetError when the file cannot be read or is shorter than the longest prompt.
 */
export function fileRequests(
  tok: DatasetTokenizer,
  path: string,
  lengths: [number[], number[]],
  rng: Rng,
): SampleRequest[] {
  const ids = tok.encode(readText(path), { addSpecialTokens: false });
  const [inputs, outputs] = lengths;
  const longest = Math.max(...inputs);
  if (ids.length < longest)
    throw new DatasetError(`${path} has ${ids.length} tokens, fewer than the ${longest} a prompt needs`);
  return inputs.map((len, i) => {
    const start = rng.integer(0, ids.length - len);
    const { prompt, promptLen } = decodeToTargetLen(tok, ids.slice(start, start + len), len, rng);
    return { prompt, promptLen, expectedOutputLen: outputs[i]! };
  });
}

/** ShareGPT length filter (vllm/benchmarks/datasets/utils.py is_valid_sequence defaults). */
export const SHAREGPT_MIN_LEN = 4;
export const SHAREGPT_MAX_PROMPT_LEN = 1024;
export const SHAREGPT_MAX_TOTAL_LEN = 2048;

/**
 * ShareGPT-format conversations (a JSON array of `{conversations: [{from, value}, ...]}`), as
 * vLLM's ShareGPTDataset: entries with >= 2 turns, shuffled by the seed; the first turn is the
 * prompt, the second's token count the output length (or `outputLen` when given); pairs with
 * prompt or output < 4 tokens, prompt > 1024 or total > 2048 are skipped; when fewer remain than
 * asked for, random samples are repeated (vLLM maybe_oversample_requests).
 * @throws DatasetError when the file is unreadable, not in ShareGPT format, or nothing is left.
 */
export function shareGptRequests(
  tok: DatasetTokenizer,
  path: string,
  numPrompts: number,
  outputLen: number | undefined,
  rng: Rng,
): SampleRequest[] {
  let data: unknown;
  try {
    data = JSON.parse(readText(path));
  } catch (e) {
    if (e instanceof DatasetError) throw e;
    throw new DatasetError(`${path} is not valid JSON (${(e as Error).message})`);
  }
  if (!Array.isArray(data)) throw new DatasetError(`${path} must hold a JSON array of conversations`);
  const entries = rng.shuffle(
    data.filter((e): e is { conversations: { value: unknown }[] } => {
      const c = (e as { conversations?: unknown } | null)?.conversations;
      return Array.isArray(c) && c.length >= 2;
    }),
  );
  const samples: SampleRequest[] = [];
  for (const e of entries) {
    if (samples.length >= numPrompts) break;
    const prompt = String(e.conversations[0]?.value ?? "");
    const completion = String(e.conversations[1]?.value ?? "");
    const promptLen = tok.encode(prompt).length;
    const out = outputLen ?? tok.encode(completion).length;
    const tooShort = promptLen < SHAREGPT_MIN_LEN || (outputLen === undefined && out < SHAREGPT_MIN_LEN);
    if (tooShort || promptLen > SHAREGPT_MAX_PROMPT_LEN || promptLen + out > SHAREGPT_MAX_TOTAL_LEN) continue;
    samples.push({ prompt, promptLen, expectedOutputLen: out });
  }
  if (samples.length === 0) throw new DatasetError(`${path} has no usable ShareGPT conversations`);
  const n = samples.length;
  while (samples.length < numPrompts) samples.push(samples[rng.integer(0, n - 1)]!);
  return samples;
}

function readText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new DatasetError(
      `cannot read dataset file ${path} (${(e as NodeJS.ErrnoException).code ?? "error"})`,
    );
  }
}

/** Everything `getSamples` needs (CLI flags of `bench serve`). */
export interface DatasetOptions extends LengthOptions {
  name: DatasetName;
  /** File for `file` and `sharegpt`. */
  path?: string;
  /** σ of `lognormal`. */
  lognormalSigma: number;
  /** Fixed output length for `sharegpt` (default: the reply's length). */
  sharegptOutputLen?: number;
}

/**
 * Builds the requests of a benchmark.
 * @throws DatasetError for an unknown dataset, a missing or bad file, or bad lengths.
 */
export function getSamples(tok: DatasetTokenizer, o: DatasetOptions, rng: Rng): SampleRequest[] {
  if (!Number.isInteger(o.numPrompts) || o.numPrompts < 1)
    throw new DatasetError(`--num-prompts must be >= 1, got ${o.numPrompts}`);
  const needPath = (): string => {
    if (o.path === undefined) throw new DatasetError(`--dataset-name ${o.name} needs --dataset-path FILE`);
    return o.path;
  };
  switch (o.name) {
    case "random":
      return syntheticRequests(tok, uniformLengths(o, numSpecialTokensToAdd(tok), rng), rng);
    case "lognormal":
      return syntheticRequests(tok, lognormalLengths(o, o.lognormalSigma, rng), rng);
    case "file":
      return fileRequests(tok, needPath(), uniformLengths(o, 0, rng), rng);
    case "sharegpt":
      return shareGptRequests(tok, needPath(), o.numPrompts, o.sharegptOutputLen, rng);
    case "multiturn":
      throw new DatasetError("multiturn conversations are built by bench/multiturn.ts (buildConversations)");
    default:
      throw new DatasetError(
        `unknown dataset ${String(o.name)} (choose one of: ${DATASET_NAMES.join(", ")})`,
      );
  }
}
