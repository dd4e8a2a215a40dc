/**
 * A minimal safetensors reader for the CPU backend's tests and benchmark (the engine's own loader
 * lives in models/). Format (https://github.com/huggingface/safetensors): an 8-byte little-endian
 * header length, a JSON header {name: {dtype, shape, data_offsets: [begin, end]}} and the data,
 * offsets relative to the end of the header. Sharded checkpoints list their files in
 * model.safetensors.index.json.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { HostTensorData } from "../../../../src/backends/backend.js";
import type { WeightSource } from "../../../../src/models/weights.js";

interface Entry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** Reads every tensor of a (possibly sharded) checkpoint directory into memory. */
export function readSafetensorsDir(dir: string): WeightSource {
  const index = join(dir, "model.safetensors.index.json");
  const files = existsSync(index)
    ? [
        ...new Set(
          Object.values(
            (JSON.parse(readFileSync(index, "utf8")) as { weight_map: Record<string, string> }).weight_map,
          ),
        ),
      ]
    : ["model.safetensors"];
  const tensors = new Map<string, HostTensorData>();
  for (const f of files) {
    const buf = readFileSync(join(dir, f));
    const headerLen = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + headerLen).toString("utf8")) as Record<string, Entry>;
    const base = 8 + headerLen;
    for (const [name, e] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const bytes = buf.subarray(base + e.data_offsets[0], base + e.data_offsets[1]);
      const copy = new Uint8Array(bytes).buffer; // aligned copy
      if (e.dtype === "BF16")
        tensors.set(name, { data: new Uint16Array(copy), dtype: "bf16", shape: e.shape });
      else if (e.dtype === "F16")
        tensors.set(name, { data: new Uint16Array(copy), dtype: "f16", shape: e.shape });
      else if (e.dtype === "F32")
        tensors.set(name, { data: new Float32Array(copy), dtype: "f32", shape: e.shape });
      else throw new Error(`${name}: dtype ${e.dtype} is not supported by the test reader`);
    }
  }
  return {
    names: [...tensors.keys()],
    has: (n) => tensors.has(n),
    get: (n) => {
      const t = tensors.get(n);
      if (t === undefined) throw new Error(`no tensor ${n}`);
      return t;
    },
    close: () => tensors.clear(),
  };
}
