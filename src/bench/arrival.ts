import type { Rng } from "./rng.js";

/**
 * Send times of a benchmark's requests, in seconds after the start, as `vllm bench serve`
 * computes them (vllm/benchmarks/serve.py `get_request`):
 * - rate `Infinity`: every request at 0 (all at once);
 * - burstiness `Infinity`: a constant gap of 1/rate;
 * - otherwise gaps drawn from Gamma(shape = burstiness, scale = 1/(rate × burstiness)) (mean
 *   1/rate; burstiness 1 = exponential gaps = a Poisson process; < 1 burstier, > 1 more even).
 * The cumulative times are then rescaled so the last request goes out at exactly n/rate, as vLLM
 * does to stabilise throughput across seeds. The first request also waits its own gap.
 *
 * @param n number of requests (>= 1)
 * @param rate requests per second, > 0 (Infinity allowed)
 * @param burstiness > 0 (Infinity allowed)
 * @returns n non-decreasing send offsets in seconds
 * @throws RangeError when n < 1, rate <= 0 or burstiness <= 0.
 */
export function arrivalOffsets(n: number, rate: number, burstiness: number, rng: Rng): number[] {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`the number of requests must be >= 1, got ${n}`);
  if (!(rate > 0)) throw new RangeError(`the request rate must be > 0 (or inf), got ${rate}`);
  if (!(burstiness > 0)) throw new RangeError(`the burstiness must be > 0, got ${burstiness}`);
  if (rate === Number.POSITIVE_INFINITY) return new Array<number>(n).fill(0);
  const gaps: number[] = [];
  for (let i = 0; i < n; i++) {
    gaps.push(
      burstiness === Number.POSITIVE_INFINITY ? 1 / rate : rng.gamma(burstiness, 1 / (rate * burstiness)),
    );
  }
  const t: number[] = [];
  let acc = 0;
  for (const g of gaps) {
    acc += g;
    t.push(acc);
  }
  const last = t[n - 1]!;
  if (last === 0) return t;
  const normalize = n / rate / last;
  return t.map((x) => x * normalize);
}
