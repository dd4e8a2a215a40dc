import type { DeviceSamplingRows } from "../backends/backend.js";
import { argmaxRow, sampleRowByRule } from "../backends/cpu/kernels/sampling.js";
import { isGreedy, type SamplingParams } from "../core/sampling_params.js";
import type { TokenLogprobs } from "../core/sched/output.js";
import { Generator, type RandomSource } from "./generator.js";

/** What the sampler needs to know about one row (one request) of the logits. */
export interface SamplerRow {
  params: SamplingParams;
  /** Prompt tokens (repetition penalty). */
  promptTokenIds: readonly number[];
  /** Tokens generated so far (penalties, min_tokens). */
  outputTokenIds: readonly number[];
  /** The model's EOS ids (blocked together with stopTokenIds until minTokens are generated). */
  eosTokenIds: readonly number[];
  /** The request's own seeded generator; null draws from the sampler's engine generator. */
  generator: RandomSource | null;
}

/** Result of one sampling call. */
export interface SamplerOutput {
  /** [B] sampled token id per row. */
  sampledTokenIds: Int32Array;
  /** Per row: log-probabilities when the row asked for them (params.logprobs !== null). */
  logprobs: (TokenLogprobs | null)[];
}

/**
 * The host sampler over logits f32 [B, V], in vLLM's order (vllm/v1/sample/sampler.py):
 *   1. raw logprobs (log_softmax of the raw logits) for rows that ask for them;
 *   2. min_tokens: EOS and stop token ids get -inf until minTokens tokens exist
 *      (vLLM MinTokensLogitsProcessor);
 *   3. penalties (vllm/model_executor/layers/utils.py apply_penalties): repetition over prompt and
 *      output tokens (logit > 0: divided by the penalty, else multiplied; CTRL / HF rule), then
 *      frequency (minus penalty x output count) and presence (minus penalty if in the output),
 *      the OpenAI definitions;
 *   4. greedy argmax (lowest id on ties) when temperature < 1e-5; otherwise temperature, min_p,
 *      top_k, top_p and inverse-CDF sampling with one uniform per row, exactly by the
 *      DeviceSamplingRows rule (backends/cpu/kernels/sampling.ts).
 * Uniforms: every non-greedy row draws one uniform per step from its request's generator, or, in
 * row order, from the engine generator; greedy rows draw nothing. {@link deviceRows} draws the
 * same way, so host and device sampling choose the same tokens.
 */
export class Sampler {
  /** Generator of rows whose request has no seed. */
  readonly engineGenerator: Generator;
  private work = new Float32Array(0);
  private scratch = new Float32Array(0);
  private logprobScratch = new Float64Array(0);

  /** @param engineSeed seed of the engine-level generator (`--seed`). */
  constructor(engineSeed = 0) {
    this.engineGenerator = new Generator(engineSeed);
  }

  /**
   * Samples one token per row.
   * @param logits f32 [B, V] (not modified)
   * @throws Error when logits holds fewer than rows.length * V values.
   */
  sample(logits: Float32Array, vocabSize: number, rows: readonly SamplerRow[]): SamplerOutput {
    const V = vocabSize;
    if (logits.length < rows.length * V)
      throw new Error(`sampler: ${logits.length} logits for ${rows.length} rows of ${V}`);
    if (this.work.length < V) {
      this.work = new Float32Array(V);
      this.scratch = new Float32Array(V);
      this.logprobScratch = new Float64Array(V);
    }
    const uniforms = this.drawUniforms(rows);
    const sampled = new Int32Array(rows.length);
    const logprobs: (TokenLogprobs | null)[] = [];
    for (let b = 0; b < rows.length; b++) {
      const row = rows[b]!;
      const p = row.params;
      const raw = logits.subarray(b * V, (b + 1) * V);
      const lp = p.logprobs !== null ? logSoftmax(raw, this.logprobScratch) : null;
      const work = this.work;
      work.set(raw);
      applyMinTokens(work, row);
      applyPenalties(work, row);
      // Settings rounded to f32 as in DeviceSamplingRows, so both paths compare the same numbers.
      const settings = {
        temperature: isGreedy(p) ? 0 : Math.fround(p.temperature),
        topK: Math.max(p.topK, 0),
        topP: Math.fround(p.topP),
        minP: Math.fround(p.minP),
        uniform: uniforms[b]!,
      };
      const token = sampleRowByRule(work, 0, V, settings, this.scratch);
      // The rule keeps no token (-1) when the probabilities are NaN: a penalty overflowed a logit
      // to +inf (inf - inf in the softmax). The +inf tokens then hold all the mass: take the argmax.
      sampled[b] = token >= 0 ? token : argmaxRow(work, 0, V);
      logprobs.push(lp === null ? null : tokenLogprobs(lp, V, sampled[b]!, p.logprobs!));
    }
    return { sampledTokenIds: sampled, logprobs };
  }

  /**
   * Per-row settings and uniforms for Backend.sampleOnDevice (greedy rows get temperature 0,
   * top_k -1 becomes 0). Draws the uniforms exactly as {@link sample} does. Rows that need
   * penalties, min_tokens masking or logprobs must go through {@link sample} instead
   * ({@link needsHostSampling}).
   */
  deviceRows(rows: readonly SamplerRow[]): DeviceSamplingRows {
    const B = rows.length;
    const out: DeviceSamplingRows = {
      temperature: new Float32Array(B),
      topK: new Int32Array(B),
      topP: new Float32Array(B),
      minP: new Float32Array(B),
      uniform: this.drawUniforms(rows),
    };
    for (let b = 0; b < B; b++) {
      const p = rows[b]!.params;
      out.temperature[b] = isGreedy(p) ? 0 : p.temperature;
      out.topK[b] = Math.max(p.topK, 0);
      out.topP[b] = p.topP;
      out.minP[b] = p.minP;
    }
    return out;
  }

  /** One uniform per non-greedy row (0 for greedy rows, which draw nothing). */
  private drawUniforms(rows: readonly SamplerRow[]): Float32Array {
    const u = new Float32Array(rows.length);
    for (let b = 0; b < rows.length; b++) {
      const row = rows[b]!;
      if (isGreedy(row.params)) continue; // greedy: no random number consumed
      u[b] = (row.generator ?? this.engineGenerator).nextUniform();
    }
    return u;
  }
}

/** True when a row needs the host sampler: penalties, min_tokens masking or logprobs. */
export function needsHostSampling(row: SamplerRow): boolean {
  const p = row.params;
  return (
    p.logprobs !== null ||
    p.repetitionPenalty !== 1 ||
    p.presencePenalty !== 0 ||
    p.frequencyPenalty !== 0 ||
    row.outputTokenIds.length < p.minTokens
  );
}

/**
 * min_tokens (vLLM MinTokensLogitsProcessor): while fewer than minTokens tokens were generated,
 * the stop tokens (EOS unless ignoreEos, and stopTokenIds) get logit -inf. In place on [V].
 */
export function applyMinTokens(logits: Float32Array, row: SamplerRow): void {
  const p = row.params;
  if (row.outputTokenIds.length >= p.minTokens) return;
  const stops = p.ignoreEos ? p.stopTokenIds : [...row.eosTokenIds, ...p.stopTokenIds];
  for (const id of stops) if (id >= 0 && id < logits.length) logits[id] = Number.NEGATIVE_INFINITY;
}

/**
 * Repetition, frequency and presence penalties in place on [V], in vLLM's order and f32 steps
 * (vllm/model_executor/layers/utils.py apply_penalties): repetition over prompt + output
 * tokens (logit > 0 ? logit / r : logit * r), then logit -= frequency * count_out, then
 * logit -= presence * (count_out > 0).
 */
export function applyPenalties(logits: Float32Array, row: SamplerRow): void {
  const p = row.params;
  const V = logits.length;
  if (p.repetitionPenalty !== 1) {
    const seen = new Set<number>();
    for (const ids of [row.promptTokenIds, row.outputTokenIds])
      for (const id of ids) if (id >= 0 && id < V) seen.add(id);
    const r = p.repetitionPenalty;
    for (const id of seen) {
      const l = logits[id]!;
      logits[id] = l > 0 ? l / r : l * r;
    }
  }
  if (p.frequencyPenalty === 0 && p.presencePenalty === 0) return;
  const counts = new Map<number, number>();
  for (const id of row.outputTokenIds) if (id >= 0 && id < V) counts.set(id, (counts.get(id) ?? 0) + 1);
  for (const [id, n] of counts) {
    logits[id] = logits[id]! - Math.fround(p.frequencyPenalty * n);
    logits[id] = logits[id]! - p.presencePenalty;
  }
}

/**
 * log_softmax of one row in float64: lp_i = x_i - (max + log(sum_j exp(x_j - max))).
 * raw: f32 [V]; out: f64 [>= V]. Returns `out`.
 */
export function logSoftmax(raw: Float32Array, out: Float64Array): Float64Array {
  const V = raw.length;
  let m = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < V; i++) if (raw[i]! > m) m = raw[i]!;
  let s = 0;
  for (let i = 0; i < V; i++) s += Math.exp(raw[i]! - m);
  const lse = m + Math.log(s);
  for (let i = 0; i < V; i++) out[i] = raw[i]! - lse;
  return out;
}

/**
 * The sampled token's logprob and rank plus the top-n (vLLM Sampler.gather_logprobs): rank is the
 * number of tokens whose logprob is >= the sampled one's (1-based, ties counted ahead, as vLLM's
 * batched_count_greater_than); top-n in descending logprob, lower id first on ties.
 * lp: f64 [V] log-probabilities.
 */
export function tokenLogprobs(lp: Float64Array, V: number, token: number, n: number): TokenLogprobs {
  const sampledLogprob = lp[token]!;
  let rank = 0;
  for (let i = 0; i < V; i++) if (lp[i]! >= sampledLogprob) rank++;
  const topIds: number[] = [];
  for (let i = 0; i < V && n > 0; i++) {
    const v = lp[i]!;
    if (topIds.length === n && !(v > lp[topIds[n - 1]!]!)) continue; // not better than the current n-th
    let j = topIds.length === n ? n - 1 : topIds.length;
    while (j > 0 && v > lp[topIds[j - 1]!]!) j--;
    topIds.splice(j, 0, i);
    if (topIds.length > n) topIds.pop();
  }
  return { sampledLogprob, sampledRank: rank, topTokenIds: topIds, topLogprobs: topIds.map((i) => lp[i]!) };
}
