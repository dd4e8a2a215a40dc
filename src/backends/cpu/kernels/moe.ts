/**
 * Mixture-of-experts kernels of the CPU backend (the oracle of Backend.moe, backends/backend.ts):
 * routing, permutation by expert and the weighted un-permute. They run on the calling thread
 * (O(T * E) and O(T * k * H)); the expert matmuls go through the linear kernel
 * (dispatch.ts groupedLinear). Rounding follows HF transformers' fp32 modules: each PyTorch op
 * rounds to f32 (`Math.fround` marks the points), reductions run in float64.
 */

/** The routing rule as the kernel reads it (config/moe_config.ts MoeRoutingRule). */
export interface RouteRule {
  scoring: "softmax" | "sigmoid";
  topK: number;
  renormalize: boolean;
  numGroups: number;
  topkGroup: number;
  routedScalingFactor: number;
}

/** Added to the weight sum before renormalising (HF DeepseekV3TopkRouter / Glm4MoeMoE). */
const RENORM_EPS = 1e-20;

/** Scratch arrays of {@link routeKernel}, sized for E experts and G groups. */
export interface RouteScratch {
  /** [E] scores s (softmax or sigmoid). */
  scores: Float32Array;
  /** [E] selection scores c (s + bias, masked groups -inf). */
  choice: Float32Array;
  /** [G] group scores. */
  groups: Float32Array;
  /** [k] selected ids in selection order. */
  picked: Int32Array;
}

/** Allocates scratch for E experts, G groups and k selections. */
export function routeScratch(E: number, G: number, k: number): RouteScratch {
  return {
    scores: new Float32Array(E),
    choice: new Float32Array(E),
    groups: new Float32Array(G),
    picked: new Int32Array(k),
  };
}

/**
 * Index of the largest value of v[0..n) not yet taken (ties: the lowest index); marks it taken
 * by setting it to -inf. Returns -1 when every value is -inf or NaN.
 */
function takeMax(v: Float32Array, n: number): number {
  let best = -1;
  let bestVal = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < n; i++) {
    const x = v[i]!;
    if (x > bestVal) {
      bestVal = x;
      best = i;
    }
  }
  if (best >= 0) v[best] = Number.NEGATIVE_INFINITY;
  return best;
}

/** s = softmax(row) (float64 sums, each p rounded to f32) or sigmoid(row), into `out`. */
function scoreRow(
  logits: Float32Array,
  o: number,
  E: number,
  scoring: RouteRule["scoring"],
  out: Float32Array,
): void {
  if (scoring === "sigmoid") {
    for (let e = 0; e < E; e++) out[e] = Math.fround(1 / (1 + Math.exp(-logits[o + e]!)));
    return;
  }
  let m = Number.NEGATIVE_INFINITY;
  for (let e = 0; e < E; e++) m = Math.max(m, logits[o + e]!);
  let sum = 0;
  for (let e = 0; e < E; e++) sum += Math.exp(logits[o + e]! - m);
  for (let e = 0; e < E; e++) out[e] = Math.fround(Math.exp(logits[o + e]! - m) / sum);
}

/**
 * Masks (to -inf) the experts of every group outside the `topkGroup` best: a group scores the
 * f32 sum of its two largest selection scores (HF `topk(2).sum`). choice: [E], in place.
 */
function limitGroups(
  choice: Float32Array,
  E: number,
  G: number,
  topkGroup: number,
  groups: Float32Array,
): void {
  const per = E / G;
  for (let g = 0; g < G; g++) {
    let a = Number.NEGATIVE_INFINITY;
    let b = Number.NEGATIVE_INFINITY;
    for (let i = g * per; i < (g + 1) * per; i++) {
      const x = choice[i]!;
      if (x > a) {
        b = a;
        a = x;
      } else if (x > b) b = x;
    }
    groups[g] = Math.fround(a + b);
  }
  const keep = new Uint8Array(G);
  for (let i = 0; i < topkGroup; i++) {
    const g = takeMax(groups, G);
    if (g >= 0) keep[g] = 1;
  }
  for (let g = 0; g < G; g++) {
    if (keep[g] === 1) continue;
    for (let i = g * per; i < (g + 1) * per; i++) choice[i] = Number.NEGATIVE_INFINITY;
  }
}

/**
 * Backend.moe.route on f32 arrays: per token, scores, bias, group limit, top-k, weights,
 * renormalisation and scaling (the contract's rule), ids then sorted ascending with their
 * weights. logits: [T, E]; bias: [E] or null; outIds: i32 [T, k]; outWeights: f32 [T, k].
 * @throws Error when a row has fewer than k selectable experts (NaN or -inf scores).
 */
export function routeKernel(
  logits: Float32Array,
  bias: Float32Array | null,
  T: number,
  E: number,
  rule: RouteRule,
  outIds: Int32Array,
  outWeights: Float32Array,
  scratch: RouteScratch,
): void {
  const k = rule.topK;
  const { scores, choice, groups, picked } = scratch;
  for (let t = 0; t < T; t++) {
    scoreRow(logits, t * E, E, rule.scoring, scores);
    for (let e = 0; e < E; e++) choice[e] = bias === null ? scores[e]! : Math.fround(scores[e]! + bias[e]!);
    if (rule.numGroups > 1) limitGroups(choice, E, rule.numGroups, rule.topkGroup, groups);
    let sum = 0;
    for (let j = 0; j < k; j++) {
      const e = takeMax(choice, E);
      if (e < 0) throw new Error(`moe.route: token ${t} has fewer than ${k} selectable experts`);
      picked[j] = e;
      sum = Math.fround(sum + scores[e]!);
    }
    const denom = Math.fround(sum + RENORM_EPS);
    picked.sort();
    for (let j = 0; j < k; j++) {
      const e = picked[j]!;
      let w = scores[e]!;
      if (rule.renormalize) w = Math.fround(w / denom);
      outIds[t * k + j] = e;
      outWeights[t * k + j] = Math.fround(w * rule.routedScalingFactor);
    }
  }
}

/**
 * Backend.moe.permute on arrays (a stable counting sort by expert): row (t, j) goes to
 * rows [offsets[e], offsets[e+1]) of its expert e in ascending (t, j) order.
 * x: f32 [T, H]; ids: i32 [T, k]; hidden: f32 [T*k, H]; offsets: i32 [E + 1];
 * slotToRow: i32 [T, k].
 * @throws Error for an id outside [0, E).
 */
export function permuteKernel(
  x: Float32Array,
  T: number,
  H: number,
  ids: Int32Array,
  k: number,
  E: number,
  hidden: Float32Array,
  offsets: Int32Array,
  slotToRow: Int32Array,
): void {
  offsets.fill(0);
  for (let i = 0; i < T * k; i++) {
    const e = ids[i]!;
    if (!(e >= 0 && e < E)) throw new Error(`moe.permute: expert id ${e} of slot ${i} is outside [0, ${E})`);
    offsets[e + 1] = offsets[e + 1]! + 1;
  }
  for (let e = 0; e < E; e++) offsets[e + 1] = offsets[e + 1]! + offsets[e]!;
  const cursor = offsets.slice(0, E);
  for (let t = 0; t < T; t++) {
    for (let j = 0; j < k; j++) {
      const e = ids[t * k + j]!;
      const row = cursor[e]!;
      cursor[e] = row + 1;
      slotToRow[t * k + j] = row;
      hidden.set(x.subarray(t * H, (t + 1) * H), row * H);
    }
  }
}

/**
 * Backend.moe.unpermute on arrays: out[t] = sum_j w[t, j] * y[slotToRow[t, j]] in slot order,
 * each product and sum rounded to f32 (HF's `expert(x) * w` then index_add_ into zeros), then
 * + shared[t] when given. y: f32 [P, H]; slotToRow: i32 [T, k]; w: f32 [T, k];
 * shared: f32 [T, H] or null; out: f32 [T, H].
 * @throws Error for a row outside [0, P).
 */
export function unpermuteKernel(
  y: Float32Array,
  P: number,
  H: number,
  slotToRow: Int32Array,
  w: Float32Array,
  T: number,
  k: number,
  shared: Float32Array | null,
  out: Float32Array,
): void {
  for (let t = 0; t < T; t++) {
    const o = t * H;
    out.fill(0, o, o + H);
    for (let j = 0; j < k; j++) {
      const r = slotToRow[t * k + j]!;
      if (!(r >= 0 && r < P))
        throw new Error(`moe.unpermute: row ${r} of slot (${t}, ${j}) is outside [0, ${P})`);
      const wt = w[t * k + j]!;
      const yo = r * H;
      for (let i = 0; i < H; i++) out[o + i] = Math.fround(out[o + i]! + Math.fround(y[yo + i]! * wt));
    }
    if (shared !== null) for (let i = 0; i < H; i++) out[o + i] = Math.fround(out[o + i]! + shared[o + i]!);
  }
}
