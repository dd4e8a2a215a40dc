import { existsSync, readFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { loadModelConfig, type ModelConfig } from "../config/model_config.js";
import { countActiveParameters, countParameters } from "../config/parameter_count.js";
import { kvHeadsPerRank, modelKVCacheGroups } from "../core/kv/kv_cache_interface.js";
import { bytesPerToken } from "../core/kv/kv_memory.js";
import { tensorParallelReasons, vocabIsSharded } from "../core/tensor_parallel.js";
import { packageRoot, resolveModelDir } from "../models/registry.js";
import { formatParameterCount } from "../plan/format.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import { action } from "./errors.js";
import { parseIntArg } from "./parse_args.js";

/** Package version from package.json. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8"));
  return pkg.version as string;
}

/** Files that exist where an NVIDIA driver is loaded (its proc entry, its control device). */
const NVIDIA_DRIVER_FILES = ["/proc/driver/nvidia/version", "/dev/nvidiactl"];

/** True when this machine shows an NVIDIA driver (so building the CUDA addon can help). */
export function nvidiaDriverPresent(files: readonly string[] = NVIDIA_DRIVER_FILES): boolean {
  return files.some((f) => existsSync(f));
}

/**
 * Why the CPU backend is used, for the `backend:` line: on a machine without an NVIDIA driver,
 * that there is no GPU (not the addon's "run `npm run build:native`", which cannot help
 * there); otherwise the detection's reason.
 */
export function cpuBackendReason(cudaReason: string, driverPresent: boolean): string {
  return driverPresent
    ? `CUDA not available: ${cudaReason}`
    : "no NVIDIA GPU driver on this machine; the CPU backend runs every model";
}

/** `hisparse info`: versions, the compute backend found, and a model summary. */
export function registerInfo(program: Command): void {
  program
    .command("info")
    .description("print versions, the compute backend found, and a summary of the model")
    .option("--model <dir>", "model directory (default: the bundled ref-small)")
    .option(
      "--tensor-parallel-size <n>",
      "show how the model splits over this many ranks (and the GPUs and NCCL it needs)",
      parseIntArg,
      1,
    )
    .option("--json", "print JSON", false)
    .action(action(runInfo));
}

async function runInfo(o: { model?: string; json: boolean; tensorParallelSize: number }): Promise<void> {
  const { detectCuda, detectNccl } = await import("../backends/detect.js");
  const cuda = detectCuda();
  const nccl = cuda.available ? detectNccl() : null;
  const dir = resolveModelDir(o.model);
  const cfg = loadModelConfig(dir);
  const tp = o.tensorParallelSize;
  const info = {
    hisparse: packageVersion(),
    node: process.version,
    platform: `${os.platform()} ${os.arch()}`,
    cpus: os.availableParallelism(),
    cuda,
    nccl,
    nvidiaDriver: nvidiaDriverPresent(),
    tensorParallel: tensorParallelSummary(cfg, tp, cuda.available ? cuda.deviceCount : null),
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
      rotaryDim: cfg.rotaryDim ?? cfg.headDim,
      moe: cfg.moe ?? null,
      kvBytesPerTokenBf16: bytesPerToken(modelKVCacheGroups(cfg, { elementBytes: 2 })),
      mla: cfg.mla ?? null,
      tokenizer: Tokenizer.existsIn(dir),
    },
  };
  if (o.json) console.log(JSON.stringify(info, null, 2));
  else printInfo(info, cfg);
  // A refused split is a failure (exit 1, one sentence on stderr), after the facts are shown.
  const refused = info.tensorParallel.reasons;
  if (refused.length > 0)
    throw new Error(`--tensor-parallel-size ${tp} is refused for this model: ${refused.join("; ")}`);
}

/** The human-readable `hisparse info` (what --json prints as one object). */
function printInfo(
  info: {
    hisparse: string;
    node: string;
    platform: string;
    cpus: number;
    cuda: ReturnType<typeof import("../backends/detect.js").detectCuda>;
    nccl: ReturnType<typeof import("../backends/detect.js").detectNccl> | null;
    nvidiaDriver: boolean;
    tensorParallel: TensorParallelSummary;
    model: {
      dir: string;
      architecture: string;
      parameters: number;
      layers: number;
      hiddenSize: number;
      heads: number;
      kvHeads: number;
      headDim: number;
      vocabSize: number;
      maxPositionEmbeddings: number;
      dtype: string;
      rope: ModelConfig["rope"];
      kvBytesPerTokenBf16: number;
      tokenizer: boolean;
    };
  },
  cfg: ModelConfig,
): void {
  const { cuda, nccl } = info;
  const m = info.model;
  console.log(`hisparse ${info.hisparse}  (node ${info.node}, ${info.platform}, ${info.cpus} CPUs)`);
  console.log(
    cuda.available
      ? `backend: cuda — ${cuda.deviceName}`
      : `backend: cpu (${cpuBackendReason(cuda.reason, info.nvidiaDriver)})`,
  );
  console.log(`model: ${m.dir}`);
  console.log(
    `  ${m.architecture}, ${formatParameterCount(m.parameters)} parameters, ${m.layers} layers, hidden ${m.hiddenSize}, ` +
      `heads ${m.heads}/${m.kvHeads} kv, head_dim ${m.headDim}, vocab ${m.vocabSize}`,
  );
  console.log(
    `  max positions ${m.maxPositionEmbeddings}, ${m.dtype}, RoPE ${m.rope.type} theta ${m.rope.theta}, ` +
      `KV ${m.kvBytesPerTokenBf16} B/token (bf16), tokenizer: ${m.tokenizer ? "yes" : "no"}`,
  );
  for (const l of mlaLines(cfg)) console.log(l);
  const moe = moeSummary(cfg);
  if (moe !== null) console.log(`  ${moe}`);
  if (nccl !== null)
    console.log(
      nccl.available ? `NCCL: ${nccl.version} (${nccl.path})` : `NCCL: not available (${nccl.reason})`,
    );
  console.log(tensorParallelLine(info.tensorParallel));
}

/** How a model splits over `tp` ranks (core/tensor_parallel.ts), for `hisparse info`. */
export interface TensorParallelSummary {
  size: number;
  /** GPUs present (null on the CPU backend, whose ranks are threads). */
  gpus: number | null;
  /** Why the model cannot be split (empty when it can); a missing GPU is one reason. */
  reasons: string[];
  /** Per rank, when it splits: query heads, KV heads (replicated when fewer than ranks), MLP rows, vocabulary rows. */
  perRank: {
    heads: number;
    kvHeads: number;
    kvReplicated: boolean;
    intermediate: number;
    vocab: number;
  } | null;
}

export function tensorParallelSummary(
  cfg: ModelConfig,
  tp: number,
  gpus: number | null,
): TensorParallelSummary {
  const reasons = tensorParallelReasons(cfg, tp);
  if (gpus !== null && tp > gpus)
    reasons.push(`--tensor-parallel-size ${tp} needs ${tp} GPUs, ${gpus} present`);
  const split = tensorParallelReasons(cfg, tp).length === 0;
  const perRank = split
    ? {
        heads: cfg.numAttentionHeads / tp,
        kvHeads: kvHeadsPerRank(cfg.numKeyValueHeads, tp),
        kvReplicated: cfg.numKeyValueHeads < tp,
        intermediate: cfg.intermediateSize / tp,
        vocab: vocabIsSharded(cfg.vocabSize, tp) ? cfg.vocabSize / tp : cfg.vocabSize,
      }
    : null;
  return { size: tp, gpus, reasons, perRank };
}

/** "tensor parallel: 2 ranks (GPUs 0-1 of 8): per rank 16 heads, 4 KV heads, ..." or the reasons. */
export function tensorParallelLine(s: TensorParallelSummary): string {
  const where =
    s.gpus === null ? "CPU threads" : `GPU${s.size > 1 ? `s 0-${s.size - 1}` : " 0"} of ${s.gpus}`;
  const head = `tensor parallel: ${s.size} rank${s.size > 1 ? "s" : ""} (${where})`;
  if (s.reasons.length > 0) return `${head}: refused: ${s.reasons.join("; ")}`;
  const r = s.perRank!;
  return (
    `${head}: per rank ${r.heads} heads, ${r.kvHeads} KV head${r.kvHeads > 1 ? "s" : ""}` +
    `${r.kvReplicated ? " (replicated)" : ""}, MLP ${r.intermediate}, vocab ${r.vocab}`
  );
}

/**
 * The MLA / DSA summary of an MLA model (empty for GQA models): attention dims and the KV
 * groups in bf16 (core/kv modelKVCacheGroups: "mla latent", "indexer keys").
 */
export function mlaLines(cfg: ModelConfig): string[] {
  const m = cfg.mla;
  if (m == null) return [];
  const groups = modelKVCacheGroups(cfg, { elementBytes: 2 });
  const latent = groups.find((x) => x.spec.kind === "mla_attention")!;
  const keys = groups.find((x) => x.spec.kind === "indexer_key");
  const layout = (interleaved: boolean) => (interleaved ? "interleaved" : "half-split");
  const lines = [
    `  MLA: q_lora_rank ${m.qLoraRank ?? "none"}, kv_lora_rank ${m.kvLoraRank}, qk_nope ${m.qkNopeHeadDim}, ` +
      `qk_rope ${m.qkRopeHeadDim} (${layout(m.ropeInterleave)}), v ${m.vHeadDim}, softmax scale ${m.softmaxScale.toPrecision(6)}`,
    `  KV latent: ${m.kvLoraRank + m.qkRopeHeadDim} elements = ${latent.spec.bytesPerToken} B/token/layer × ${latent.layers.length} layers (bf16)`,
  ];
  const ix = m.indexer;
  if (ix !== null && keys !== undefined) {
    lines.push(
      `  DSA indexer: top-${ix.topk}, ${ix.numHeads} heads × ${ix.headDim} (${layout(ix.ropeInterleave)} RoPE); ` +
        `keys ${keys.spec.bytesPerToken} B/token/layer × ${keys.layers.length} full layers (bf16)`,
    );
  }
  return lines;
}

/**
 * One line on a MoE model's experts, e.g. "MoE: 128 experts, 8 per token (softmax,
 * renormalised), 48 of 48 layers, expert ffn 768, no shared expert; 3.35 B active parameters";
 * null for dense models.
 */
export function moeSummary(c: ModelConfig): string | null {
  const moe = c.moe;
  if (moe === null || moe === undefined) return null;
  const r = moe.routing;
  const rule = [
    r.scoring === "softmax" ? "softmax" : "sigmoid + correction bias",
    r.numGroups > 1 ? `${r.topkGroup} of ${r.numGroups} groups` : null,
    r.renormalize ? "renormalised" : null,
    r.routedScalingFactor !== 1 ? `scaled ${r.routedScalingFactor}` : null,
  ].filter((x) => x !== null);
  const shared = moe.numSharedExperts === 0 ? "no shared expert" : `${moe.numSharedExperts} shared`;
  return (
    `MoE: ${moe.numExperts} experts, ${r.topK} per token (${rule.join(", ")}), ${moe.moeLayers.length} of ` +
    `${c.numHiddenLayers} layers, expert ffn ${moe.moeIntermediateSize}, ${shared}; ` +
    `${formatParameterCount(countActiveParameters(c))} active parameters`
  );
}
