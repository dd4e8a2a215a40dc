import type { HostTensorData, WeightFill } from "../backends/backend.js";

/**
 * A source of named host weights in HF naming (`model.layers.0.self_attn.q_proj.weight`):
 * a safetensors checkpoint (models/safetensors.ts) or seeded random weights (models/dummy.ts).
 */
export interface WeightSource {
  /** Every tensor name the source holds. */
  readonly names: readonly string[];
  has(name: string): boolean;
  /**
   * Reads one tensor.
   * @throws WeightLoadError when the name is missing or its bytes are corrupt or truncated.
   */
  get(name: string): HostTensorData;
  /**
   * Optional: where a tensor's values come from, so that a backend can place them without a host
   * copy (models/weight_loader.ts): its bytes in an open file (streamed by `loadWeightFiles`) or
   * a generator rule (run by `fillWeight`). Undefined for a name the source only serves through
   * get() (or does not hold).
   */
  locate?(name: string): WeightLocation | undefined;
  /** Releases open files. */
  close(): void;
}

/** Where one tensor's values are (WeightSource.locate). */
export type WeightLocation =
  | {
      kind: "file";
      shape: number[];
      /** Element type stored in the file. */
      dtype: HostTensorData["dtype"];
      /** Open file descriptor (valid until the source is closed) and its path, for messages. */
      fd: number;
      path: string;
      /** Byte offset of the first element in the file, and the tensor's byte length. */
      position: number;
      byteLength: number;
    }
  | {
      kind: "generated";
      shape: number[];
      /** The rule of the values (backends/weight_fill.ts), element 0 first. */
      fill: WeightFill;
    };

/** A checkpoint that cannot be loaded; the message is one sentence for the user. */
export class WeightLoadError extends Error {
  override name = "WeightLoadError";
}

/**
 * Concatenates tensors along dim 0 (fusing q/k/v or gate/up rows). All parts must share dtype
 * and trailing dims.
 * @throws Error on mismatched dtypes or trailing shapes.
 */
export function concatRows(parts: HostTensorData[]): HostTensorData {
  const first = parts[0];
  if (first === undefined) throw new Error("concatRows needs at least one tensor");
  const tail = first.shape.slice(1).join("x");
  let rows = 0;
  let len = 0;
  for (const p of parts) {
    if (p.dtype !== first.dtype || p.shape.slice(1).join("x") !== tail) {
      throw new Error(
        `concatRows: mismatched parts ${first.dtype}[${first.shape}] vs ${p.dtype}[${p.shape}]`,
      );
    }
    rows += p.shape[0] ?? 0;
    len += p.data.length;
  }
  const data = first.data instanceof Float32Array ? new Float32Array(len) : new Uint16Array(len);
  let off = 0;
  for (const p of parts) {
    data.set(p.data, off);
    off += p.data.length;
  }
  return { data, dtype: first.dtype, shape: [rows, ...first.shape.slice(1)] };
}
