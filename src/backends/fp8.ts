/**
 * OCP FP8 E4M3 on the CPU: the exact rounding of the CUDA kernels (native/kernels/fp8.cuh
 * hsFloatToE4m3 / hsE4m3ToFloat), so the CPU backend is the oracle of `--kv-cache-dtype fp8`.
 * Encoding: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; normals 2^-6 .. 448, subnormals
 * multiples of 2^-9; 0x7f / 0xff are NaN; no infinities. Conversion from f32: round to nearest,
 * ties to even, saturating to +-448 (vLLM's scaled_fp8_conversion clamps to FP8_E4M3_MAX, CUDA's
 * __NV_SATFINITE); NaN stays NaN. Source: OCP 8-bit Floating Point Specification (OFP8) v1.0.
 */
import { FP8_E4M3_MAX } from "../core/kv/kv_cache_dtype.js";

/** The e4m3 code of NaN with the sign bit clear (S.1111.111). */
const E4M3_NAN = 0x7f;
/** The e4m3 code of +448 (S.1111.110), where saturation lands. */
const E4M3_MAX_CODE = 0x7e;
/** Smallest normal e4m3 magnitude, 2^-6. */
const E4M3_MIN_NORMAL = 2 ** -6;

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Rounds x (a non-negative number) to the nearest integer, ties to even. */
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The e4m3 code (0..255) of an f32 value (x is rounded to f32 first). */
export function floatToE4m3(x: number): number {
  f32[0] = x;
  const u = u32[0]!;
  const sign = (u >>> 24) & 0x80;
  const a = Math.abs(f32[0]!);
  if (Number.isNaN(a)) return sign | E4M3_NAN;
  if (a >= FP8_E4M3_MAX) return sign | E4M3_MAX_CODE;
  // Subnormals (and zero): multiples of 2^-9; a rounding up to 8 * 2^-9 is the code of 2^-6.
  if (a < E4M3_MIN_NORMAL) return sign | roundHalfEven(a * 512);
  const exp = ((u >>> 23) & 0xff) - 127;
  const mant = u & 0x7fffff;
  let keep = mant >>> 20;
  const rest = mant & 0xfffff;
  if (rest > 0x80000 || (rest === 0x80000 && (keep & 1) === 1)) keep += 1; // a carry moves the exponent
  return sign | (((exp + 7) << 3) + keep);
}

/** Value of every e4m3 code (index = code). */
export const E4M3_VALUES: Float32Array = (() => {
  const t = new Float32Array(256);
  for (let c = 0; c < 256; c++) {
    const e = (c >>> 3) & 0xf;
    const m = c & 7;
    const mag = (c & 0x7f) === E4M3_NAN ? Number.NaN : e === 0 ? m * 2 ** -9 : (1 + m / 8) * 2 ** (e - 7);
    t[c] = c & 0x80 ? -mag : mag;
  }
  return t;
})();

/** Value of an e4m3 code. */
export function e4m3ToFloat(code: number): number {
  return E4M3_VALUES[code & 0xff]!;
}

/**
 * In place: each element of `a[start, end)` becomes what an fp8 cache with per-tensor `scale`
 * reads back: e4m3(x * (1 / scale)) * scale in f32, the CUDA kernel's operation order (vLLM:
 * stored = x / k_scale, read = stored * k_scale). With scale 1 (the default) the CUDA kernels
 * read exactly these values; with other scales they round the product to bf16.
 */
export function roundToE4m3(a: Float32Array, start: number, end: number, scale: number): void {
  if (scale === 1) {
    for (let i = start; i < end; i++) a[i] = E4M3_VALUES[floatToE4m3(a[i]!)]!;
    return;
  }
  const inv = Math.fround(1 / scale);
  for (let i = start; i < end; i++) a[i] = E4M3_VALUES[floatToE4m3(a[i]! * inv)]! * scale;
}

/**
 * Directed rounding onto the e4m3 grid, scale 1 (no per-tensor scale), for Quest digests stored
 * in fp8 (HiSparse `digest_dtype` "fp8", attention/sparse/quest.ts): {@link floatToE4m3Down} is
 * the code of the largest e4m3 value <= x, {@link floatToE4m3Up} of the smallest >= x, so a min
 * rounded down and a max rounded up still bound every key and the Quest score stays an upper
 * bound of the logits. Rules (bit-exact with native/kernels/fp8.cuh floatToE4m3Down / Up):
 * - x is rounded to f32 first; NaN stays NaN (sign kept, code S.1111.111);
 * - saturating at +-448: x > 448 rounds down to 448 (exact) and up to 448 (saturated), x < -448
 *   rounds up to -448 (exact) and down to -448 (saturated); infinities likewise. Only there is the
 *   bound not kept (a key beyond +-448 at scale 1);
 * - a zero result is +0 (code 0x00) whatever the sign of x (so -0 and a tiny negative round up
 *   to +0, and -0 rounds down to +0): equal values get equal codes, NaN aside.
 * Rounding down is monotone (a <= b implies rd(a) <= rd(b)), so min(rd(a), rd(b)) = rd(min(a, b))
 * and max(ru(a), ru(b)) = ru(max(a, b)) as values: folding a key into a stored rounded digest
 * gives the rounded digest of the exact min / max.
 */
export function floatToE4m3Down(x: number): number {
  return e4m3Directed(x, false);
}

/** The code of the smallest e4m3 value >= x (saturating at 448; see {@link floatToE4m3Down}). */
export function floatToE4m3Up(x: number): number {
  return e4m3Directed(x, true);
}

/** {@link floatToE4m3Down} / {@link floatToE4m3Up}: up = true rounds toward +infinity. */
function e4m3Directed(x: number, up: boolean): number {
  f32[0] = x;
  const u = u32[0]!;
  const sign = (u >>> 24) & 0x80;
  const a = Math.abs(f32[0]!);
  if (Number.isNaN(a)) return sign | E4M3_NAN;
  // The magnitude rounds away from zero when the direction points away from zero.
  const away = up === (sign === 0);
  let m: number; // magnitude code, 0 .. E4M3_MAX_CODE
  if (a >= FP8_E4M3_MAX) m = E4M3_MAX_CODE;
  else if (a < E4M3_MIN_NORMAL) {
    const s = a * 512; // exact: multiples of 2^-9
    m = away ? Math.ceil(s) : Math.floor(s); // 8 (from ceil) is the code of 2^-6
  } else {
    const exp = ((u >>> 23) & 0xff) - 127;
    const mant = u & 0x7fffff;
    // A carry (mantissa 7 + 1) moves the exponent; below 448 it never passes 0x7e.
    m = ((exp + 7) << 3) + (mant >>> 20) + (away && (mant & 0xfffff) !== 0 ? 1 : 0);
  }
  return m === 0 ? 0 : sign | m;
}
