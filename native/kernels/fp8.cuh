// OCP FP8 E4M3 conversions of `--kv-cache-dtype fp8` (host and device). The CPU backend repeats
// them exactly (src/backends/fp8.ts), so a CUDA fp8 cache holds the same codes as
// the CPU oracle's. Encoding: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; normals
// 2^-6 .. 448, subnormals multiples of 2^-9; S.1111.111 is NaN, no infinities.
// float -> e4m3: round to nearest, ties to even, saturating to +-448 (vLLM's
// scaled_fp8_conversion clamps to FP8_E4M3_MAX; CUDA's __NV_SATFINITE); NaN stays NaN.
// Directed variants (floatToE4m3Down / Up) round toward -inf / +inf: Quest's fp8 digests.
// e4m3 -> float is exact; every e4m3 value is a bf16 value too, so with scale 1 an fp8 cache
// read as bf16 feeds the attention kernels the same operands as a bf16 cache holding the
// dequantised values (the exactness check of test/native and native/tests).
// Integer arithmetic only (no cuda_fp8.h intrinsics): the emulator (native/tests/emu) runs it as is.
#pragma once

#include <stdint.h>
#include <string.h>

#ifndef __CUDACC__
#ifndef __host__
#define __host__
#define __device__
#endif
#endif

namespace hs_fp8 {

/** Largest finite e4m3 magnitude. */
constexpr float kE4m3Max = 448.f;

__host__ __device__ inline uint32_t floatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

__host__ __device__ inline float bitsFloat(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/** The e4m3 code of x (round to nearest even, saturating, NaN kept). */
__host__ __device__ inline uint8_t floatToE4m3(float x) {
  const uint32_t u = floatBits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  const float a = bitsFloat(mag);
  if (a >= kE4m3Max) return static_cast<uint8_t>(sign | 0x7eu);  // saturate (infinities too)
  if (a < 0.015625f) {
    // Subnormal (and zero): the nearest multiple of 2^-9, ties to even (8 * 2^-9 is code 0x08).
    const float s = a * 512.f;  // exact
    uint32_t n = static_cast<uint32_t>(s);
    const float frac = s - static_cast<float>(n);
    if (frac > 0.5f || (frac == 0.5f && (n & 1u))) ++n;
    return static_cast<uint8_t>(sign | n);
  }
  const int exp = static_cast<int>(mag >> 23) - 127;
  const uint32_t mant = mag & 0x7fffffu;
  uint32_t keep = mant >> 20;
  const uint32_t rest = mant & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++keep;  // a carry moves the exponent
  return static_cast<uint8_t>(sign | ((static_cast<uint32_t>(exp + 7) << 3) + keep));
}

/** The value of an e4m3 code (exact). */
__host__ __device__ inline float e4m3ToFloat(uint8_t c) {
  const uint32_t e = (c >> 3) & 0xfu;
  const uint32_t m = c & 7u;
  float v;
  if ((c & 0x7fu) == 0x7fu) {
    v = bitsFloat(0x7fc00000u);
  } else if (e == 0) {
    v = static_cast<float>(m) * 0.001953125f;  // m * 2^-9
  } else {
    v = bitsFloat(((e + 120u) << 23) | (m << 20));  // 2^(e-7) * (1 + m/8)
  }
  return (c & 0x80u) ? -v : v;
}

/**
 * Directed rounding onto the e4m3 grid (scale 1) for Quest digests stored in fp8 (hisparse.h
 * hsReshapeAndCacheDigest): floatToE4m3Directed(x, false) is the code of the largest e4m3 value
 * <= x (round down, a digest's min), (x, true) of the smallest >= x (round up, its max). NaN
 * stays NaN (sign kept); saturating at +-448 (beyond it the bound is not kept); a zero result
 * is +0 (code 0x00) whatever the sign of x. Bit-exact with src/backends/fp8.ts floatToE4m3Down /
 * floatToE4m3Up.
 */
__host__ __device__ inline uint8_t floatToE4m3Directed(float x, bool up) {
  const uint32_t u = floatBits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  const bool away = up == (sign == 0u);  // the magnitude rounds away from zero
  const float a = bitsFloat(mag);
  uint32_t m;  // magnitude code, 0 .. 0x7e
  if (a >= kE4m3Max) {
    m = 0x7eu;  // saturate (infinities too)
  } else if (a < 0.015625f) {
    const float s = a * 512.f;  // exact: multiples of 2^-9
    m = static_cast<uint32_t>(s);
    if (away && static_cast<float>(m) != s) ++m;  // 8 is the code of 2^-6
  } else {
    // A carry (mantissa 7 + 1) moves the exponent; below 448 it never passes 0x7e.
    m = (((mag >> 23) - 120u) << 3) + ((mag >> 20) & 7u) + (away && (mag & 0xfffffu) != 0u ? 1u : 0u);
  }
  return static_cast<uint8_t>(m == 0u ? 0u : (sign | m));
}

/** The largest e4m3 value <= x (floatToE4m3Directed). */
__host__ __device__ inline uint8_t floatToE4m3Down(float x) { return floatToE4m3Directed(x, false); }

/** The smallest e4m3 value >= x (floatToE4m3Directed). */
__host__ __device__ inline uint8_t floatToE4m3Up(float x) { return floatToE4m3Directed(x, true); }

}  // namespace hs_fp8
