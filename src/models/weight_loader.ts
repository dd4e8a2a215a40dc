import {
  type Backend,
  DTYPE_BYTES,
  type HostTensorData,
  type Tensor,
  type WeightFileRange,
} from "../backends/backend.js";
import { WeightLoadError, type WeightLocation, type WeightSource } from "./weights.js";

/** Progress while loading weights: bytes placed so far / bytes in all (of the source's dtypes). */
export type LoadProgress = (doneBytes: number, totalBytes: number) => void;

/** One part of a declared weight: an HF tensor and where it goes in the backend tensor. */
interface Job {
  name: string;
  tensor: Tensor;
  /** Element of `tensor` where the part's element 0 goes (row offset × row length). */
  elemOffset: number;
  numel: number;
  /** Bytes the part occupies in the source (progress unit). */
  bytes: number;
  /** How the source gives it: located (file or generated), or host data read at declaration. */
  location: WeightLocation | undefined;
  data: HostTensorData | undefined;
}

/**
 * Places a model's weights on a backend (the helper every decoder block loads its weights with),
 * in two phases, without host concatenation: `upload`, `uploadOpt` and `uploadCat` declare a
 * weight, check its shape and return its tensor at once; `finish()` (the decoder calls it after
 * the last declaration) fills every tensor. Each HF tensor of a fused weight (q/k/v, gate/up,
 * stacked experts) is written straight into its row range. How values travel depends on what the
 * source says (WeightSource.locate) and what the backend can do:
 * - generated (dummy weights): Backend.fillWeight, on the device for CUDA (no host data);
 * - file ranges (safetensors): Backend.loadWeightFiles when present (CUDA streams every file
 *   through pinned staging in one pass), else read with get() and written with writeWeight;
 * - anything else: get() + writeWeight.
 * `get` and `uploadF32` read on the host at once. Errors are one sentence naming the tensor.
 */
export class WeightLoader {
  private readonly jobs: Job[] = [];

  constructor(
    readonly source: WeightSource,
    readonly backend: Backend,
    private readonly onProgress?: LoadProgress,
  ) {}

  has(name: string): boolean {
    return this.source.has(name);
  }

  /**
   * One tensor on the host, checked against `shape`.
   * @throws WeightLoadError when it is missing or has another shape.
   */
  get(name: string, shape: readonly number[]): HostTensorData {
    if (!this.source.has(name)) throw new WeightLoadError(`checkpoint has no tensor ${name}`);
    const t = this.source.get(name);
    checkShape(name, t.shape, shape);
    return t;
  }

  /**
   * Declares the weight of one HF tensor of the given shape (filled by finish()).
   * @throws WeightLoadError when it is missing or has another shape.
   */
  upload(name: string, shape: readonly number[]): Tensor {
    return this.uploadCat([name], [shape]);
  }

  /** upload() when `present`, else null. */
  uploadOpt(name: string, shape: readonly number[], present: boolean): Tensor | null {
    return present ? this.upload(name, shape) : null;
  }

  /**
   * Declares one weight made of HF tensors concatenated along dim 0 (vLLM QKVParallelLinear,
   * MergedColumnParallelLinear, experts stacked as [E, 2I, H]): part i takes rows [sum of rows
   * before it, + shapes[i][0]). `as` gives the weight another shape of the same size (stacked
   * experts); by default [sum of rows, ...trailing dims].
   * @throws WeightLoadError when a part is missing or has another shape; Error when the parts'
   *   trailing dims differ or `as` has another size (programming errors of the model).
   */
  uploadCat(
    names: readonly string[],
    shapes: readonly (readonly number[])[],
    as?: readonly number[],
  ): Tensor {
    const first = shapes[0];
    if (first === undefined || first.length === 0 || names.length !== shapes.length)
      throw new Error("uploadCat needs one shape (of rank >= 1) per tensor name, at least one");
    const tail = first.slice(1);
    const rowElems = tail.reduce((a, b) => a * b, 1);
    let rows = 0;
    for (const s of shapes) {
      if (s.slice(1).join("x") !== tail.join("x"))
        throw new Error(`uploadCat: parts [${first}] and [${s}] differ beyond dim 0`);
      rows += s[0]!;
    }
    if (as !== undefined && as.reduce((a, b) => a * b, 1) !== rows * rowElems)
      throw new Error(`uploadCat: shape [${as}] does not hold ${rows} rows of [${tail}]`);
    const parts = names.map((name, i) => this.locatePart(name, shapes[i]!));
    const tensor = this.backend.allocateWeight(as ?? [rows, ...tail]);
    let row = 0;
    for (let i = 0; i < parts.length; i++) {
      const partRows = shapes[i]![0]!;
      const numel = partRows * rowElems;
      const { location, data } = parts[i]!;
      const dtype =
        location === undefined
          ? data!.dtype
          : location.kind === "file"
            ? location.dtype
            : location.fill.dtype;
      const elemOffset = row * rowElems;
      const bytes = numel * DTYPE_BYTES[dtype];
      this.jobs.push({ name: names[i]!, tensor, elemOffset, numel, bytes, location, data });
      row += partRows;
    }
    return tensor;
  }

  /**
   * get() then upload as an f32 tensor whatever the backend's weight dtype (values the math
   * needs in fp32, e.g. the router's e_score_correction_bias, which HF keeps in fp32). At once.
   */
  uploadF32(name: string, shape: readonly number[]): Tensor {
    return this.backend.upload(widenToF32(this.get(name, shape)), shape, "f32");
  }

  /** Bytes of every part declared and not yet filled (in the source's dtypes). */
  get totalBytes(): number {
    return this.jobs.reduce((a, j) => a + j.bytes, 0);
  }

  /**
   * Fills every declared weight; afterwards the tensors hold their values (in stream order on
   * backends with a stream). Reports onProgress(doneBytes, totalBytes) as parts land.
   * @throws WeightLoadError when the source cannot be read (truncated or unreadable file).
   */
  finish(): void {
    const total = this.totalBytes;
    let done = 0;
    const report = (bytes: number) => {
      done += bytes;
      this.onProgress?.(done, total);
    };
    const b = this.backend;
    const ranges: WeightFileRange[] = [];
    let rangeBytes = 0;
    for (const j of this.jobs) {
      const loc = j.location;
      if (loc?.kind === "generated") {
        b.fillWeight(j.tensor, j.elemOffset, j.numel, loc.fill);
      } else if (loc?.kind === "file" && b.loadWeightFiles !== undefined) {
        const { fd, path, position, byteLength, dtype } = loc;
        ranges.push({ fd, path, position, byteLength, dtype, tensor: j.tensor, elemOffset: j.elemOffset });
        rangeBytes += j.bytes;
        continue; // streamed below, all files in one pass
      } else {
        b.writeWeight(j.tensor, j.elemOffset, j.data ?? this.source.get(j.name));
        j.data = undefined;
      }
      report(j.bytes);
    }
    if (ranges.length > 0) {
      const before = done;
      try {
        b.loadWeightFiles!(ranges, (d) => this.onProgress?.(before + d, total));
      } catch (e) {
        throw new WeightLoadError(`could not load the checkpoint: ${(e as Error).message}`);
      }
      done = before + rangeBytes;
      this.onProgress?.(done, total);
    }
    this.jobs.length = 0;
  }

  /**
   * How the source gives `name`, with its shape checked: a location, or (sources without
   * `locate`) the host data read now.
   */
  private locatePart(
    name: string,
    shape: readonly number[],
  ): { location: WeightLocation | undefined; data: HostTensorData | undefined } {
    if (!this.source.has(name)) throw new WeightLoadError(`checkpoint has no tensor ${name}`);
    const location = this.source.locate?.(name);
    const data = location === undefined ? this.source.get(name) : undefined;
    checkShape(name, location?.shape ?? data!.shape, shape);
    return { location, data };
  }
}

/** @throws WeightLoadError when `got` differs from `want`. */
function checkShape(name: string, got: readonly number[], want: readonly number[]): void {
  if (got.join("x") !== want.join("x"))
    throw new WeightLoadError(`tensor ${name} has shape [${got}], expected [${want}]`);
}

/** f32 values of a host tensor: f32 copied, bf16 and f16 widened exactly. */
export function widenToF32(t: HostTensorData): Float32Array {
  if (t.data instanceof Float32Array) return t.data.slice();
  const out = new Float32Array(t.data.length);
  if (t.dtype === "bf16") {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < t.data.length; i++) bits[i] = t.data[i]! << 16;
    return out;
  }
  for (let i = 0; i < t.data.length; i++) out[i] = halfToF32(t.data[i]!);
  return out;
}

/** IEEE binary16 bits -> number (exact), subnormals, infinities and NaN included. */
function halfToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
