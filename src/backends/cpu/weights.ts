import type { HostTensorData } from "../backend.js";
import { generateFill, type WeightFill } from "../weight_fill.js";
import { bf16ToF32, f16BitsToNumber, f16ToF32 } from "./dtype.js";
import type { CpuTensor } from "./tensor.js";

/**
 * Weight writes of the CPU backend (Backend.writeWeight / fillWeight): element ranges of an f32
 * weight tensor, with bf16/f16 widened exactly (as uploadWeight does).
 */

/** @throws Error unless [offset, offset + count) lies inside the tensor. */
function checkRange(t: CpuTensor, offset: number, count: number, what: string): void {
  if (
    !Number.isInteger(offset) ||
    offset < 0 ||
    !Number.isInteger(count) ||
    count < 0 ||
    offset + count > t.numel
  )
    throw new Error(`${what}: elements [${offset}, ${offset + count}) are outside a tensor of ${t.numel}`);
}

/** t[offset ...] = src widened to f32. @throws Error when the range leaves t or src's length and shape differ. */
export function writeWeightInto(t: CpuTensor, offset: number, src: HostTensorData): void {
  const n = src.shape.reduce((a, b) => a * b, 1);
  if (src.data.length !== n)
    throw new Error(`writeWeight: ${src.data.length} values for shape [${src.shape}]`);
  checkRange(t, offset, n, "writeWeight");
  const dst = t.f32.subarray(offset, offset + n);
  if (src.dtype === "f32") dst.set(src.data as Float32Array);
  else if (src.dtype === "bf16") bf16ToF32(src.data as Uint16Array, dst);
  else f16ToF32(src.data as Uint16Array, dst);
}

const u32 = new Uint32Array(1);
const f32 = new Float32Array(u32.buffer);

/** The f32 value of one entry of a fill of `dtype` (bf16/f16 bits widened exactly). */
function decode(entry: number, dtype: WeightFill["dtype"]): number {
  if (dtype === "f32") return entry;
  if (dtype === "f16") return f16BitsToNumber(entry);
  u32[0] = (entry & 0xffff) << 16;
  return f32[0]!;
}

/** Widened copies of fill tables, by table object (DummyWeights keeps one table per std and dtype). */
const decodedTables = new WeakMap<Float32Array | Uint16Array, Float32Array>();

/** The fill with its values widened to f32 (what this backend stores). */
function widened(fill: WeightFill): WeightFill {
  if (fill.dtype === "f32") return fill;
  if (fill.kind === "constant")
    return { kind: "constant", dtype: "f32", value: decode(fill.value, fill.dtype) };
  let table = decodedTables.get(fill.table);
  if (table === undefined) {
    table = new Float32Array(fill.table.length);
    for (let k = 0; k < table.length; k++) table[k] = decode(fill.table[k]!, fill.dtype);
    decodedTables.set(fill.table, table);
  }
  return { ...fill, dtype: "f32", table };
}

/** t[offset + j] = element j of the fill (j < count), widened to f32. @throws Error when the range leaves t. */
export function fillWeightInto(
  t: CpuTensor,
  offset: number,
  count: number,
  fill: WeightFill,
  first = 0,
): void {
  checkRange(t, offset, count, "fillWeight");
  generateFill(widened(fill), first, count, t.f32, offset);
}
