/**
 * Per-layer scales of an fp8 KV cache (vLLM k_scale / v_scale; stored = e4m3(x / scale), read =
 * stored * scale) and `--calculate-kv-scales`, vLLM's on-the-fly calibration
 * (vllm/model_executor/layers/attention/attention.py Attention.calc_kv_scales, the constants of
 * vllm/envs.py): on the first forward pass that runs real tokens, each attention layer sets
 *   k_scale = amax|k| / K_SCALE_CONSTANT,   v_scale = amax|v| / V_SCALE_CONSTANT
 * over every token and KV head of the batch, then keeps them (calculate_kv_scales = False).
 * The divisors leave headroom below e4m3's 448 for later tokens larger than the first batch's
 * (amax maps to 200 for K, 100 for V; a later |x| up to 2.24x / 4.48x the first amax still fits,
 * beyond it saturates).
 *
 * Here the engine has no profile or dummy runs, and decode CUDA graphs are captured lazily on the
 * first decode step of each batch size (worker/cuda_graph_runner.ts), which always follows the
 * first prefill: the first batch a layer caches is real tokens and every captured graph sees the
 * calibrated values.
 */
import { DEFAULT_KV_CACHE_SCALE } from "./kv_cache_dtype.js";

/** vLLM's K_SCALE_CONSTANT (vllm/envs.py): amax|k| of the first batch is stored as 200. */
export const K_SCALE_CONSTANT = 200;
/** vLLM's V_SCALE_CONSTANT (vllm/envs.py): amax|v| of the first batch is stored as 100. */
export const V_SCALE_CONSTANT = 100;

/** One layer's fp8 scales (f32 values, > 0). */
export interface KvCacheScales {
  kScale: number;
  vScale: number;
}

/**
 * The scales `--calculate-kv-scales` gives a layer whose first batch had these amax values,
 * rounded to f32 (the kernels take f32). An amax of 0 (or not finite: a NaN activation) keeps
 * {@link DEFAULT_KV_CACHE_SCALE}, where vLLM would divide by a zero scale.
 */
export function kvScalesFromAmax(kAmax: number, vAmax: number): KvCacheScales {
  const of = (amax: number, c: number) =>
    amax > 0 && Number.isFinite(amax) ? Math.fround(amax / c) : DEFAULT_KV_CACHE_SCALE;
  return { kScale: of(kAmax, K_SCALE_CONSTANT), vScale: of(vAmax, V_SCALE_CONSTANT) };
}

/**
 * The scales of one fp8 cache layer as the backends hold them: {@link DEFAULT_KV_CACHE_SCALE}
 * until calibrated; with `calculate` true the first {@link calibrate} call sets them, later
 * calls change nothing.
 */
export class LayerKvScales implements KvCacheScales {
  kScale = DEFAULT_KV_CACHE_SCALE;
  vScale = DEFAULT_KV_CACHE_SCALE;
  /** True while the scales still wait for the layer's first batch. */
  pending: boolean;

  constructor(calculate: boolean) {
    this.pending = calculate;
  }

  /** Sets the scales from the first batch's amax (see {@link kvScalesFromAmax}); once. */
  calibrate(kAmax: number, vAmax: number): void {
    if (!this.pending) return;
    const s = kvScalesFromAmax(kAmax, vAmax);
    this.kScale = s.kScale;
    this.vScale = s.vScale;
    this.pending = false;
  }
}
