/**
 * The test checkpoint of bench/load_bench.ts: an HF-format safetensors checkpoint of a config
 * (as `save_pretrained` lays it out: model-0000i-of-0000N.safetensors shards of at most 5 GB,
 * model.safetensors.index.json with metadata.total_size and the weight_map, config.json) whose
 * bf16 tensors are the dummy weights of (config, seed). Each HF tensor is generated on the device
 * (Backend.fillWeight, the rule of --load-format dummy) into one scratch tensor and read back in
 * 64 MiB pieces, so writing 16 GB costs the read-back and the file writes only.
 */
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { offsetPtr } from "../src/backends/cuda/addon.js";
import type { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import type { CudaTensor } from "../src/backends/cuda/tensor.js";
import type { ModelConfig } from "../src/config/model_config.js";
import { DummyWeights, llamaWeightSpecs } from "../src/models/dummy.js";

/** transformers' default max_shard_size of save_pretrained ("5GB", decimal). */
const MAX_SHARD_BYTES = 5e9;
/** Bytes read back and written per call. */
const PIECE_BYTES = 64 * 2 ** 20;

export interface WriteOptions {
  dir: string;
  /** Folder of config.json (copied). */
  configDir: string;
  config: ModelConfig;
  seed: number;
  /** Generates and reads back the tensors. */
  backend: CudaBackend;
  /** Keep a checkpoint already in dir with the same total size and seed. */
  reuse: boolean;
}

export interface Written {
  shards: string[];
  totalBytes: number;
  writeS: number;
  reused: boolean;
}

/** Writes the checkpoint (see the top of this file). @throws Error when a file cannot be written. */
export function writeDummyCheckpoint(o: WriteOptions): Written {
  const specs = llamaWeightSpecs(o.config);
  const numel = (s: number[]) => s.reduce((a, b) => a * b, 1);
  const totalBytes = specs.reduce((a, s) => a + 2 * numel(s.shape), 0);
  // Greedy shards in checkpoint order, each at most MAX_SHARD_BYTES (a larger tensor gets its own).
  const groups: (typeof specs)[] = [[]];
  let size = 0;
  for (const s of specs) {
    const b = 2 * numel(s.shape);
    if (size + b > MAX_SHARD_BYTES && groups.at(-1)!.length > 0) {
      groups.push([]);
      size = 0;
    }
    groups.at(-1)!.push(s);
    size += b;
  }
  const shards = groups.map((_, i) => `model-${pad5(i + 1)}-of-${pad5(groups.length)}.safetensors`);
  const indexPath = join(o.dir, "model.safetensors.index.json");
  if (o.reuse && existsSync(indexPath)) {
    const index = JSON.parse(readFileSync(indexPath, "utf8")) as { metadata?: Record<string, unknown> };
    if (index.metadata?.total_size === totalBytes && index.metadata?.hisparse_dummy_seed === o.seed)
      return { shards, totalBytes, writeS: 0, reused: true };
  }
  const t0 = performance.now();
  mkdirSync(o.dir, { recursive: true });
  copyFileSync(join(o.configDir, "config.json"), join(o.dir, "config.json"));
  const source = new DummyWeights(o.config, { seed: o.seed, dtype: "bf16" });
  const largest = Math.max(...specs.map((s) => numel(s.shape)));
  const scratch = o.backend.allocateWeight([largest]) as CudaTensor;
  const piece = new Uint8Array(PIECE_BYTES);
  const weightMap: Record<string, string> = {};
  try {
    groups.forEach((group, i) => {
      const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
      let off = 0;
      for (const s of group) {
        const b = 2 * numel(s.shape);
        header[s.name] = { dtype: "BF16", shape: s.shape, data_offsets: [off, off + b] };
        weightMap[s.name] = shards[i]!;
        off += b;
      }
      let json = JSON.stringify(header);
      json += " ".repeat((8 - ((8 + json.length) % 8)) % 8); // data 8-byte aligned, as safetensors pads
      const fd = openSync(join(o.dir, shards[i]!), "w");
      try {
        const len = new Uint8Array(8);
        new DataView(len.buffer).setBigUint64(0, BigInt(json.length), true);
        writeSync(fd, len);
        writeSync(fd, new TextEncoder().encode(json));
        for (const s of group) {
          const loc = source.locate(s.name)!;
          if (loc.kind !== "generated") throw new Error("dummy weights are generated");
          const n = numel(s.shape);
          o.backend.fillWeight(scratch, 0, n, loc.fill);
          for (let p = 0; p < 2 * n; p += PIECE_BYTES) {
            const view = piece.subarray(0, Math.min(PIECE_BYTES, 2 * n - p));
            o.backend.downloadBytes(view, offsetPtr(scratch.ptr, p));
            writeSync(fd, view);
          }
        }
      } finally {
        closeSync(fd);
      }
    });
  } finally {
    o.backend.free(scratch);
  }
  const index = { metadata: { total_size: totalBytes, hisparse_dummy_seed: o.seed }, weight_map: weightMap };
  writeFileSync(indexPath, `${JSON.stringify(index, null, 2)}\n`);
  return { shards, totalBytes, writeS: (performance.now() - t0) / 1e3, reused: false };
}

/** Reads every shard once from start to end (so it sits in the page cache); one thread, 64 MiB reads. */
export function readCheckpointOnce(
  dir: string,
  shards: readonly string[],
): { seconds: number; gbps: number } {
  const buf = new Uint8Array(PIECE_BYTES);
  let bytes = 0;
  const t0 = performance.now();
  for (const s of shards) {
    const fd = openSync(join(dir, s), "r");
    try {
      for (;;) {
        const n = readSync(fd, buf, 0, buf.length, null);
        if (n === 0) break;
        bytes += n;
      }
    } finally {
      closeSync(fd);
    }
  }
  const seconds = (performance.now() - t0) / 1e3;
  return { seconds, gbps: bytes / 1e9 / seconds };
}

function pad5(n: number): string {
  return String(n).padStart(5, "0");
}
