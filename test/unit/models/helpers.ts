import { writeFileSync } from "node:fs";
import type {
  AttentionMetadata,
  Backend,
  DType,
  HostTensorData,
  KvCacheSpec,
  MemoryInfo,
  QkvLayout,
  Tensor,
  WeightFill,
} from "../../../src/backends/backend.js";
import { generateFill } from "../../../src/backends/weight_fill.js";

/** A host tensor kept by {@link HostBackend}: the uploaded data as given. */
export interface HostTensor extends Tensor {
  readonly data: Float32Array | Uint16Array | Int32Array;
}

/** A weight of {@link HostBackend.allocateWeight}: its array and dtype come with the first write. */
interface PendingWeight {
  shape: readonly number[];
  dtype: DType;
  data: Float32Array | Uint16Array | Int32Array;
}

/**
 * A Backend for loader tests: memory calls keep the uploaded host data so tests can inspect
 * exactly what the model loader uploaded; compute ops are outside these tests and throw.
 */
export class HostBackend implements Backend {
  readonly name = "cpu" as const;
  readonly deviceName = "host (loader tests)";
  readonly activationDtype: DType = "f32";
  /** Every weight uploaded, in upload order. */
  readonly weights: HostTensor[] = [];
  readonly freed = new Set<Tensor>();

  /** A weight whose dtype (and array) the first write or fill decides (the source's dtype). */
  allocateWeight(shape: readonly number[]): Tensor {
    const t: PendingWeight = { shape: [...shape], dtype: "f32", data: new Int32Array(0) };
    this.weights.push(t as HostTensor);
    return t as HostTensor;
  }
  writeWeight(t: Tensor, elemOffset: number, src: HostTensorData): void {
    this.arrayOf(t as PendingWeight, src.dtype).set(src.data, elemOffset);
  }
  fillWeight(t: Tensor, elemOffset: number, count: number, fill: WeightFill, first = 0): void {
    generateFill(
      fill,
      first,
      count,
      this.arrayOf(t as PendingWeight, fill.dtype) as Float32Array,
      elemOffset,
    );
  }
  private arrayOf(t: PendingWeight, dtype: HostTensorData["dtype"]): Float32Array | Uint16Array {
    if (t.data.length === 0) {
      const n = t.shape.reduce((a, b) => a * b, 1);
      t.data = dtype === "f32" ? new Float32Array(n) : new Uint16Array(n);
      t.dtype = dtype;
    }
    if (t.dtype !== dtype) throw new Error(`HostBackend: a ${t.dtype} weight written with ${dtype} data`);
    return t.data as Float32Array | Uint16Array;
  }
  uploadWeight(src: HostTensorData): Tensor {
    const t: HostTensor = { shape: [...src.shape], dtype: src.dtype, data: src.data };
    this.weights.push(t);
    return t;
  }
  upload(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor {
    return { shape: [...shape], dtype, data } as HostTensor;
  }
  stage(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor {
    return this.upload(data, shape, dtype);
  }
  writeTensor(t: Tensor, data: Float32Array | Int32Array): void {
    (t as HostTensor).data.set(data as never);
  }
  allocateKvCache(_spec: KvCacheSpec): Tensor[] {
    throw new Error("HostBackend has no KV cache");
  }
  toHost(t: Tensor): Float32Array | Int32Array {
    const d = (t as HostTensor).data;
    if (d instanceof Uint16Array) throw new Error("HostBackend.toHost reads f32/i32 tensors only");
    return d;
  }
  resetWorkspace(): void {}
  memoryInfo(): MemoryInfo {
    return { free: 0, total: 0 };
  }
  free(t: Tensor): void {
    this.freed.add(t);
  }
  dispose(): void {}
  embedding(_ids: Tensor, _table: Tensor): Tensor {
    return unsupported();
  }
  rmsNorm(_x: Tensor, _w: Tensor, _eps: number): Tensor {
    return unsupported();
  }
  fusedAddRmsNorm(_x: Tensor, _r: Tensor, _w: Tensor, _eps: number): void {
    unsupported();
  }
  linear(_x: Tensor, _w: Tensor, _b: Tensor | null, _o?: DType): Tensor {
    return unsupported();
  }
  qkNorm(_qkv: Tensor, _l: QkvLayout, _q: Tensor, _k: Tensor, _eps: number): void {
    unsupported();
  }
  rotaryEmbedding(_qkv: Tensor, _l: QkvLayout, _p: Tensor, _c: Tensor): void {
    unsupported();
  }
  siluAndMul(_x: Tensor): Tensor {
    return unsupported();
  }
  reshapeAndCache(_qkv: Tensor, _l: QkvLayout, _kv: Tensor, _s: Tensor, _b: number): void {
    unsupported();
  }
  pagedAttention(_qkv: Tensor, _l: QkvLayout, _kv: Tensor, _m: AttentionMetadata, _b: number): Tensor {
    return unsupported();
  }
  gatherRows(_x: Tensor, _i: Tensor): Tensor {
    return unsupported();
  }
}

function unsupported(): never {
  throw new Error("HostBackend runs no compute ops (loader tests only upload weights)");
}

/** One tensor for {@link writeSafetensors}: raw little-endian element bytes. */
export interface RawTensor {
  dtype: string;
  shape: number[];
  bytes: Uint8Array;
}

/**
 * Writes a safetensors file (8-byte LE header length, JSON header, data in the given order).
 * `headerPad` appends spaces to the header so tests can place data at unaligned offsets.
 */
export function writeSafetensors(path: string, tensors: Record<string, RawTensor>, headerPad = 0): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let off = 0;
  for (const [name, t] of Object.entries(tensors)) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + t.bytes.length] };
    off += t.bytes.length;
  }
  const json = new TextEncoder().encode(JSON.stringify(header) + " ".repeat(headerPad));
  const out = new Uint8Array(8 + json.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  let p = 8 + json.length;
  for (const t of Object.values(tensors)) {
    out.set(t.bytes, p);
    p += t.bytes.length;
  }
  writeFileSync(path, out);
}

/** Little-endian bytes of f32 values. */
export function f32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

/** Little-endian bytes of 16-bit patterns (bf16/f16 bits). */
export function u16Bytes(bits: number[]): Uint8Array {
  return new Uint8Array(new Uint16Array(bits).buffer);
}
