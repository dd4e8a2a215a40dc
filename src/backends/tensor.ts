/**
 * Tensor handles and their element types, host weight data, and the device memory report: the
 * vocabulary every op of the Backend contract (backend.ts) is written in.
 */

import { KV_CACHE_DTYPE_BYTES } from "../core/kv/kv_cache_dtype.js";

/** Element types of tensors. "i32" is for ids, positions, slot mappings and block tables. */
/**
 * Tensor element types. "fp8" (OCP FP8 E4M3, core/kv/kv_cache_dtype.ts) is a storage type of KV
 * caches only (`--kv-cache-dtype fp8`): reshapeAndCache quantizes into it, attention dequantizes.
 */
export type DType = "f32" | "bf16" | "f16" | "i32" | "fp8";

/** Bytes per element of each dtype (KV dtypes: core/kv/kv_cache_dtype.ts KV_CACHE_DTYPE_BYTES). */
export const DTYPE_BYTES: Record<DType, number> = {
  f32: 4,
  bf16: 2,
  f16: 2,
  i32: 4,
  fp8: KV_CACHE_DTYPE_BYTES.fp8,
};

/** A backend-owned tensor. Backends cast to their own concrete type. */
export interface Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
}

/** Host-side raw weight data as read from a checkpoint (element bits in a typed array). */
export interface HostTensorData {
  /** f32 values, or bf16/f16 bit patterns. */
  data: Float32Array | Uint16Array;
  dtype: "f32" | "bf16" | "f16";
  shape: number[];
}

/**
 * Bytes of a file that hold one weight (or one part of a fused weight), for
 * {@link Backend.loadWeightFiles}: `byteLength` bytes of `dtype` elements at byte `position` of
 * the open file `fd`, written from element `elemOffset` of `tensor` on (converted as writeWeight
 * converts host data).
 */
export interface WeightFileRange {
  /** An open file descriptor (fs.openSync) and its path (for messages). */
  fd: number;
  path: string;
  position: number;
  byteLength: number;
  dtype: HostTensorData["dtype"];
  tensor: Tensor;
  elemOffset: number;
}

/** Device memory report in bytes. */
export interface MemoryInfo {
  free: number;
  total: number;
}
