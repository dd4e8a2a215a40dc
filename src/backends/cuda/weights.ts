import { DTYPE_BYTES, type HostTensorData, type WeightFileRange, type WeightFill } from "../backend.js";
import { WEIGHT_FILL_TABLE_SIZE } from "../weight_fill.js";
import {
  type DevicePtr,
  DTYPE_CODE,
  type HisparseNative,
  type NativeDeviceAllocator,
  NULL_PTR,
  offsetPtr,
} from "./addon.js";
import { f16BitsToF32, f32ToBf16Bits } from "./half.js";
import type { UploadConversion } from "./host_io.js";
import type { CudaTensor } from "./tensor.js";
import {
  DEFAULT_WEIGHT_STREAM,
  type StreamRange,
  streamWeightFiles,
  type WeightStreamOptions,
} from "./weight_stream.js";

/**
 * Weight writes of the CUDA backend (Backend.writeWeight / fillWeight / loadWeightFiles) into
 * element ranges of bf16 weights: host data through the converting upload path, generated fills
 * by the device kernel (native/kernels/dummy_init.cu), file ranges by weight_stream.ts.
 */

/** Fill tables kept on the device at most (each [65536] bf16 = 128 KiB); the oldest is freed first. */
const MAX_DEVICE_TABLES = 8;

/** What these functions use of the backend. */
export interface WeightWriteContext {
  addon: HisparseNative;
  stream: number;
  /** Host values -> device address, converted (host_io.ts writeConverted). */
  writeConverted(
    dst: DevicePtr,
    data: Float32Array | Uint16Array,
    srcDtype: HostTensorData["dtype"],
    count: number,
  ): void;
  /** A persistent device allocation of `bytes`, and its release. */
  malloc(bytes: number): DevicePtr;
  free(ptr: DevicePtr): void;
  /** Device scratch of converting uploads, used by streamed ranges that are cast. */
  scratch: DevicePtr;
  scratchBytes: number;
  streamOptions: WeightStreamOptions;
}

/**
 * The context of a backend: its allocator, the converting upload path (whose device scratch also
 * serves streamed ranges that are cast) and the streaming sizes (defaults DEFAULT_WEIGHT_STREAM;
 * bufferBytes at most the scratch).
 */
export function weightWriteContext(
  addon: HisparseNative,
  stream: number,
  allocator: NativeDeviceAllocator,
  upload: UploadConversion,
  writeConverted: WeightWriteContext["writeConverted"],
  options: Partial<WeightStreamOptions> = {},
): WeightWriteContext {
  return {
    addon,
    stream,
    writeConverted,
    malloc: (bytes) => allocator.malloc(bytes),
    free: (ptr) => allocator.free(ptr),
    scratch: upload.scratch,
    scratchBytes: upload.scratchBytes,
    streamOptions: {
      buffers: options.buffers ?? DEFAULT_WEIGHT_STREAM.buffers,
      bufferBytes: Math.min(options.bufferBytes ?? DEFAULT_WEIGHT_STREAM.bufferBytes, upload.scratchBytes),
      threads: options.threads ?? DEFAULT_WEIGHT_STREAM.threads,
    },
  };
}

/** @throws Error unless [offset, offset + count) lies inside the bf16 weight t. */
function checkRange(t: CudaTensor, offset: number, count: number, what: string): void {
  if (t.dtype !== "bf16") throw new Error(`${what}: weights are bf16, got ${t.dtype}`);
  if (
    !Number.isInteger(offset) ||
    offset < 0 ||
    !Number.isInteger(count) ||
    count < 0 ||
    offset + count > t.numel
  )
    throw new Error(`${what}: elements [${offset}, ${offset + count}) are outside a tensor of ${t.numel}`);
}

/** t[offset ...] = src converted to bf16. @throws Error on a length mismatch or a range outside t. */
export function writeWeight(
  ctx: WeightWriteContext,
  t: CudaTensor,
  offset: number,
  src: HostTensorData,
): void {
  const n = src.shape.reduce((a, b) => a * b, 1);
  if (src.data.length !== n)
    throw new Error(`writeWeight: ${src.data.length} values for shape [${src.shape}]`);
  const want = src.dtype === "f32" ? Float32Array : Uint16Array;
  if (!(src.data instanceof want)) throw new Error(`writeWeight: ${src.dtype} data must be a ${want.name}`);
  checkRange(t, offset, n, "writeWeight");
  ctx.writeConverted(offsetPtr(t.ptr, offset * 2), src.data, src.dtype, n);
}

/**
 * Device copies of fill tables, converted to bf16 by the upload path (so a generated element is
 * the bf16 value uploading its host copy would store), keyed by the host table object (dummy.ts
 * caches one per std and dtype).
 */
export class DeviceFillTables {
  private readonly tables = new Map<Float32Array | Uint16Array, DevicePtr>();

  constructor(private readonly ctx: WeightWriteContext) {}

  /** Device address of the bf16 copy of `table` (of `dtype`), uploaded on first use. */
  get(table: Float32Array | Uint16Array, dtype: HostTensorData["dtype"]): DevicePtr {
    const hit = this.tables.get(table);
    if (hit !== undefined) return hit;
    if (this.tables.size >= MAX_DEVICE_TABLES) {
      const [oldest, ptr] = this.tables.entries().next().value!;
      this.tables.delete(oldest);
      this.ctx.free(ptr); // stream-ordered: the allocator reuses it only for later work
    }
    const ptr = this.ctx.malloc(WEIGHT_FILL_TABLE_SIZE * 2);
    this.ctx.writeConverted(ptr, table, dtype, WEIGHT_FILL_TABLE_SIZE);
    this.tables.set(table, ptr);
    return ptr;
  }
}

/** bf16 bits of a fill constant given in `dtype` (the rounding of the cast kernel: nearest even). */
function constantBf16(value: number, dtype: WeightFill["dtype"]): number {
  if (dtype === "bf16") return value & 0xffff;
  return f32ToBf16Bits(dtype === "f16" ? f16BitsToF32(value) : value);
}

/**
 * t[offset + j] = element first + j of the fill (j < count), generated on the device.
 * @throws Error on a range outside t.
 */
export function fillWeight(
  ctx: WeightWriteContext,
  tables: DeviceFillTables,
  t: CudaTensor,
  offset: number,
  count: number,
  fill: WeightFill,
  first = 0,
): void {
  checkRange(t, offset, count, "fillWeight");
  if (count === 0) return;
  const dst = offsetPtr(t.ptr, offset * 2);
  if (fill.kind === "constant") {
    const bits = constantBf16(fill.value, fill.dtype);
    ctx.addon.fillWeight(ctx.stream, dst, DTYPE_CODE.bf16, count, 0, NULL_PTR, bits, 0, 0);
    return;
  }
  if (fill.table.length !== WEIGHT_FILL_TABLE_SIZE)
    throw new Error(
      `fillWeight: a fill table has ${WEIGHT_FILL_TABLE_SIZE} entries, got ${fill.table.length}`,
    );
  const table = tables.get(fill.table, fill.dtype);
  ctx.addon.fillWeight(
    ctx.stream,
    dst,
    DTYPE_CODE.bf16,
    count,
    first,
    table,
    0,
    fill.key0 >>> 0,
    fill.key1 >>> 0,
  );
}

/**
 * Streams file ranges into bf16 weights (weight_stream.ts); `dev` validates each range's tensor.
 * @throws Error when a range leaves its tensor, or a read fails (naming the file).
 */
export function loadWeightFiles(
  ctx: WeightWriteContext,
  dev: (t: WeightFileRange["tensor"]) => CudaTensor,
  ranges: readonly WeightFileRange[],
  onBytes?: (done: number, total: number) => void,
): void {
  const stream: StreamRange[] = ranges.map((r) => {
    const t = dev(r.tensor);
    const eb = DTYPE_BYTES[r.dtype];
    if (r.byteLength % eb !== 0)
      throw new Error(
        `loadWeightFiles: ${r.byteLength} bytes of ${r.path} are not whole ${r.dtype} elements`,
      );
    checkRange(t, r.elemOffset, r.byteLength / eb, "loadWeightFiles");
    const { fd, path, position, byteLength } = r;
    return {
      fd,
      path,
      position,
      byteLength,
      srcDtype: r.dtype,
      dst: offsetPtr(t.ptr, r.elemOffset * 2),
      dstDtype: "bf16",
    };
  });
  streamWeightFiles(ctx, stream, ctx.streamOptions, onBytes);
}
