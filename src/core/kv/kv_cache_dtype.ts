/**
 * `--kv-cache-dtype`: what one stored KV element costs, the one place the name → bytes mapping
 * lives (the engine's KV set-ups and `hisparse plan` both build their {@link KVStorage} here).
 *
 * vLLM's semantics (vllm/config/cache.py CacheDType, docs "Quantized KV Cache"):
 * - `auto`: the model's activation dtype (bf16 on CUDA for bf16 checkpoints; f32 on the CPU engine);
 * - `bf16` / `f16` / `f32`: that dtype, 2 / 2 / 4 bytes;
 * - `fp8`: fp8 e4m3, 1 byte per element, with one f32 scale per layer for K and one for V
 *   (per tensor, not per token), so no bytes per token are added: KVQuantization
 *   scaleBytesPerToken 0. vLLM's DeepSeek sparse-MLA backends store `fp8` MLA rows in their own
 *   `fp8_ds_mla` layout (656 B a row: 512 fp8 + 4 f32 tile scales + 64 bf16 rope values) and its
 *   DSA indexer keys in fp8 with an f32 scale per 128 values whatever the dtype; neither is this
 *   engine's layout (bench/results/plan_glm5_tp8.md shows what each changes).
 *
 * fp8 is OCP FP8 E4M3 (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; finite range +-448,
 * no infinities, one NaN pattern): stored = e4m3(x / scale), read = stored * scale. Every scale
 * is {@link DEFAULT_KV_CACHE_SCALE} (vLLM's default when the checkpoint gives none) unless
 * `--calculate-kv-scales` measures each layer's from its first batch (kv_cache_scales.ts).
 */
import type { KVStorage } from "./kv_cache_interface.js";

/** The accepted `--kv-cache-dtype` values. */
export const KV_CACHE_DTYPES = ["auto", "bf16", "f16", "f32", "fp8"] as const;
/** One `--kv-cache-dtype` value. */
export type KVCacheDtype = (typeof KV_CACHE_DTYPES)[number];
/** A resolved KV storage dtype ("auto" replaced by the activation dtype). */
export type KVStorageDtype = Exclude<KVCacheDtype, "auto">;

/** Bytes of one stored K/V element per storage dtype. */
export const KV_CACHE_DTYPE_BYTES: Readonly<Record<KVStorageDtype, number>> = {
  bf16: 2,
  f16: 2,
  f32: 4,
  fp8: 1,
};

/**
 * The storage dtype of `--kv-cache-dtype`: `auto` is `activationDtype`.
 * @param activationDtype the backend's activation dtype ("bf16" on CUDA, "f32" on the CPU engine).
 */
export function resolveKVCacheDtype(dtype: KVCacheDtype, activationDtype: KVStorageDtype): KVStorageDtype {
  return dtype === "auto" ? activationDtype : dtype;
}

/**
 * How the KV cache is stored for `dtype` on `tensorParallelSize` ranks: element bytes and the
 * per-token scale bytes (0 for every dtype above: fp8 scales are per tensor).
 */
export function kvStorageFor(dtype: KVStorageDtype, tensorParallelSize = 1): KVStorage {
  return { elementBytes: KV_CACHE_DTYPE_BYTES[dtype], scaleBytesPerToken: 0, tensorParallelSize };
}

/** vLLM's k_scale / v_scale when a checkpoint carries none (vllm/attention/layer.py). */
export const DEFAULT_KV_CACHE_SCALE = 1.0;

/** Largest finite FP8 E4M3 magnitude (OCP 8-bit floating point spec, v1.0, table 1). */
export const FP8_E4M3_MAX = 448;

/**
 * Bytes per element of a KV storage dtype.
 * @throws Error for a name that is not a KV storage dtype ("auto" must be resolved first).
 */
export function kvCacheDtypeBytes(dtype: string): number {
  const b = (KV_CACHE_DTYPE_BYTES as Record<string, number | undefined>)[dtype];
  if (b === undefined) {
    const names = KV_CACHE_DTYPES.filter((d) => d !== "auto").join(", ");
    throw new Error(`unknown KV cache dtype "${dtype}" (expected ${names})`);
  }
  return b;
}

/** Whether a KV storage dtype is quantized (reads dequantize with the layer's scales). */
export function isQuantizedKVCacheDtype(dtype: string): boolean {
  return dtype === "fp8";
}
