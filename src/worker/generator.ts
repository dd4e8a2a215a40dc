/**
 * Seeded random generator of the sampler: Philox4x32-10, the counter-based generator of
 * Salmon, Moraes, Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3" (SC'11), as in
 * the Random123 library (philox.h) that cuRAND and PyTorch's CUDA generator also use. Checked
 * against Random123's known-answer vectors (tests/kat_vectors).
 *
 * A generator is a 64-bit key (the seed) and a 128-bit counter; each counter value gives four
 * 32-bit outputs, consumed in order, then the counter increments.
 */

/** Philox4x32 round multipliers and Weyl key increments (Random123 philox.h). */
const PHILOX_M0 = 0xd2511f53;
const PHILOX_M1 = 0xcd9e8d57;
const PHILOX_W0 = 0x9e3779b9;
const PHILOX_W1 = 0xbb67ae85;
/** 2^-24: uniforms carry 24 random bits, so they are exact f32 values in [0, 1). */
const UNIFORM_SCALE = 2 ** -24;

/** High 32 bits of the 64-bit product of two uint32 values (exact, via 16-bit halves). */
function mulhi32(a: number, b: number): number {
  const al = a & 0xffff;
  const ah = a >>> 16;
  const bl = b & 0xffff;
  const bh = b >>> 16;
  const lh = al * bh;
  const hl = ah * bl;
  const mid = ((al * bl) >>> 16) + (lh & 0xffff) + (hl & 0xffff);
  return (ah * bh + (lh >>> 16) + (hl >>> 16) + (mid >>> 16)) >>> 0;
}

/**
 * One Philox4x32-10 block: ten rounds over counter (c0..c3) with key (k0, k1), the key bumped
 * by (W0, W1) between rounds. Writes the four output words into `out`.
 */
export function philox4x32_10(ctr: ArrayLike<number>, key: ArrayLike<number>, out: Uint32Array): void {
  let c0 = ctr[0]! >>> 0;
  let c1 = ctr[1]! >>> 0;
  let c2 = ctr[2]! >>> 0;
  let c3 = ctr[3]! >>> 0;
  let k0 = key[0]! >>> 0;
  let k1 = key[1]! >>> 0;
  for (let round = 0; round < 10; round++) {
    if (round > 0) {
      k0 = (k0 + PHILOX_W0) >>> 0;
      k1 = (k1 + PHILOX_W1) >>> 0;
    }
    const hi0 = mulhi32(PHILOX_M0, c0);
    const lo0 = Math.imul(PHILOX_M0, c0) >>> 0;
    const hi1 = mulhi32(PHILOX_M1, c2);
    const lo1 = Math.imul(PHILOX_M1, c2) >>> 0;
    c0 = (hi1 ^ c1 ^ k0) >>> 0;
    c1 = lo1;
    c2 = (hi0 ^ c3 ^ k1) >>> 0;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/** A source of uniform random numbers in [0, 1) (a {@link Generator}, or a fixed list in tests). */
export interface RandomSource {
  nextUniform(): number;
}

/**
 * A seeded stream of random numbers (one per request with a seed, one for the engine).
 * The key is the seed as a 64-bit two's-complement integer split into (low, high) words; the
 * counter starts at 0.
 */
export class Generator implements RandomSource {
  private readonly key: Uint32Array;
  private readonly ctr = new Uint32Array(4);
  private readonly block = new Uint32Array(4);
  /** Next unused word of `block` (4: none left). */
  private next = 4;

  /**
   * @param seed any safe integer (negative seeds use their 64-bit two's complement).
   * @throws Error when seed is not a safe integer.
   */
  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) throw new Error(`seed must be a safe integer, got ${seed}`);
    const s = BigInt.asUintN(64, BigInt(seed));
    this.key = Uint32Array.of(Number(s & 0xffffffffn), Number(s >> 32n));
  }

  /** The next 32-bit output word, in [0, 2^32). */
  nextUint32(): number {
    if (this.next === 4) {
      philox4x32_10(this.ctr, this.key, this.block);
      this.increment();
      this.next = 0;
    }
    return this.block[this.next++]!;
  }

  /** A uniform number in [0, 1) with 24 random bits (exactly representable in f32). */
  nextUniform(): number {
    return (this.nextUint32() >>> 8) * UNIFORM_SCALE;
  }

  /** Adds one to the 128-bit counter (word 0 lowest). */
  private increment(): void {
    for (let i = 0; i < 4; i++) {
      this.ctr[i] = (this.ctr[i]! + 1) >>> 0;
      if (this.ctr[i] !== 0) return; // no carry into the next word
    }
  }
}
