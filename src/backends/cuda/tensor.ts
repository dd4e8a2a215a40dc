import { DTYPE_BYTES, type DType, type Tensor } from "../backend.js";
import type { DevicePtr } from "./device_ptr.js";

/** Where a CudaTensor's memory comes from. */
export type CudaTensorKind =
  /** caching allocator; lives until Backend.free() / dispose() */
  | "persistent"
  /** step workspace; valid until the next resetWorkspace() */
  | "workspace";

/**
 * A device tensor of the CUDA backend: a typed view of `bytes` bytes at device address `ptr`.
 * Workspace tensors carry the workspace generation they were made in; using one after
 * resetWorkspace() is a programming error that the backend reports.
 */
export class CudaTensor implements Tensor {
  /** Set when the memory went back to the allocator (persistent) or the tensor was replaced. */
  released = false;

  constructor(
    readonly shape: readonly number[],
    readonly dtype: DType,
    /** Device address (256-byte aligned for allocator and workspace tensors). */
    readonly ptr: DevicePtr,
    readonly kind: CudaTensorKind,
    /** Workspace generation for kind "workspace"; -1 otherwise. Updated by graph replays. */
    public generation: number,
  ) {}

  /** Number of elements. */
  get numel(): number {
    return numelOf(this.shape);
  }

  /** Size in bytes. */
  get bytes(): number {
    return this.numel * DTYPE_BYTES[this.dtype];
  }
}

/** Product of the dims (1 for a scalar shape). @throws Error on a negative or fractional dim. */
export function numelOf(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new Error(`invalid tensor shape [${shape.join(", ")}]`);
    n *= d;
  }
  return n;
}

/** "bf16[7, 4096]" for messages. */
export function describe(t: Tensor): string {
  return `${t.dtype}[${t.shape.join(", ")}]`;
}

/** @throws Error unless t has rank `rank` (and dims equal to `dims` where given, null = any). */
export function expectShape(t: Tensor, what: string, dims: readonly (number | null)[]): void {
  const ok = t.shape.length === dims.length && dims.every((d, i) => d === null || t.shape[i] === d);
  if (!ok) {
    const want = dims.map((d) => (d === null ? "*" : String(d))).join(", ");
    throw new Error(`${what}: expected shape [${want}], got ${describe(t)}`);
  }
}

/** @throws Error unless t.dtype is one of `dtypes`. */
export function expectDtype(t: Tensor, what: string, dtypes: readonly DType[]): void {
  if (!dtypes.includes(t.dtype))
    throw new Error(`${what}: expected dtype ${dtypes.join(" or ")}, got ${describe(t)}`);
}
