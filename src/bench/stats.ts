/**
 * Summary statistics with numpy's definitions, so our figures equal `vllm bench serve`'s for the
 * same samples. As in vLLM (`np.mean(xs or 0)`), an empty sample counts as the single value 0.
 */

/** Arithmetic mean (`np.mean`); 0 for no values. */
export function mean(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  let s = 0;
  for (const x of xs) s += x;
  return s / xs.length;
}

/** Population standard deviation (`np.std`, ddof = 0); 0 for no values. */
export function std(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const m = mean(xs);
  let s = 0;
  for (const x of xs) s += (x - m) * (x - m);
  return Math.sqrt(s / xs.length);
}

/**
 * Percentile with linear interpolation between closest ranks (`np.percentile(xs, p)`, method
 * "linear", numpy/lib/_function_base_impl.py `_lerp`): position p/100 × (n − 1) in the sorted
 * sample. 0 for no values.
 * @param p percentile in [0, 100]
 * @throws RangeError when p is outside [0, 100].
 */
export function percentile(xs: readonly number[], p: number): number {
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be in [0, 100], got ${p}`);
  if (xs.length === 0) return 0;
  const a = [...xs].sort((x, y) => x - y);
  const pos = (p / 100) * (a.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const t = pos - lo;
  const below = a[lo]!;
  const above = a[hi]!;
  // numpy's _lerp: interpolate from the nearer end, which keeps results monotonic in p.
  return t >= 0.5 ? above - (above - below) * (1 - t) : below + (above - below) * t;
}

/** Median (`np.median`), the 50th percentile. */
export function median(xs: readonly number[]): number {
  return percentile(xs, 50);
}
