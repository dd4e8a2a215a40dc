/**
 * A seeded pseudo-random generator for benchmarks and evaluations: the same seed gives the same
 * datasets, arrival times and passkey documents on every machine (numpy's generator cannot be
 * reproduced bit for bit in JS, so runs are reproducible within hisparse, not against vLLM).
 *
 * Generator: xoshiro128** 1.0 (Blackman & Vigna, https://prng.di.unimi.it/xoshiro128starstar.c),
 * state seeded with splitmix64 (https://prng.di.unimi.it/splitmix64.c) as its authors advise.
 */
export class Rng {
  private readonly s = new Uint32Array(4);

  /** @param seed any integer (negative and > 2^32 values are taken modulo 2^64). */
  constructor(seed: number) {
    let sm = BigInt.asUintN(64, BigInt(Math.trunc(seed)));
    const next64 = (): bigint => {
      sm = BigInt.asUintN(64, sm + 0x9e3779b97f4a7c15n);
      let z = sm;
      z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
      z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
      return z ^ (z >> 31n);
    };
    const a = next64();
    const b = next64();
    this.s[0] = Number(a & 0xffffffffn);
    this.s[1] = Number(a >> 32n);
    this.s[2] = Number(b & 0xffffffffn);
    this.s[3] = Number(b >> 32n);
  }

  /** A generator with an explicit xoshiro128** state (for known-answer tests). */
  static fromState(state: readonly [number, number, number, number]): Rng {
    const r = new Rng(0);
    r.s.set(state);
    return r;
  }

  /** Next raw 32-bit output, as an unsigned integer in [0, 2^32). */
  nextUint32(): number {
    const s = this.s;
    let s0 = s[0]!;
    let s1 = s[1]!;
    let s2 = s[2]!;
    let s3 = s[3]!;
    const result = Math.imul(rotl(Math.imul(s1, 5) >>> 0, 7), 9) >>> 0;
    const t = (s1 << 9) >>> 0;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = rotl(s3 >>> 0, 11);
    s[0] = s0;
    s[1] = s1;
    s[2] = s2;
    s[3] = s3;
    return result;
  }

  /** Uniform float in [0, 1) with 53 random bits. */
  random(): number {
    const hi = this.nextUint32() >>> 5; // 27 bits
    const lo = this.nextUint32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /**
   * Uniform integer in [low, high] (both inclusive, as numpy's `integers(low, high + 1)`).
   * @throws RangeError when high < low or the bounds are not integers.
   */
  integer(low: number, high: number): number {
    if (!Number.isInteger(low) || !Number.isInteger(high) || high < low)
      throw new RangeError(`invalid integer range [${low}, ${high}]`);
    return low + Math.floor(this.random() * (high - low + 1));
  }

  /** Standard normal sample (Box–Muller transform). */
  normal(): number {
    let u = 0;
    while (u === 0) u = this.random();
    const v = this.random();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }

  /**
   * Gamma(shape, scale) sample, mean shape × scale: Marsaglia & Tsang, "A Simple Method for
   * Generating Gamma Variables" (ACM TOMS 2000), with the shape < 1 boost
   * Gamma(a) = Gamma(a + 1) × U^(1/a) from the same paper.
   * @throws RangeError when shape or scale is not > 0.
   */
  gamma(shape: number, scale: number): number {
    if (!(shape > 0) || !(scale > 0))
      throw new RangeError(`gamma needs shape, scale > 0, got ${shape}, ${scale}`);
    if (shape < 1) {
      let u = 0;
      while (u === 0) u = this.random();
      return this.gamma(shape + 1, scale) * u ** (1 / shape);
    }
    const d = shape - 1 / 3;
    const c = 1 / Math.sqrt(9 * d);
    for (;;) {
      let x: number;
      let v: number;
      do {
        x = this.normal();
        v = 1 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const u = this.random();
      if (u < 1 - 0.0331 * x ** 4) return d * v * scale;
      if (Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v * scale;
    }
  }

  /** Fisher–Yates shuffle in place; returns the array. */
  shuffle<T>(a: T[]): T[] {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.integer(0, i);
      const t = a[i]!;
      a[i] = a[j]!;
      a[j] = t;
    }
    return a;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
