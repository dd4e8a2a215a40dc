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

/**
 * The part of an HF tensor one tensor-parallel rank holds (vLLM's Megatron layout): `count` rows
 * of dim 0 from row `start` (column-parallel weights, their biases, vocab-parallel tables), or
 * `count` columns of dim 1 of a [rows, cols] tensor from column `start` (row-parallel weights).
 */
export interface WeightShard {
  dim: 0 | 1;
  start: number;
  count: number;
}

/** One part of a declared weight: an HF tensor and where it goes in the backend tensor. */
interface Job {
  name: string;
  /** The HF tensor's full shape (the shard, if any, is taken of it). */
  shape: readonly number[];
  shard: WeightShard | null;
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
  upload(name: string, shape: readonly number[], shard: WeightShard | null = null): Tensor {
    return this.uploadCat([name], [shape], undefined, [shard]);
  }

  /** upload() when `present`, else null. */
  uploadOpt(
    name: string,
    shape: readonly number[],
    present: boolean,
    shard: WeightShard | null = null,
  ): Tensor | null {
    return present ? this.upload(name, shape, shard) : null;
  }

  /**
   * Declares one weight made of HF tensors concatenated along dim 0 (vLLM QKVParallelLinear,
   * MergedColumnParallelLinear, experts stacked as [E, 2I, H]): part i takes rows [sum of rows
   * before it, + shapes[i][0]). `as` gives the weight another shape of the same size (stacked
   * experts); by default [sum of rows, ...trailing dims]. `shards[i]` (tensor parallelism): part i
   * is only the rank's rows or columns of its HF tensor (`shapes` stay the HF shapes, checked
   * against the source; the weight holds the shards' shapes).
   * @throws WeightLoadError when a part is missing or has another shape; Error when the parts'
   *   trailing dims differ, a shard leaves its tensor, or `as` has another size (programming
   *   errors of the model).
   */
  uploadCat(
    names: readonly string[],
    hfShapes: readonly (readonly number[])[],
    as?: readonly number[],
    shards?: readonly (WeightShard | null)[],
  ): Tensor {
    const shapes = hfShapes.map((s, i) => shardShape(s, shards?.[i] ?? null));
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
    const parts = names.map((name, i) => this.locatePart(name, hfShapes[i]!));
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
      const shard = shards?.[i] ?? null;
      const shape = hfShapes[i]!;
      this.jobs.push({ name: names[i]!, shape, shard, tensor, elemOffset, numel, bytes, location, data });
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
        for (const r of shardRuns(j)) b.fillWeight(j.tensor, r.dst, r.count, loc.fill, r.src);
      } else if (loc?.kind === "file" && b.loadWeightFiles !== undefined) {
        const { fd, path, position, dtype } = loc;
        const eb = DTYPE_BYTES[dtype];
        for (const r of shardRuns(j))
          ranges.push({
            fd,
            path,
            position: position + r.src * eb,
            byteLength: r.count * eb,
            dtype,
            tensor: j.tensor,
            elemOffset: r.dst,
          });
        rangeBytes += j.bytes;
        continue; // streamed below, all files in one pass
      } else {
        b.writeWeight(j.tensor, j.elemOffset, sliceShard(j.data ?? this.source.get(j.name), j));
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

/**
 * The shape of a shard of an HF tensor of shape `shape` (the shape itself when unsharded).
 * @throws Error when the shard leaves the tensor or is of a dim the tensor lacks.
 */
function shardShape(shape: readonly number[], shard: WeightShard | null): number[] {
  if (shard === null) return [...shape];
  const n = shape[shard.dim];
  if (n === undefined || (shard.dim === 1 && shape.length !== 2))
    throw new Error(`a dim-${shard.dim} shard of a tensor of shape [${shape}]`);
  if (shard.start < 0 || shard.count < 1 || shard.start + shard.count > n)
    throw new Error(`shard [${shard.start}, +${shard.count}) leaves dim ${shard.dim} of [${shape}]`);
  const out = [...shape];
  out[shard.dim] = shard.count;
  return out;
}

/** A contiguous run of a job: `count` elements from element `src` of the HF tensor to element `dst` of the weight. */
interface ShardRun {
  src: number;
  dst: number;
  count: number;
}

/**
 * The contiguous runs a job copies: the whole tensor, one run of rows (dim-0 shard), or one run
 * per row (dim-1 shard of [rows, cols]: `count` columns from `start` of each row).
 */
function shardRuns(j: Job): ShardRun[] {
  const s = j.shard;
  if (s === null) return [{ src: 0, dst: j.elemOffset, count: j.numel }];
  const rowElems = j.shape.slice(1).reduce((a, b) => a * b, 1);
  if (s.dim === 0) return [{ src: s.start * rowElems, dst: j.elemOffset, count: j.numel }];
  const [rows, cols] = [j.shape[0]!, j.shape[1]!];
  return Array.from({ length: rows }, (_, r) => ({
    src: r * cols + s.start,
    dst: j.elemOffset + r * s.count,
    count: s.count,
  }));
}

/** The job's shard of host data of the whole HF tensor (the data itself when unsharded). */
function sliceShard(t: HostTensorData, j: Job): HostTensorData {
  if (j.shard === null) return t;
  const out = t.data instanceof Float32Array ? new Float32Array(j.numel) : new Uint16Array(j.numel);
  for (const r of shardRuns(j)) out.set(t.data.subarray(r.src, r.src + r.count), r.dst - j.elemOffset);
  return { data: out, dtype: t.dtype, shape: shardShape(t.shape, j.shard) };
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
