import { readFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { mlaKvCacheGeometry } from "../config/mla_config.js";
import {
  countActiveParameters,
  countParameters,
  kvBytesPerToken,
  loadModelConfig,
  type ModelConfig,
} from "../config/model_config.js";
import { packageRoot, resolveModelDir } from "../models/registry.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import { action } from "./errors.js";

/** Package version from package.json. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8"));
  return pkg.version as string;
}

/** `hisparse info`: versions, the compute backend found, and a model summary. */
export function registerInfo(program: Command): void {
  program
    .command("info")
    .description("print versions, the compute backend found, and a summary of the model")
    .option("--model <dir>", "model directory (default: the bundled ref-small)")
    .option("--json", "print JSON", false)
    .action(action(runInfo));
}

async function runInfo(o: { model?: string; json: boolean }): Promise<void> {
  const { detectCuda } = await import("../backends/detect.js");
  const cuda = detectCuda();
  const dir = resolveModelDir(o.model);
  const cfg = loadModelConfig(dir);
  const info = {
    hisparse: packageVersion(),
    node: process.version,
    platform: `${os.platform()} ${os.arch()}`,
    cpus: os.availableParallelism(),
    cuda,
    model: {
      dir,
      architecture: cfg.architecture,
      parameters: countParameters(cfg),
      activeParameters: countActiveParameters(cfg),
      layers: cfg.numHiddenLayers,
      hiddenSize: cfg.hiddenSize,
      heads: cfg.numAttentionHeads,
      kvHeads: cfg.numKeyValueHeads,
      headDim: cfg.headDim,
      vocabSize: cfg.vocabSize,
      maxPositionEmbeddings: cfg.maxPositionEmbeddings,
      dtype: cfg.dtype,
      rope: cfg.rope,
      kvBytesPerTokenBf16: kvBytesPerToken(cfg, 2),
      mla: cfg.mla ?? null,
      tokenizer: Tokenizer.existsIn(dir),
    },
  };
  if (o.json) {
    console.log(JSON.stringify(info, null, 2));
    return;
  }
  const m = info.model;
  console.log(`hisparse ${info.hisparse}  (node ${info.node}, ${info.platform}, ${info.cpus} CPUs)`);
  console.log(
    cuda.available
      ? `backend: cuda — ${cuda.deviceName}`
      : `backend: cpu (CUDA not available: ${cuda.reason})`,
  );
  console.log(`model: ${m.dir}`);
  console.log(
    `  ${m.architecture}, ${(m.parameters / 1e6).toFixed(2)} M parameters, ${m.layers} layers, hidden ${m.hiddenSize}, ` +
      `heads ${m.heads}/${m.kvHeads} kv, head_dim ${m.headDim}, vocab ${m.vocabSize}`,
  );
  console.log(
    `  max positions ${m.maxPositionEmbeddings}, ${m.dtype}, RoPE ${m.rope.type} theta ${m.rope.theta}, ` +
      `KV ${m.kvBytesPerTokenBf16} B/token (bf16), tokenizer: ${m.tokenizer ? "yes" : "no"}`,
  );
  const mla = mlaLines(cfg);
  if (mla.length > 0) console.log(mla.join("\n"));
}

/**
 * The MLA / DSA summary of an MLA model (empty for GQA models): attention dims, the active
 * parameters of the MoE, and the KV geometry of both groups in bf16 (config/mla_config.ts).
 */
export function mlaLines(cfg: ModelConfig): string[] {
  const m = cfg.mla;
  if (m == null) return [];
  const g = mlaKvCacheGeometry(m, cfg.numHiddenLayers, 2);
  const lines = [
    `  MLA: q_lora_rank ${m.qLoraRank ?? "none"}, kv_lora_rank ${m.kvLoraRank}, qk_nope ${m.qkNopeHeadDim}, ` +
      `qk_rope ${m.qkRopeHeadDim} (${m.ropeInterleave ? "interleaved" : "half-split"}), v ${m.vHeadDim}, ` +
      `softmax scale ${m.softmaxScale.toPrecision(6)}; ${(countActiveParameters(cfg) / 1e9).toFixed(2)} B active parameters`,
    `  KV latent: ${g.latent.rowElements} elements = ${g.latent.bytesPerTokenPerLayer} B/token/layer × ${g.latent.layers.length} layers (bf16)`,
  ];
  const ix = m.indexer;
  if (ix !== null && g.indexer !== null) {
    lines.push(
      `  DSA indexer: top-${ix.topk}, ${ix.numHeads} heads × ${ix.headDim} (${ix.ropeInterleave ? "interleaved" : "half-split"} RoPE); ` +
        `keys ${g.indexer.bytesPerTokenPerLayer} B/token/layer × ${g.indexer.layers.length} full layers (bf16)`,
    );
  }
  return lines;
}
