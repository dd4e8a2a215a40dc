/**
 * Exact conversions between the 16-bit float storage formats of checkpoints and f32.
 * bf16 is the upper half of an IEEE-754 binary32 (so bf16 -> f32 is `bits << 16`, exact);
 * f16 is IEEE-754 binary16 (1 sign, 5 exponent, 10 mantissa bits), also exactly representable
 * in f32.
 */

/**
 * Widens bf16 bit patterns to f32 exactly: f32 bits = bf16 bits << 16.
 * @param src bf16 bits [n]
 * @param dst f32 [n] (a new array when omitted)
 * @throws Error when dst is shorter than src.
 */
export function bf16ToF32(src: Uint16Array, dst: Float32Array = new Float32Array(src.length)): Float32Array {
  if (dst.length < src.length) throw new Error(`bf16ToF32: destination holds ${dst.length} < ${src.length}`);
  const bits = new Uint32Array(dst.buffer, dst.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) bits[i] = src[i]! << 16;
  return dst;
}

/**
 * Rounds f32 values to the nearest bf16 (ties to even; NaN stays a quiet NaN), returning the
 * bit patterns. The inverse of {@link bf16ToF32} on bf16-representable values.
 * Rule: PyTorch c10/util/BFloat16.h round_to_nearest_even.
 */
export function f32ToBf16(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    const b = bits[i]!;
    if (Number.isNaN(src[i]!)) {
      out[i] = 0x7fc0;
      continue;
    }
    const rounding = 0x7fff + ((b >>> 16) & 1);
    out[i] = ((b + rounding) >>> 16) & 0xffff;
  }
  return out;
}

/** The f32 value of one binary16 bit pattern (exact; subnormals, infinities and NaN included). */
export function f16BitsToNumber(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/**
 * Widens f16 bit patterns to f32 exactly.
 * @param src f16 bits [n]
 * @param dst f32 [n] (a new array when omitted)
 * @throws Error when dst is shorter than src.
 */
export function f16ToF32(src: Uint16Array, dst: Float32Array = new Float32Array(src.length)): Float32Array {
  if (dst.length < src.length) throw new Error(`f16ToF32: destination holds ${dst.length} < ${src.length}`);
  for (let i = 0; i < src.length; i++) dst[i] = f16BitsToNumber(src[i]!);
  return dst;
}
