import { GREEDY_TEMPERATURE_EPS } from "../../../core/sampling_params.js";

/**
 * The sampling rule of `DeviceSamplingRows` (backends/backend.ts) for one row, on the host. Both
 * the host sampler (worker/sampler.ts) and `CpuBackend.sampleOnDevice` use it, and the CUDA
 * sampler is tested against it.
 */

/**
 * Index of the largest logit, the lowest index on ties (NaN never wins; an all-NaN row gives 0).
 * logits: f32 [V] at off.
 */
export function argmaxRow(logits: Float32Array, off: number, V: number): number {
  let best = 0;
  let bestVal = Number.NEGATIVE_INFINITY;
  let found = false;
  for (let i = 0; i < V; i++) {
    const v = logits[off + i]!;
    if (v > bestVal || (!found && v === bestVal)) {
      best = i;
      bestVal = v;
      found = true;
    }
  }
  return best;
}

/** One row's settings, as in DeviceSamplingRows. */
export interface RowSamplingSettings {
  temperature: number;
  /** 0 disables. */
  topK: number;
  /** 1 disables. */
  topP: number;
  /** 0 disables. */
  minP: number;
  /** Uniform random number in [0, 1). */
  uniform: number;
}

/**
 * Picks one token from a row of logits by the DeviceSamplingRows rule:
 *   temperature < 1e-5: argmax (lowest id on ties);
 *   else p = softmax(logits / temperature) (each p_i rounded to f32);
 *   keep i iff p_i >= the k-th largest p (top-k, ties kept), p_i >= f32(minP * max p) (min-p),
 *     and p_i >= tP, tP the largest p value such that the tokens with p >= tP hold at least topP
 *     of the (whole) mass (top-p, ties kept);
 *   walk kept tokens in ascending id, summing p; return the first whose running sum exceeds
 *   uniform * (sum of kept p), or the last kept token if rounding leaves none.
 * logits: f32 [V] at off (not modified); scratch: f32 [>= V] work space.
 * @throws Error when scratch is shorter than V.
 */
export function sampleRowByRule(
  logits: Float32Array,
  off: number,
  V: number,
  s: RowSamplingSettings,
  scratch: Float32Array,
): number {
  if (s.temperature < GREEDY_TEMPERATURE_EPS) return argmaxRow(logits, off, V);
  if (scratch.length < V) throw new Error(`sampleRowByRule: scratch holds ${scratch.length} < ${V} values`);
  const p = scratch;
  let zMax = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < V; i++) {
    const z = Math.fround(logits[off + i]! / s.temperature);
    p[i] = z;
    if (z > zMax) zMax = z;
  }
  if (zMax === Number.NEGATIVE_INFINITY) return argmaxRow(logits, off, V); // every token masked
  let sum = 0;
  for (let i = 0; i < V; i++) {
    const e = Math.exp(p[i]! - zMax);
    p[i] = e;
    sum += e;
  }
  let pMax = 0;
  for (let i = 0; i < V; i++) {
    p[i] = p[i]! / sum;
    if (p[i]! > pMax) pMax = p[i]!;
  }
  const threshold = keepThreshold(p, V, s, pMax);
  let kept = 0;
  let last = -1;
  for (let i = 0; i < V; i++) {
    if (p[i]! >= threshold) {
      kept += p[i]!;
      last = i;
    }
  }
  const target = s.uniform * kept;
  let run = 0;
  for (let i = 0; i < V; i++) {
    if (p[i]! < threshold) continue; // filtered out
    run += p[i]!;
    if (run > target) return i;
  }
  return last;
}

/**
 * The smallest p a token needs to be kept: the max of the top-k, min-p and top-p thresholds
 * (0 when none is active). p: f32 [V] probabilities.
 */
export function keepThreshold(p: Float32Array, V: number, s: RowSamplingSettings, pMax: number): number {
  let threshold = 0;
  if (s.minP > 0) threshold = Math.max(threshold, Math.fround(s.minP * pMax));
  const useTopK = s.topK > 0 && s.topK < V;
  const useTopP = s.topP < 1;
  if (!useTopK && !useTopP) return threshold;
  const sorted = p.slice(0, V).sort(); // ascending
  if (useTopK) threshold = Math.max(threshold, sorted[V - s.topK]!);
  if (useTopP) {
    // Walk distinct values from the largest, adding all tokens of each value (ties kept).
    let cum = 0;
    let tP = sorted[0]!;
    for (let i = V - 1; i >= 0; ) {
      const v = sorted[i]!;
      for (; i >= 0 && sorted[i] === v; i--) cum += v;
      if (cum >= s.topP) {
        tP = v;
        break;
      }
    }
    threshold = Math.max(threshold, tP);
  }
  return threshold;
}
