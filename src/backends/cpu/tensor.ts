import type { DType, Tensor } from "../backend.js";

/**
 * One allocation of the CPU backend: a SharedArrayBuffer when worker threads share it (so the
 * same bytes are visible to every thread), else a plain ArrayBuffer. `f32` and `i32` view the
 * whole buffer; tensors are element ranges of it. `id` names the buffer to the worker threads.
 */
export interface CpuBuffer {
  readonly id: number;
  /** Size in bytes (a multiple of 4). */
  readonly bytes: number;
  readonly f32: Float32Array;
  readonly i32: Int32Array;
  freed: boolean;
}

/** The element types the CPU backend stores: f32 math and storage, i32 ids. */
export type CpuDType = "f32" | "i32";

/**
 * A CPU tensor: `numel` contiguous 4-byte elements starting at element `offset` of `buffer`.
 * Workspace tensors carry the workspace epoch they were allocated in and become invalid when the
 * epoch moves on (Backend.resetWorkspace); persistent tensors have epoch -1.
 */
export class CpuTensor implements Tensor {
  readonly shape: readonly number[];
  readonly dtype: CpuDType;
  readonly buffer: CpuBuffer;
  /** Offset of the first element in the buffer, in elements. */
  readonly offset: number;
  readonly numel: number;
  /** Workspace epoch of allocation; -1 for persistent tensors. */
  readonly epoch: number;
  /** View of exactly this tensor's elements (f32 tensors). */
  readonly f32: Float32Array;
  /** View of exactly this tensor's elements (i32 tensors; also valid bits of f32 ones). */
  readonly i32: Int32Array;

  constructor(shape: readonly number[], dtype: CpuDType, buffer: CpuBuffer, offset: number, epoch: number) {
    this.shape = shape;
    this.dtype = dtype;
    this.buffer = buffer;
    this.offset = offset;
    this.numel = numelOf(shape);
    this.epoch = epoch;
    this.f32 = buffer.f32.subarray(offset, offset + this.numel);
    this.i32 = buffer.i32.subarray(offset, offset + this.numel);
  }

  get persistent(): boolean {
    return this.epoch < 0;
  }
}

/**
 * Number of elements of a shape.
 * @throws Error when a dimension is not a non-negative integer.
 */
export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new Error(`invalid tensor shape [${shape.join(", ")}]`);
    n *= d;
  }
  return n;
}

/**
 * Checks that the backend stores this dtype natively and returns it narrowed.
 * @throws Error for bf16/f16, which the CPU backend only accepts as weights (uploadWeight).
 */
export function cpuDType(dtype: DType, what: string): CpuDType {
  if (dtype === "f32" || dtype === "i32") return dtype;
  throw new Error(`${what}: the CPU backend stores f32 and i32 tensors only, got ${dtype}`);
}

/** Human-readable tensor description for error messages, e.g. `f32[4, 256]`. */
export function describe(t: Tensor): string {
  return `${t.dtype}[${t.shape.join(", ")}]`;
}
