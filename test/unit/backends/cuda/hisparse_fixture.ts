/**
 * The fixture of hisparse_ops.test.ts and sparse_attention_ops.test.ts: the head geometry
 * (4 q heads, 2 kv heads, head dim 16; qkv rows of W elements), device addresses of tensors, and a
 * CudaBackend over a fresh host-memory double of the addon (fake_addon.ts) with a 4 MiB
 * workspace, plus a helper for zeroed persistent i32 tensors.
 */
import type { QkvLayout, Tensor } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import type { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import { createFakeAddon } from "./fake_addon.js";

export const layout: QkvLayout = { numHeads: 4, numKvHeads: 2, headDim: 16 };
export const W = (4 + 2 * 2) * 16;
/** The device address of a tensor of the CUDA backend. */
export const ptr = (t: Tensor) => (t as CudaTensor).ptr;

/** A backend over a fresh fake addon; `i32(shape)` makes a zeroed persistent i32 tensor. */
export function setup() {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 4 << 20, stagingBytes: 4096 });
  const i32 = (n: number[]) => be.allocateFilled(n, "i32");
  return { fake, be, i32 };
}
