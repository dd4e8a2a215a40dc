/**
 * KV cache storage dtypes and their bytes per element: the one place that maps `--kv-cache-dtype`
 * to bytes (the KV memory formula, the worker's set-ups and `hisparse plan` all read it).
 *
 * vLLM semantics (vllm/config/cache.py CacheDType, "fp8" = "fp8_e4m3"): fp8 stores each K/V
 * element as OCP FP8 E4M3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; finite range
 * +-448, no infinities, one NaN pattern) with a per-tensor scale per layer and per K / V:
 * stored = e4m3(x / scale), read = stored * scale. Today every scale is
 * {@link DEFAULT_KV_CACHE_SCALE} (vLLM's default when the checkpoint gives none);
 * `--calculate-kv-scales` (scales measured from the first batch) is not implemented yet. A
 * per-tensor scale costs no bytes per token, so the formula's `scaleBytesPerToken` stays 0.
 */

import type { CacheConfig } from "../../config/configs.js";

/** Storage dtypes of the KV cache once "auto" is resolved (CacheConfig.kvCacheDtype). */
export type KVCacheDtype = Exclude<CacheConfig["kvCacheDtype"], "auto">;

/** Bytes per K/V element of each KV cache dtype. */
export const KV_CACHE_DTYPE_BYTES: Readonly<Record<KVCacheDtype, number>> = {
  bf16: 2,
  f16: 2,
  f32: 4,
  fp8: 1,
};

/** The dtypes `--kv-cache-dtype` accepts besides "auto", in the order help texts list them. */
export const KV_CACHE_DTYPES: readonly KVCacheDtype[] = ["bf16", "f16", "f32", "fp8"];

/** vLLM's k_scale / v_scale when a checkpoint carries none (vllm/attention/layer.py). */
export const DEFAULT_KV_CACHE_SCALE = 1.0;

/** Largest finite FP8 E4M3 magnitude (OCP 8-bit floating point spec, v1.0, table 1). */
export const FP8_E4M3_MAX = 448;

/**
 * Bytes per element of a KV cache dtype.
 * @throws Error for a name that is not a KV cache dtype ("auto" must be resolved first).
 */
export function kvCacheDtypeBytes(dtype: string): number {
  const b = (KV_CACHE_DTYPE_BYTES as Record<string, number | undefined>)[dtype];
  if (b === undefined)
    throw new Error(`unknown KV cache dtype "${dtype}" (expected ${KV_CACHE_DTYPES.join(", ")})`);
  return b;
}

/** Whether a KV cache dtype is quantized (reads dequantize with the layer's scales). */
export function isQuantizedKVCacheDtype(dtype: string): boolean {
  return dtype === "fp8";
}
