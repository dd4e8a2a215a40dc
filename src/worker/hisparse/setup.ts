import { HiSparseAttention } from "../../attention/sparse/hisparse_attention.js";
import { LruHotBufferResolver } from "../../attention/sparse/hot_buffer.js";
import { QuestSelector } from "../../attention/sparse/quest.js";
import type { Backend, Tensor } from "../../backends/backend.js";
import { ConfigError, type EngineArgs } from "../../config/engine_args.js";
import { digestTokensFor } from "../../config/hisparse_budget.js";
import { type HiSparseConfig, validateHiSparseConfig } from "../../config/hisparse_config.js";
import type { ModelConfig } from "../../config/model_config.js";
import { DIGEST_ELEMENT_BYTES } from "../../core/kv/kv_cache_interface.js";
import type { KVCacheSetup, KVCacheSetupContext } from "../kv_cache_setup.js";
import { dsaSettingsOf, setupDsaHiSparse } from "./dsa_setup.js";
import { HiSparseWorker } from "./hisparse_worker.js";
import { CpuHostKvCache, type HostKvCacheSpec } from "./host_kv_cache.js";
import { hisparseKVCacheSetup, layOutHiSparse } from "./layout.js";

/** Reasons the settings cannot work on this model and backend (empty when they can). */
export function modelReasons(
  backend: Backend,
  config: ModelConfig,
  args: EngineArgs,
  hs: HiSparseConfig,
): string[] {
  // The root cause alone: the Quest layout's other checks (head dims, digests) do not apply.
  if (config.mla != null) {
    const dsa = dsaSettingsOf(config, { args }, hs);
    if (dsa === null)
      return [
        `Hybrid HiSparse runs multi-head latent attention models only with a DSA indexer (DeepSeek-V3.2, GLM-5): ${config.architecture} has none, so no selection decides which latent rows to recall; use --enable-hybrid-sparse off`,
      ];
    const reasons = [...dsa.reasons];
    if (hs.hostKvCacheDtype !== "auto")
      reasons.push(
        `host_kv_cache_dtype ${hs.hostKvCacheDtype} is for Quest HiSparse (GQA models); DSA models keep their latent rows in the device pool's dtype (use host_kv_cache_dtype auto)`,
      );
    if (backend.mla === undefined)
      reasons.push(
        `--enable-hybrid-sparse ${hs.mode} for DSA models needs MLA ops, which the ${backend.name} backend does not have (use --device cpu or cuda, or --enable-hybrid-sparse off)`,
      );
    return reasons;
  }
  if (hs.selector === "dsa")
    return [
      `selector "dsa" needs a model with a DSA indexer (DeepSeek-V3.2, GLM-5); ${config.architecture} has none`,
    ];
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
 * HiSparse on the CPU backend: the pools and caches of {@link layOutHiSparse} (f32 digests, on the e4m3
 * grid with `digest_dtype` fp8), the
 * host tier, the Quest selector (digests), the LRU resolver, the attention backend and the
 * worker extension.
 * @throws ConfigError listing every reason the settings cannot work on this model and backend.
 */
export function setupHiSparse(backend: Backend, ctx: KVCacheSetupContext, hs: HiSparseConfig): KVCacheSetup {
  const { config, layout } = ctx.model;
  const bs = ctx.args.blockSize;
  const hostView = backend.hostView?.bind(backend);
  if (config.mla != null) {
    const reasons = modelReasons(backend, config, ctx.args, hs);
    if (reasons.length > 0) throw new ConfigError(reasons);
    return setupDsaHiSparse(backend, ctx, hs);
  }
  const reasons = modelReasons(backend, config, ctx.args, hs);
  if (reasons.length > 0 || hostView === undefined) throw new ConfigError(reasons);
  const lay = layOutHiSparse(backend, ctx, hs, { digestElementBytes: DIGEST_ELEMENT_BYTES.cpu });
  const { numHostBlocks, sparseLayers } = lay;
  const view = (t: Tensor) => hostView(t) as Float32Array;
  const tier = { numSparseLayers: sparseLayers.length, numHostBlocks, blockSize: bs };
  const hostTier = new CpuHostKvCache(
    {
      ...tier,
      numKvHeads: layout.numKvHeads,
      headDim: config.headDim,
      fp8: hs.hostKvCacheDtype === "fp8" ? hostFp8Scales(backend, lay.kvCaches, sparseLayers) : false,
    },
    view,
  );
  const selector = new QuestSelector(
    {
      ...tier,
      layout,
      topk: hs.topk,
      sinkTokens: hs.sinkTokens,
      windowTokens: hs.windowTokens,
      digestTokens: digestTokensFor(hs, ctx.args.blockSize),
      digestDtype: hs.digestDtype,
    },
    view,
  );
  const resolver = new LruHotBufferResolver(hostTier, bs, layout.numKvHeads, sparseLayers.length);
  const attention = new HiSparseAttention(
    backend,
    layout,
    bs,
    { sparseIndex: lay.sparseIndex },
    selector,
    resolver,
  );
  const extension = new HiSparseWorker(backend, bs, lay.kvCaches, sparseLayers, hostTier, resolver);
  return hisparseKVCacheSetup(backend, ctx, hs, lay, attention, extension);
}

/**
 * fp8 host pages: over an fp8 device cache, each sparse layer's device scales (1.0, or the
 * first batch's under --calculate-kv-scales), so a mirror stores the device's own codes and a
 * recall reads back the same values; over an f32 cache, 1.0 (host_kv_cache.ts).
 */
function hostFp8Scales(
  backend: Backend,
  kvCaches: readonly Tensor[],
  sparseLayers: readonly number[],
): NonNullable<HostKvCacheSpec["fp8"]> {
  const scalesOf = (i: number) => backend.kvCacheScales?.(kvCaches[sparseLayers[i]!]!) ?? null;
  if (sparseLayers.length === 0 || scalesOf(0) === null) return {};
  return { scalesOf: (i) => scalesOf(i)! };
}
