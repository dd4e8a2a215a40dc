/**
 * The fixture of the HiSparse kernel suites (hisparse_kernels, hisparse_resolver and
 * hisparse_host_tier .test.ts): their skip reason (no GPU, or an addon built without the
 * HiSparse kernels), Llama-3.1-8B head geometry (32 q heads, 8 kv heads, head dim 128, block 16)
 * and `tensorOf`, the host tensor handle the CPU oracles take in place of device tensors.
 */
import type { QkvLayout, Tensor } from "../../src/backends/backend.js";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import { gpuSkip } from "./helpers.js";

/** Why the HiSparse suites are skipped here, or false when they run. */
export function skip(): string | false {
  const g = gpuSkip();
  if (g !== false) return g;
  return loadAddon().buildInfo.hasHiSparse ? false : "the addon was built without the HiSparse kernels";
}

export const layout: QkvLayout = { numHeads: 32, numKvHeads: 8, headDim: 128 };
export const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
export const QKV_W = (Hq + 2 * Hkv) * D;
export const BS = 16;
export const tensorOf = (shape: number[]): Tensor => ({ shape, dtype: "f32" });
