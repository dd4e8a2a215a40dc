/**
 * `--calculate-kv-scales` on CUDA: a layer's first batch with a token to cache measures amax |k|
 * and amax |v| on the device (hsKvAmax, native/kernels/copy.cu) and reads the three words back
 * once (one stream sync per layer, on that first step only); LayerKvScales.calibrate turns them
 * into k_scale = amax / 200, v_scale = amax / 100 (core/kv/kv_cache_scales.ts).
 *
 * The kernels take the scales by value, so a CUDA graph bakes in what it was captured with.
 * That is safe here without moving the scales to device memory: calibration runs on the first
 * forward, always an eager prefill, and decode graphs are captured lazily on later decode steps
 * (worker/cuda_graph_runner.ts), so every graph sees the calibrated scales (a first batch that
 * is itself a pure decode batch, one-token prompts, calibrates in the eager warm-up run that
 * precedes its capture). A calibration attempted during capture is refused (the read-back
 * cannot be captured). Moving the scales to device memory would also work, but every fp8
 * kernel (reshape, decode, prefill, the HiSparse copies) takes them by value today; this keeps
 * that ABI and costs one sync per layer once.
 */
import type { LayerKvScales } from "../../core/kv/kv_cache_scales.js";
import type { QkvLayout, Tensor } from "../backend.js";
import type { CudaAttentionContext } from "./attention_ops.js";
import { dim, qkvWidth } from "./ops.js";
import { expectDtype, expectShape } from "./tensor.js";

/**
 * Calibrates `scales` (still pending) from the K/V heads of qkv bf16 [T, (Hq + 2 Hkv) D] of the
 * tokens whose slot (slotMapping i32 [T]) is not PAD; a batch without such a token leaves them
 * pending. Synchronous (reads 12 bytes back).
 */
export function calibrateKvScales(
  ctx: CudaAttentionContext,
  qkv: Tensor,
  layout: QkvLayout,
  slotMapping: Tensor,
  scales: LayerKvScales,
): void {
  const q = ctx.dev(qkv, "calibrateKvScales qkv");
  const slots = ctx.dev(slotMapping, "calibrateKvScales slotMapping");
  expectShape(qkv, "calibrateKvScales qkv", [null, qkvWidth(layout)]);
  expectDtype(qkv, "calibrateKvScales qkv", ["bf16"]);
  const T = dim(qkv, 0);
  expectShape(slotMapping, "calibrateKvScales slotMapping", [T]);
  const out = ctx.scratch(12);
  const { numHeads, numKvHeads, headDim } = layout;
  ctx.addon.kvAmax(ctx.stream, q.ptr, slots.ptr, T, qkvWidth(layout), numHeads, numKvHeads, headDim, out);
  const words = new Uint32Array(3);
  ctx.downloadBytes(words, out);
  if (words[2] === 0) return; // every token PAD: wait for a batch with one
  const f = new Float32Array(words.buffer, 0, 2);
  scales.calibrate(f[0]!, f[1]!);
}
