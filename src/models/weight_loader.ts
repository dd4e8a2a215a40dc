import type { Backend, HostTensorData, Tensor } from "../backends/backend.js";
import { concatRows, WeightLoadError, type WeightSource } from "./weights.js";

/** Progress callback while loading: weight groups done / total. */
export type LoadProgress = (done: number, total: number) => void;

/**
 * Reads named HF tensors from a WeightSource, checks their shapes and uploads them (the helper
 * every decoder block loads its weights with). Errors are one sentence naming the tensor.
 */
export class WeightLoader {
  private done = 0;

  /** @param total progress ticks the model will report (see tick()). */
  constructor(
    readonly source: WeightSource,
    readonly backend: Backend,
    private readonly total: number,
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
    if (t.shape.join("x") !== shape.join("x")) {
      throw new WeightLoadError(`tensor ${name} has shape [${t.shape}], expected [${shape}]`);
    }
    return t;
  }

  /** get() then upload as a weight. */
  upload(name: string, shape: readonly number[]): Tensor {
    return this.backend.uploadWeight(this.get(name, shape));
  }

  /** upload() when `present`, else null. */
  uploadOpt(name: string, shape: readonly number[], present: boolean): Tensor | null {
    return present ? this.upload(name, shape) : null;
  }

  /** The tensors concatenated along dim 0 (q/k/v or gate/up fusion), uploaded as one weight. */
  uploadCat(names: readonly string[], shapes: readonly (readonly number[])[]): Tensor {
    return this.backend.uploadWeight(concatRows(names.map((n, i) => this.get(n, shapes[i]!))));
  }

  /**
   * get() then upload as an f32 tensor whatever the backend's weight dtype (values the math
   * needs in fp32, e.g. the router's e_score_correction_bias, which HF keeps in fp32).
   */
  uploadF32(name: string, shape: readonly number[]): Tensor {
    return this.backend.upload(widenToF32(this.get(name, shape)), shape, "f32");
  }

  /** Reports one more progress tick. */
  tick(): void {
    this.onProgress?.(++this.done, this.total);
  }
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
