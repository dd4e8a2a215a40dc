/**
 * Host-side conversions between f32 and the 16-bit float formats, used when staging data for the
 * device and reading it back. bf16 = the top 16 bits of an IEEE f32; f16 = IEEE binary16.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** bf16 bits of x, rounded to nearest even (as __float2bfloat16_rn); NaN -> quiet NaN. */
export function f32ToBf16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) & 0x8000) | 0x7fc0;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** The f32 value of bf16 bits. */
export function bf16BitsToF32(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

/** x rounded to the nearest bf16 value (the value a bf16 tensor holds). */
export function roundBf16(x: number): number {
  return bf16BitsToF32(f32ToBf16Bits(x));
}

/** The f32 value of IEEE binary16 bits (subnormals, infinities and NaN included). */
export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** [n] bf16 bits -> f32 values, into `out` when given. */
export function bf16ArrayToF32(
  src: Uint16Array,
  out: Float32Array = new Float32Array(src.length),
): Float32Array {
  const o32 = new Uint32Array(out.buffer, out.byteOffset, out.length);
  for (let i = 0; i < src.length; i++) o32[i] = src[i]! << 16;
  return out;
}

/** [n] f32 values -> bf16 bits (round to nearest even), into `out` when given. */
export function f32ArrayToBf16(
  src: Float32Array,
  out: Uint16Array = new Uint16Array(src.length),
): Uint16Array {
  for (let i = 0; i < src.length; i++) out[i] = f32ToBf16Bits(src[i]!);
  return out;
}

/** [n] f16 bits -> f32 values, into `out` when given. */
export function f16ArrayToF32(
  src: Uint16Array,
  out: Float32Array = new Float32Array(src.length),
): Float32Array {
  for (let i = 0; i < src.length; i++) out[i] = f16BitsToF32(src[i]!);
  return out;
}
