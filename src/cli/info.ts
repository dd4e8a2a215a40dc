import { existsSync, readFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { countParameters, kvBytesPerToken, loadModelConfig } from "../config/model_config.js";
import { packageRoot, resolveModelDir } from "../models/registry.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import { action } from "./errors.js";

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
    nvidiaDriver: nvidiaDriverPresent(),
    model: {
      dir,
      architecture: cfg.architecture,
      parameters: countParameters(cfg),
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
      : `backend: cpu (${cpuBackendReason(cuda.reason, info.nvidiaDriver)})`,
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
}
