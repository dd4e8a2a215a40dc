/**
 * Argument helpers shared by the HiSparse launchers (hisparse_ops.ts, sparse_attention_ops.ts):
 * optional pointers and checked i32 tables.
 */
import type { Tensor } from "../backend.js";
import type { CudaAttentionContext } from "./attention_ops.js";
import { type DevicePtr, NULL_PTR } from "./device_ptr.js";
import { type CudaTensor, expectDtype, expectShape } from "./tensor.js";

/** Device address of an optional tensor (NULL_PTR when absent). */
export function ptrOf(ctx: CudaAttentionContext, t: Tensor | null | undefined, what: string): DevicePtr {
  return t === null || t === undefined ? NULL_PTR : ctx.dev(t, what).ptr;
}

/** Checks an i32 tensor of the given shape and returns it. */
export function i32(
  ctx: CudaAttentionContext,
  t: Tensor,
  what: string,
  dims: readonly (number | null)[],
): CudaTensor {
  const c = ctx.dev(t, what);
  expectDtype(t, what, ["i32"]);
  expectShape(t, what, dims);
  return c;
}

/** Size of dimension i of t (0 when t has fewer dimensions). */
export function dim(t: Tensor, i: number): number {
  return t.shape[i] ?? 0;
}
