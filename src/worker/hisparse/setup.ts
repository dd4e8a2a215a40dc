import type { AttentionBackend } from "../../attention/backend.js";
import { HiSparseAttention } from "../../attention/sparse/hisparse_attention.js";
import { LruHotBufferResolver } from "../../attention/sparse/hot_buffer.js";
import { QuestSelector } from "../../attention/sparse/quest.js";
import type { Backend, DType, QkvLayout, Tensor } from "../../backends/backend.js";
import { DTYPE_BYTES } from "../../backends/backend.js";
import { ConfigError, type EngineArgs } from "../../config/engine_args.js";
import { type HiSparseConfig, sparseLayersOf, validateHiSparseConfig } from "../../config/hisparse_config.js";
import type { ModelConfig } from "../../config/model_config.js";
import type { WorkerExtension } from "../extension.js";
import { HiSparseWorker } from "./hisparse_worker.js";
import { CpuHostKvCache } from "./host_kv_cache.js";
import { planHiSparseMemory } from "./memory_plan.js";

/** What the worker reports about HiSparse once loaded (WorkerInfo.hisparse). */
export interface HiSparseWorkerInfo {
  numHostBlocks: number;
  /** Host bytes of one page (every sparse layer). */
  hostBytesPerBlock: number;
  /** Device bytes each host page costs (dense-layer KV and digests). */
  deviceBytesPerHostBlock: number;
  denseLayers: number[];
  sparseLayers: number[];
}

/** The worker's HiSparse parts, built by {@link setupHiSparse}. */
export interface HiSparseSetup {
  numGpuBlocks: number;
  /** Device bytes of one main-pool block (sparse layers). */
  kvBytesPerBlock: number;
  /** [numLayers] the main pool's tensor for sparse layers, the host-block-indexed one for dense layers. */
  kvCaches: Tensor[];
  attention: AttentionBackend;
  extension: WorkerExtension;
  info: HiSparseWorkerInfo;
}

/** Reasons the settings cannot work on this model and backend (empty when they can). */
export function modelReasons(
  backend: Backend,
  config: ModelConfig,
  args: EngineArgs,
  hs: HiSparseConfig,
): string[] {
  const reasons = validateHiSparseConfig(hs, {
    blockSize: args.blockSize,
    enablePrefixCaching: args.enablePrefixCaching,
    numLayers: config.numHiddenLayers,
    vocabSize: config.vocabSize,
  });
  if (
    backend.name !== "cuda" &&
    (backend.hostView === undefined || backend.sparsePagedAttention === undefined)
  )
    reasons.push(
      `--enable-hybrid-sparse ${hs.mode} needs HiSparse kernels, which the ${backend.name} backend does not have yet (use --device cpu, or --enable-hybrid-sparse off)`,
    );
  return reasons;
}

/**
 * [numLayers] KV tensors: the main pool ([numGpuBlocks, 2, blockSize, Hkv, D]) for each sparse
 * layer, a host-block-indexed one ([numHostBlocks, ...]) for each dense layer.
 */
export function allocateKvCaches(
  backend: Backend,
  config: ModelConfig,
  blockSize: number,
  dtype: DType,
  sparseLayers: readonly number[],
  denseLayers: readonly number[],
  plan: { numGpuBlocks: number; numHostBlocks: number },
): Tensor[] {
  const spec = { blockSize, numKvHeads: config.numKeyValueHeads, headDim: config.headDim, dtype };
  const main = backend.allocateKvCache({
    ...spec,
    numLayers: sparseLayers.length,
    numBlocks: plan.numGpuBlocks,
  });
  const dense = backend.allocateKvCache({
    ...spec,
    numLayers: denseLayers.length,
    numBlocks: plan.numHostBlocks,
  });
  const kvCaches: Tensor[] = new Array(config.numHiddenLayers);
  sparseLayers.forEach((l, i) => {
    kvCaches[l] = main[i]!;
  });
  denseLayers.forEach((l, i) => {
    kvCaches[l] = dense[i]!;
  });
  return kvCaches;
}

/**
 * Sizes and allocates HiSparse's memory and builds its worker parts: the main pool for the
 * sparse layers ([numGpuBlocks, 2, blockSize, Hkv, D] each), the dense layers' KV indexed by host
 * block ([numHostBlocks, ...] each), the host tier, the Quest selector (digests), the LRU
 * resolver, the attention backend and the worker extension.
 * @param deviceBudgetBytes device bytes for KV when --num-gpu-blocks-override is not given.
 * @throws ConfigError listing every reason the settings cannot work on this model and backend.
 */
export function setupHiSparse(
  backend: Backend,
  model: { config: ModelConfig; layout: QkvLayout },
  args: EngineArgs,
  hs: HiSparseConfig,
  kvCacheDtype: DType,
  deviceBudgetBytes: number,
): HiSparseSetup {
  const { config } = model;
  const bs = args.blockSize;
  const hostView = backend.hostView?.bind(backend);
  const reasons = modelReasons(backend, config, args, hs);
  if (reasons.length > 0 || hostView === undefined) throw new ConfigError(reasons);
  const { numKeyValueHeads: Hkv, headDim: D, numHiddenLayers: L } = config;
  const plan = planHiSparseMemory({
    config: hs,
    blockSize: bs,
    numLayers: L,
    numKvHeads: Hkv,
    headDim: D,
    kvElementBytes: DTYPE_BYTES[kvCacheDtype],
    deviceBudgetBytes,
    numGpuBlocksOverride: args.numGpuBlocksOverride,
  });
  if (plan.reasons.length > 0) throw new ConfigError(plan.reasons);
  const sparseLayers = sparseLayersOf(hs, L);
  const denseLayers = [...hs.denseLayers].sort((a, b) => a - b);
  const kvCaches = allocateKvCaches(backend, config, bs, kvCacheDtype, sparseLayers, denseLayers, plan);
  const sparseIndex = new Array<number>(L).fill(-1);
  sparseLayers.forEach((l, i) => {
    sparseIndex[l] = i;
  });
  const view = (t: Tensor) => hostView(t) as Float32Array;
  const hostTier = new CpuHostKvCache(
    {
      numSparseLayers: sparseLayers.length,
      numHostBlocks: plan.numHostBlocks,
      blockSize: bs,
      numKvHeads: Hkv,
      headDim: D,
    },
    view,
  );
  const selector = new QuestSelector(
    {
      layout: model.layout,
      blockSize: bs,
      numSparseLayers: sparseLayers.length,
      numHostBlocks: plan.numHostBlocks,
      topk: hs.topk,
      sinkTokens: hs.sinkTokens,
      windowTokens: hs.windowTokens,
    },
    view,
  );
  const resolver = new LruHotBufferResolver(hostTier, bs, Hkv, sparseLayers.length);
  const attention = new HiSparseAttention(backend, model.layout, bs, { sparseIndex }, selector, resolver);
  const extension = new HiSparseWorker(backend, bs, kvCaches, sparseLayers, hostTier, resolver);
  return {
    numGpuBlocks: plan.numGpuBlocks,
    kvBytesPerBlock: plan.mainBytesPerBlock,
    kvCaches,
    attention,
    extension,
    info: {
      numHostBlocks: plan.numHostBlocks,
      hostBytesPerBlock: plan.hostBytesPerBlock,
      deviceBytesPerHostBlock: plan.deviceBytesPerHostBlock,
      denseLayers,
      sparseLayers,
    },
  };
}
