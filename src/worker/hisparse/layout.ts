/**
 * What the CPU and CUDA HiSparse set-ups share: the HiSparse layout of the model's KV cache
 * groups, its sizing by the KV memory formula (core/kv/kv_memory.ts), the caches' allocation,
 * and the {@link KVCacheSetup} they return around their own selector, resolver, attention
 * backend and worker extension.
 */
import type { AttentionBackend } from "../../attention/backend.js";
import type { Backend, Tensor } from "../../backends/backend.js";
import { ConfigError } from "../../config/engine_args.js";
import { digestTokensFor } from "../../config/hisparse_budget.js";
import { type HiSparseConfig, sparseLayersOf } from "../../config/hisparse_config.js";
import { KV_CACHE_DTYPE_BYTES, kvCacheDtypeBytes } from "../../core/kv/kv_cache_dtype.js";
import {
  hisparseKVCacheGroups,
  type KVCacheGroupSpec,
  modelKVCacheGroups,
} from "../../core/kv/kv_cache_interface.js";
import { defaultHostPoolBytes } from "../../core/kv/kv_concurrency.js";
import {
  hisparseBlockCosts,
  type KVMemorySizing,
  sizeKVMemory,
  sparseRequestMinBlocks,
  streamingPrefillBlocksOf,
} from "../../core/kv/kv_memory.js";
import { kvRefusalMessage } from "../../core/kv/kv_refusals.js";
import type { WorkerExtension } from "../extension.js";
import {
  allocateGroupCaches,
  disposeKVCache,
  type HiSparseWorkerInfo,
  type KVCacheSetup,
  type KVCacheSetupContext,
} from "../kv_cache_setup.js";
import { hisparseStartupSummary } from "./describe.js";

/** The laid-out, sized and allocated HiSparse KV cache. */
export interface HiSparseLayout {
  groups: KVCacheGroupSpec[];
  sizing: KVMemorySizing;
  numGpuBlocks: number;
  numHostBlocks: number;
  /**
   * [numLayers] the main pool's tensor ([numGpuBlocks, 2, blockSize, Hkv, D]) for each sparse
   * layer, a host-block-indexed one ([numHostBlocks, ...]) for each dense layer.
   */
  kvCaches: Tensor[];
  /** Ascending. */
  sparseLayers: number[];
  /** Ascending. */
  denseLayers: number[];
  /** [numLayers] index among the sparse layers, -1 for a dense layer. */
  sparseIndex: number[];
}

/** What differs between backends in the sizing. */
export interface HiSparseSizingOptions {
  /** Bytes per Quest digest element (core/kv/kv_cache_interface.ts DIGEST_ELEMENT_BYTES). */
  digestElementBytes: number;
  /** Device bytes the set-up takes before the pools (CUDA: the slot tables). */
  reservedDeviceBytes?: number;
  /** Largest default host pool in bytes (CUDA: a share of the RAM, the host tier is pinned). */
  defaultHostPoolMaxBytes?: number;
  /**
   * The set-up's attention reads a prefill's spilled pages from the host tier (DSA set-ups:
   * HiSparseWorkerInfo.prefillReadsHostTier), so a prefill streams and the default host pool
   * counts a prefill's core/kv/kv_memory.ts streamingPrefillBlocks instead of all its pages.
   */
  prefillReadsHostTier?: boolean;
}

/**
 * Lays the model's KV cache out for HiSparse (sparse layers offloadable, dense layers and digests
 * on the device for every page), sizes it from the budget and allocates its KV tensors.
 * @throws ConfigError with every refusal of the formula, and the remedies.
 */
export function layOutHiSparse(
  backend: Backend,
  ctx: KVCacheSetupContext,
  hs: HiSparseConfig,
  o: HiSparseSizingOptions,
): HiSparseLayout {
  const { config } = ctx.model;
  const bs = ctx.args.blockSize;
  const groups = hisparseKVCacheGroups(
    modelKVCacheGroups(config, {
      elementBytes: kvCacheDtypeBytes(ctx.kvCacheDtype),
      tensorParallelSize: ctx.args.tensorParallelSize,
    }),
    {
      denseLayers: hs.denseLayers,
      digestElementBytes: o.digestElementBytes,
      digestsPerPage: bs / digestTokensFor(hs, bs),
    },
  );
  const minGpuBlocks = sparseRequestMinBlocks(hs, bs);
  const hostElementBytes = hostKvElementBytes(hs);
  const sizing = sizeKVMemory({
    groups,
    blockSize: bs,
    deviceBudgetBytes: ctx.deviceBudgetBytes,
    reservedDeviceBytes: o.reservedDeviceBytes,
    numGpuBlocksOverride: ctx.args.numGpuBlocksOverride,
    hisparse: {
      hostPoolBytes: hs.hostPoolBytes,
      defaultHostPoolBytes: defaultHostPoolBytes(
        hs.defaultHostPool,
        ctx.deviceBudgetBytes - (o.reservedDeviceBytes ?? 0),
        hisparseBlockCosts(groups, bs, hostElementBytes),
        {
          requestTokens: ctx.maxModelLen,
          minGpuBlocks,
          blockSize: bs,
          numGpuBlocksOverride: ctx.args.numGpuBlocksOverride,
          streamingBlocks: o.prefillReadsHostTier
            ? streamingPrefillBlocksOf(hs, bs, ctx.args.maxNumBatchedTokens)
            : undefined,
        },
      ),
      defaultHostPoolMaxBytes: o.defaultHostPoolMaxBytes,
      minGpuBlocks,
      hostElementBytes,
    },
  });
  if (sizing.refusals.length > 0) throw new ConfigError(sizing.refusals.map(kvRefusalMessage));
  const numGpuBlocks = sizing.numGpuBlocks;
  const numHostBlocks = sizing.host!.numHostBlocks;
  const kvCaches = allocateGroupCaches(backend, groups, {
    numLayers: config.numHiddenLayers,
    blockSize: bs,
    dtype: ctx.kvCacheDtype,
    numBlocksOf: (g) => (g.offloadable ? numGpuBlocks : numHostBlocks),
    calculateScales: ctx.args.calculateKvScales,
  });
  const sparseLayers = sparseLayersOf(hs, config.numHiddenLayers);
  const sparseIndex = new Array<number>(config.numHiddenLayers).fill(-1);
  sparseLayers.forEach((l, i) => {
    sparseIndex[l] = i;
  });
  const denseLayers = [...hs.denseLayers].sort((a, b) => a - b);
  return { groups, sizing, numGpuBlocks, numHostBlocks, kvCaches, sparseLayers, denseLayers, sparseIndex };
}

/**
 * Bytes per K/V element of host pages for the formula: 1 with `host_kv_cache_dtype` fp8, else
 * undefined (the device pool's element, whatever `--kv-cache-dtype` made it).
 */
export function hostKvElementBytes(hs: HiSparseConfig): number | undefined {
  return hs.hostKvCacheDtype === "fp8" ? KV_CACHE_DTYPE_BYTES.fp8 : undefined;
}

/** The set-up of a HiSparse layout with the backend's attention backend and worker extension. */
export function hisparseKVCacheSetup(
  backend: Backend,
  ctx: KVCacheSetupContext,
  hs: HiSparseConfig,
  lay: HiSparseLayout,
  attention: AttentionBackend,
  extension: WorkerExtension,
): KVCacheSetup {
  const host = lay.sizing.host!;
  const hisparse: HiSparseWorkerInfo = {
    numHostBlocks: lay.numHostBlocks,
    hostBytesPerBlock: host.hostBytesPerBlock,
    deviceBytesPerHostBlock: host.deviceBytesPerHostBlock,
    denseLayers: lay.denseLayers,
    sparseLayers: lay.sparseLayers,
  };
  const info = { kvBytesPerBlock: lay.sizing.bytesPerBlock, hisparse };
  const summary = hisparseStartupSummary(hs, { numGpuBlocks: lay.numGpuBlocks, ...info });
  const extensions = [extension];
  return {
    blockSize: ctx.args.blockSize,
    numGpuBlocks: lay.numGpuBlocks,
    groups: lay.groups,
    kvCaches: lay.kvCaches,
    attention,
    mla: null,
    extensions,
    info,
    description: { key: "hisparse", line: summary.line, fields: summary.fields, logLevel: "info" },
    dispose: disposeKVCache(backend, lay.kvCaches, extensions),
  };
}
