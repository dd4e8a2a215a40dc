/**
 * Writes small MoE checkpoints in HF format for loader and CLI tests: config.json plus a
 * model.safetensors of seeded random weights (test/unit/backends/cpu/llama_reference.ts), whose
 * tensors a test may drop or replace first (a missing expert, a misshapen one).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { HostTensorData } from "../../src/backends/backend.js";
import { parseModelConfig } from "../../src/config/model_config.js";
import { makeRand } from "../unit/backends/cpu/helpers.js";
import { randomWeights } from "../unit/backends/cpu/llama_reference.js";
import { type RawTensor, writeSafetensors } from "../unit/models/helpers.js";

/** Options of {@link writeMoeCheckpoint}. */
export interface MoeCheckpointOptions {
  /** Store experts packed (`experts.gate_up_proj`) instead of per expert. */
  packed?: boolean;
  /** Edits the tensors before they are written (delete or replace entries). */
  edit?: (tensors: Map<string, HostTensorData>) => void;
  seed?: number;
}

/** safetensors bytes of a host tensor (F32, or BF16 / F16 bits). */
function raw(t: HostTensorData): RawTensor {
  const dtype = t.dtype === "f32" ? "F32" : t.dtype === "bf16" ? "BF16" : "F16";
  return {
    dtype,
    shape: t.shape,
    bytes: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength),
  };
}

/** Writes `config` and its random bf16 weights into `dir` (created); returns `dir`. */
export function writeMoeCheckpoint(
  dir: string,
  config: Record<string, unknown>,
  opts: MoeCheckpointOptions = {},
): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "config.json"), JSON.stringify({ ...config, torch_dtype: "bfloat16" }));
  const cfg = parseModelConfig(config);
  const source = randomWeights(cfg, makeRand(opts.seed ?? 1), true, opts.packed ?? false);
  const tensors = new Map(source.names.map((n) => [n, source.get(n)]));
  opts.edit?.(tensors);
  writeSafetensors(
    join(dir, "model.safetensors"),
    Object.fromEntries([...tensors].map(([n, t]) => [n, raw(t)])),
  );
  return dir;
}
