/**
 * The fake addon's device memory (fake_addon.ts): `AddressSpace`, host memory at fake 256-aligned
 * device addresses that throws on an access outside an allocation (as memcheck would), the
 * element reads and writes of the fake `cast` launcher by dtype code, and `fakeFillWeight`, an
 * independent host implementation of the hsFillWeight contract (native/kernels/weight_fill.h).
 */
import type { DType } from "../../../../src/backends/backend.js";
import { asDevicePtr, type DevicePtr } from "../../../../src/backends/cuda/addon.js";
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits } from "../../../../src/backends/cuda/half.js";

/** The addon's dtype codes (DTYPE_CODE in addon.ts) by value. */
export const CODE_DTYPE: Record<number, DType> = { 0: "f32", 1: "bf16", 2: "f16", 3: "i32" };

/** Fake address space: allocations at 256-aligned addresses with gaps between them. */
export class AddressSpace {
  private next = 0x1_0000_0000;
  private readonly regions: { base: number; bytes: Uint8Array }[] = [];

  add(bytes: Uint8Array): DevicePtr {
    const base = asDevicePtr(this.next);
    this.regions.push({ base, bytes });
    this.next = Math.ceil((base + bytes.length + 4096) / 256) * 256;
    return base;
  }
  remove(base: number): void {
    const i = this.regions.findIndex((r) => r.base === base);
    if (i < 0) throw new Error(`fake: no allocation at ${base}`);
    this.regions.splice(i, 1);
  }
  /** n bytes at addr; throws (like memcheck) when the range leaves an allocation. */
  view(addr: number, n: number): Uint8Array {
    for (const r of this.regions) {
      if (addr >= r.base && addr + n <= r.base + r.bytes.length)
        return r.bytes.subarray(addr - r.base, addr - r.base + n);
    }
    throw new Error(`fake: invalid access of ${n} bytes at ${addr}`);
  }
}

/** The element of `dtype` at byte `off` of `v`, as a number. */
export function readValue(v: DataView, off: number, dtype: DType): number {
  switch (dtype) {
    case "f32":
      return v.getFloat32(off, true);
    case "bf16":
      return bf16BitsToF32(v.getUint16(off, true));
    case "f16":
      return f16BitsToF32(v.getUint16(off, true));
    default:
      return v.getInt32(off, true);
  }
}

/** Stores x as an element of `dtype` at byte `off` of `v`. @throws Error for f16 (not needed yet). */
export function writeValue(v: DataView, off: number, dtype: DType, x: number): void {
  if (dtype === "f32") v.setFloat32(off, x, true);
  else if (dtype === "bf16") v.setUint16(off, f32ToBf16Bits(x), true);
  else if (dtype === "i32") v.setInt32(off, x, true);
  else throw new Error("fake: casts to f16 are not implemented");
}

/** Bytes per element of each dtype. */
export const BYTES: Record<DType, number> = { f32: 4, bf16: 2, f16: 2, i32: 4, fp8: 1 };

/** 32-bit product with BigInt (an implementation of the rule independent of weight_fill.ts's Math.imul). */
function mul32(a: number, b: number): number {
  return Number((BigInt(a >>> 0) * BigInt(b >>> 0)) & 0xffffffffn);
}

function lowbias32(x: number): number {
  let h = x >>> 0;
  h = (h ^ (h >>> 16)) >>> 0;
  h = mul32(h, 0x21f0aaad);
  h = (h ^ (h >>> 15)) >>> 0;
  h = mul32(h, 0x735a2d97);
  return (h ^ (h >>> 15)) >>> 0;
}

/** The hsFillWeight contract (native/kernels/weight_fill.h), element by element. */
export function fakeFillWeight(
  mem: AddressSpace,
  dst: number,
  elemBytes: number,
  count: number,
  first: number,
  table: number,
  constantBits: number,
  key0: number,
  key1: number,
): void {
  const out = mem.view(dst, count * elemBytes);
  const dv = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const tab = table === 0 ? null : mem.view(table, 65536 * elemBytes);
  const tv = tab === null ? null : new DataView(tab.buffer, tab.byteOffset, tab.byteLength);
  for (let j = 0; j < count; j++) {
    const i = BigInt(first + j);
    const pair = i >> 1n;
    const lo = Number(pair & 0xffffffffn);
    const hi = Number(pair >> 32n);
    const r = lowbias32((lowbias32((lo ^ key0) >>> 0) ^ ((key1 + mul32(hi, 0x9e3779b9)) >>> 0)) >>> 0);
    const idx = (i & 1n) === 1n ? r >>> 16 : r & 0xffff;
    const bits =
      tv === null
        ? constantBits
        : elemBytes === 2
          ? tv.getUint16(idx * 2, true)
          : tv.getUint32(idx * 4, true);
    if (elemBytes === 2) dv.setUint16(j * 2, bits, true);
    else dv.setUint32(j * 4, bits, true);
  }
}
