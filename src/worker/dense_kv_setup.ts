/**
 * The dense engine's KV set-up (any backend): the model's KV cache groups in one device pool
 * sized by the KV memory formula, dense paged attention, no extension.
 */
import { DensePagedAttention } from "../attention/backend.js";
import { DenseMlaAttention } from "../attention/mla.js";
import type { Backend, Tensor } from "../backends/backend.js";
import { ConfigError } from "../config/engine_args.js";
import { kvCacheDtypeBytes } from "../core/kv/kv_cache_dtype.js";
import { modelKVCacheGroups } from "../core/kv/kv_cache_interface.js";
import { sizeKVMemory } from "../core/kv/kv_memory.js";
import { kvRefusalMessage } from "../core/kv/kv_refusals.js";
import {
  allocateGroupCaches,
  allocateIndexerKeyCaches,
  disposeKVCache,
  type KVCacheDescription,
  type KVCacheSetup,
  type KVCacheSetupContext,
} from "./kv_cache_setup.js";

/** Bytes as "1.50 GiB" / "32.00 MiB". */
export function formatGiB(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(2)} MiB`;
}

/**
 * Sizes and allocates the dense KV cache: numGpuBlocks = `--num-gpu-blocks-override`, or
 * floor(budget / block bytes); one [numGpuBlocks, 2, blockSize, Hkv, D] tensor per layer (MLA
 * models: a latent row tensor per layer and an indexer key tensor per full DSA layer, with the
 * dense-resident MLA attention).
 * @throws ConfigError when no block fits the budget.
 */
export function setupDenseKVCache(backend: Backend, ctx: KVCacheSetupContext): KVCacheSetup {
  const { config, layout } = ctx.model;
  const blockSize = ctx.args.blockSize;
  if (config.mla != null && ctx.kvCacheDtype === "fp8")
    throw new ConfigError([
      "--kv-cache-dtype fp8 covers GQA attention; MLA latent rows are not quantized yet",
    ]);
  const groups = modelKVCacheGroups(config, {
    elementBytes: kvCacheDtypeBytes(ctx.kvCacheDtype),
    tensorParallelSize: ctx.args.tensorParallelSize,
  });
  const sizing = sizeKVMemory({
    groups,
    blockSize,
    deviceBudgetBytes: ctx.deviceBudgetBytes,
    numGpuBlocksOverride: ctx.args.numGpuBlocksOverride,
  });
  if (sizing.refusals.length > 0) throw new ConfigError(sizing.refusals.map(kvRefusalMessage));
  const { numGpuBlocks, bytesPerBlock } = sizing;
  const alloc = {
    numLayers: config.numHiddenLayers,
    blockSize,
    dtype: ctx.kvCacheDtype,
    numBlocksOf: () => numGpuBlocks,
    calculateScales: ctx.args.calculateKvScales,
  };
  const kvCaches = allocateGroupCaches(backend, groups, alloc);
  const indexerKeyCaches = config.mla != null ? allocateIndexerKeyCaches(backend, groups, alloc) : null;
  const mla =
    config.mla != null
      ? {
          attention: new DenseMlaAttention(backend, blockSize),
          indexerKeyCaches: indexerKeyCaches ?? new Array<null>(config.numHiddenLayers).fill(null),
        }
      : null;
  const allCaches = [...kvCaches, ...(indexerKeyCaches ?? [])].filter((t): t is Tensor => t !== null);
  const description: KVCacheDescription = {
    key: "kv_cache",
    line:
      `KV cache: ${numGpuBlocks} blocks of ${blockSize} tokens (${formatGiB(numGpuBlocks * bytesPerBlock)}, ` +
      `${ctx.kvCacheDtype}), ${groups.map((g) => `${g.name} ${g.layers.length} layers`).join(", ")}`,
    fields: { numGpuBlocks, blockSize, kvBytesPerBlock: bytesPerBlock, kvCacheDtype: ctx.kvCacheDtype },
    logLevel: "debug",
  };
  return {
    blockSize,
    numGpuBlocks,
    groups,
    kvCaches,
    attention: new DensePagedAttention(backend, layout, blockSize),
    mla,
    extensions: [],
    info: { kvBytesPerBlock: bytesPerBlock, hisparse: null },
    description,
    dispose: disposeKVCache(backend, allCaches, []),
  };
}
