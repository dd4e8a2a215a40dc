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
 * Places a model's weights on a backend in two phases (vLLM's weight loader, without host
 * concatenation): the model declares each weight (`load`, `loadFused`) and gets its tensor at
 * once, with shapes checked; `finish()` then fills every tensor. Each HF tensor of a fused weight
 * (q/k/v, gate/up) is written straight into its row range. How values travel depends on what the
 * source says (WeightSource.locate) and what the backend can do:
 * - generated (dummy weights): Backend.fillWeight, on the device for CUDA (no host data);
 * - file ranges (safetensors): Backend.loadWeightFiles when present (CUDA streams every file
 *   through pinned staging in one pass), else read with get() and written with writeWeight;
 * - anything else: get() + writeWeight.
 */
export class WeightLoader {
  private readonly jobs: Job[] = [];

  constructor(
    private readonly source: WeightSource,
    private readonly backend: Backend,
  ) {}

  /**
   * Declares the weight of one HF tensor of the given shape.
   * @throws WeightLoadError when the tensor is missing or has another shape.
   */
  load(name: string, shape: readonly number[]): Tensor {
    return this.loadFused([name], [shape]);
  }

  /**
   * Declares one weight made of HF tensors concatenated along dim 0 (vLLM QKVParallelLinear,
   * MergedColumnParallelLinear): part i takes rows [sum of rows before it, + shapes[i][0]).
   * @throws WeightLoadError when a part is missing or has another shape; Error when the parts'
   *   trailing dims differ (a programming error of the model).
   */
  loadFused(names: readonly string[], shapes: readonly (readonly number[])[]): Tensor {
    const first = shapes[0];
    if (first === undefined || first.length === 0 || names.length !== shapes.length)
      throw new Error("loadFused needs one shape (of rank >= 1) per tensor name, at least one");
    const tail = first.slice(1);
    const rowElems = tail.reduce((a, b) => a * b, 1);
    let rows = 0;
    for (const s of shapes) {
      if (s.slice(1).join("x") !== tail.join("x"))
        throw new Error(`loadFused: parts [${first}] and [${s}] differ beyond dim 0`);
      rows += s[0]!;
    }
    const parts = names.map((name, i) => this.locatePart(name, shapes[i]!));
    const tensor = this.backend.allocateWeight([rows, ...tail]);
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
      this.jobs.push({
        name: names[i]!,
        tensor,
        elemOffset,
        numel,
        bytes: numel * DTYPE_BYTES[dtype],
        location,
        data,
      });
      row += partRows;
    }
    return tensor;
  }

  /** Bytes of every part declared so far (in the source's dtypes). */
  get totalBytes(): number {
    return this.jobs.reduce((a, j) => a + j.bytes, 0);
  }

  /**
   * Fills every declared weight; afterwards the tensors hold their values (in stream order on
   * backends with a stream). Calls onProgress(doneBytes, totalBytes) as parts land.
   * @throws WeightLoadError when the source cannot be read (truncated or unreadable file).
   */
  finish(onProgress?: LoadProgress): void {
    const total = this.totalBytes;
    let done = 0;
    const report = (bytes: number) => {
      done += bytes;
      onProgress?.(done, total);
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
        b.loadWeightFiles!(ranges, (d) => onProgress?.(before + d, total));
      } catch (e) {
        throw new WeightLoadError(`could not load the checkpoint: ${(e as Error).message}`);
      }
      done = before + rangeBytes;
      onProgress?.(done, total);
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
    const got = location?.shape ?? data!.shape;
    if (got.join("x") !== shape.join("x"))
      throw new WeightLoadError(`tensor ${name} has shape [${got}], expected [${shape}]`);
    return { location, data };
  }
}
