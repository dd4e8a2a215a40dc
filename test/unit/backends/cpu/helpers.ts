/**
 * Shared helpers of the CPU backend tests: a seeded test-data generator, naive reference
 * formulas, and an AttentionMetadata builder (what worker/ModelRunner does, in miniature).
 */
import assert from "node:assert/strict";
import type { AttentionMetadata, Backend, Tensor } from "../../../../src/backends/backend.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";

/** Mulberry32: a tiny seeded PRNG for test data (uniform in [0, 1)). */
export function makeRand(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n values uniform in [-scale, scale) as f32. */
export function randF32(rand: () => number, n: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (rand() * 2 - 1) * scale;
  return out;
}

/** Fisher-Yates shuffle (in place) with the test generator. */
export function shuffle<T>(rand: () => number, xs: T[]): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

/** Asserts |a_i - b_i| <= atol + rtol * |b_i| for every i, naming the first failure. */
export function assertClose(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  rtol: number,
  atol = 0,
  what = "",
): void {
  assert.equal(a.length, b.length, `${what}: lengths differ`);
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    if (!(d <= atol + rtol * Math.abs(b[i]!))) {
      assert.fail(`${what}: element ${i}: ${a[i]} vs ${b[i]} (diff ${d})`);
    }
  }
}

/** Max |a_i - b_i|. */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

/** One request's part of a step: `numNew` tokens after `numComputed` cached ones, in `blockIds`. */
export interface StepRequest {
  numComputed: number;
  numNew: number;
  blockIds: number[];
}

/**
 * Builds the step's metadata like the model runner: queryStartLoc, seqLens, block tables padded
 * with 0 (at least one column), slot mapping blockIds[pos / blockSize] * blockSize + pos %
 * blockSize, positions; staged by the runner's own stageAttentionMetadata.
 */
export function buildMetadata(
  backend: Backend,
  reqs: readonly StepRequest[],
  blockSize: number,
): { meta: AttentionMetadata; positions: Tensor } {
  const R = reqs.length;
  const T = reqs.reduce((s, r) => s + r.numNew, 0);
  const maxBlocks = Math.max(1, ...reqs.map((r) => r.blockIds.length));
  const qsl = new Int32Array(R + 1);
  const seqLens = new Int32Array(R);
  const bt = new Int32Array(R * maxBlocks);
  const slots = new Int32Array(T);
  const positions = new Int32Array(T);
  let t = 0;
  reqs.forEach((r, i) => {
    qsl[i + 1] = qsl[i]! + r.numNew;
    seqLens[i] = r.numComputed + r.numNew;
    r.blockIds.forEach((b, j) => {
      bt[i * maxBlocks + j] = b;
    });
    for (let k = 0; k < r.numNew; k++, t++) {
      const pos = r.numComputed + k;
      positions[t] = pos;
      slots[t] = r.blockIds[Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize);
    }
  });
  const meta = stageAttentionMetadata(backend, {
    queryStartLoc: qsl,
    seqLens,
    blockTables: bt,
    maxBlocksPerReq: maxBlocks,
    slotMapping: slots,
    positions,
    maxQueryLen: Math.max(...reqs.map((r) => r.numNew)),
    maxSeqLen: Math.max(...seqLens),
  });
  return { meta, positions: backend.stage(positions, [T], "i32") };
}

/**
 * Naive causal attention of one request in float64: q [Tq, Hq, D] at positions
 * [L - Tq, L), k/v [L, Hkv, D] dense; returns [Tq, Hq * D].
 */
export function naiveAttention(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  Tq: number,
  L: number,
  Hq: number,
  Hkv: number,
  D: number,
): Float64Array {
  const out = new Float64Array(Tq * Hq * D);
  const G = Hq / Hkv;
  for (let i = 0; i < Tq; i++) {
    const pos = L - Tq + i;
    for (let h = 0; h < Hq; h++) {
      const g = Math.floor(h / G);
      const s: number[] = [];
      for (let j = 0; j <= pos; j++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[(i * Hq + h) * D + d]! * k[(j * Hkv + g) * D + d]!;
        s.push(dot / Math.sqrt(D));
      }
      const m = Math.max(...s);
      const e = s.map((x) => Math.exp(x - m));
      const z = e.reduce((a, b) => a + b, 0);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        for (let j = 0; j <= pos; j++) acc += (e[j]! / z) * v[(j * Hkv + g) * D + d]!;
        out[(i * Hq + h) * D + d] = acc;
      }
    }
  }
  return out;
}
