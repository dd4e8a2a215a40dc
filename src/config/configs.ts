/**
 * Engine configuration objects (vLLM's SchedulerConfig / CacheConfig names). Each has a
 * `validate...` function returning the list of reasons it is invalid (empty when valid).
 */

/** Scheduling limits (vllm/config/scheduler.py). */
export interface SchedulerConfig {
  /** Maximum number of running requests (`--max-num-seqs`). */
  maxNumSeqs: number;
  /** Token budget of one step across all requests (`--max-num-batched-tokens`). */
  maxNumBatchedTokens: number;
  /** Longest prompt + output a request may have (`--max-model-len`). */
  maxModelLen: number;
  /** Split long prefills across steps (vLLM v1 default: on). */
  enableChunkedPrefill: boolean;
  /**
   * Most tokens one request's prefill may take in a step, in tokens (`--long-prefill-token-threshold`,
   * vLLM's SchedulerConfig.long_prefill_token_threshold, applied in vllm/v1/core/sched/scheduler.py
   * schedule() to running and waiting requests alike): a longer prefill is cut to chunks of this
   * size, so the rest of the step's budget stays for other requests' short prefills. 0 (the
   * default, as vLLM's; also when absent) = no cap. Needs chunked prefill.
   */
  longPrefillTokenThreshold?: number;
}

/** `longPrefillTokenThreshold` value that turns the cap off (vLLM's default). */
export const LONG_PREFILL_THRESHOLD_OFF = 0;

/** KV cache geometry (vllm/config/cache.py). */
export interface CacheConfig {
  /** Tokens per KV block (page) (`--block-size`, default 16). */
  blockSize: number;
  /** Device KV blocks; computed from free memory unless set (`--num-gpu-blocks-override`). */
  numGpuBlocks: number;
  /** Fraction of device memory the engine may use (`--gpu-memory-utilization`). */
  gpuMemoryUtilization: number;
  /**
   * KV storage dtype (`--kv-cache-dtype`): "auto" follows the backend's activation dtype; "fp8" is
   * e4m3 with per-tensor scales (core/kv/kv_cache_dtype.ts).
   */
  kvCacheDtype: "auto" | "bf16" | "f16" | "f32" | "fp8";
  /**
   * `--calculate-kv-scales` (vLLM's calculate_kv_scales): with an fp8 cache, each layer's k_scale /
   * v_scale are measured from the first batch it caches (amax / 200, amax / 100:
   * core/kv/kv_cache_scales.ts) instead of 1.0, then fixed. Only with `kvCacheDtype` "fp8".
   */
  calculateKvScales?: boolean;
  /** Reuse KV of identical prompt prefixes through block hashes (`--enable-prefix-caching`). */
  enablePrefixCaching: boolean;
}

export function validateSchedulerConfig(c: SchedulerConfig): string[] {
  const r: string[] = [];
  if (!Number.isInteger(c.maxNumSeqs) || c.maxNumSeqs < 1)
    r.push(`--max-num-seqs must be >= 1, got ${c.maxNumSeqs}`);
  if (!Number.isInteger(c.maxNumBatchedTokens) || c.maxNumBatchedTokens < 1)
    r.push(`--max-num-batched-tokens must be >= 1, got ${c.maxNumBatchedTokens}`);
  if (!Number.isInteger(c.maxModelLen) || c.maxModelLen < 1)
    r.push(`--max-model-len must be >= 1, got ${c.maxModelLen}`);
  if (!c.enableChunkedPrefill && c.maxNumBatchedTokens < c.maxModelLen)
    r.push(
      `--max-num-batched-tokens (${c.maxNumBatchedTokens}) must be >= --max-model-len (${c.maxModelLen}) when chunked prefill is off`,
    );
  r.push(...longPrefillThresholdReasons(c));
  return r;
}

/** Reasons `longPrefillTokenThreshold` is invalid: an integer >= 0, at most maxModelLen, with chunked prefill. */
function longPrefillThresholdReasons(c: SchedulerConfig): string[] {
  const t = c.longPrefillTokenThreshold ?? LONG_PREFILL_THRESHOLD_OFF;
  if (!Number.isInteger(t) || t < 0)
    return [`--long-prefill-token-threshold must be an integer >= 0 (0 = off), got ${t}`];
  if (t === LONG_PREFILL_THRESHOLD_OFF) return [];
  const r: string[] = [];
  // vLLM refuses a threshold above max_model_len (vllm/config/scheduler.py _verify_args).
  if (t > c.maxModelLen)
    r.push(`--long-prefill-token-threshold (${t}) cannot be greater than --max-model-len (${c.maxModelLen})`);
  if (!c.enableChunkedPrefill)
    r.push(
      `--long-prefill-token-threshold ${t} splits prefills into chunks of ${t} tokens: it needs chunked prefill (drop --no-enable-chunked-prefill)`,
    );
  return r;
}

/** KV block sizes (tokens) the engine takes: powers of two in [1, 256]. */
export const BLOCK_SIZES: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

export function validateCacheConfig(c: CacheConfig): string[] {
  const r: string[] = [];
  if (!BLOCK_SIZES.includes(c.blockSize))
    r.push(`--block-size must be a power of two in [1, 256], got ${c.blockSize}`);
  if (!Number.isInteger(c.numGpuBlocks) || c.numGpuBlocks < 0)
    r.push(`number of KV blocks must be a non-negative integer, got ${c.numGpuBlocks}`);
  if (!(c.gpuMemoryUtilization > 0 && c.gpuMemoryUtilization <= 1))
    r.push(`--gpu-memory-utilization must be in (0, 1], got ${c.gpuMemoryUtilization}`);
  if (c.calculateKvScales === true && c.kvCacheDtype !== "fp8")
    r.push(
      `--calculate-kv-scales measures the scales of an fp8 KV cache: it needs --kv-cache-dtype fp8, got ${c.kvCacheDtype}`,
    );
  return r;
}
