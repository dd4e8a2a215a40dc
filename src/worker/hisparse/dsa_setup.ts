/**
 * Hybrid HiSparse for DSA models on the CPU backend (issue 15): the latent rows of the sparse
 * layers in the main pool (offloadable) with a host tier of rows, the indexer keys (and the
 * latent rows of any dense layer) indexed by host block on the device, the `dsa` selector, the
 * row resolver, the DSA attention backend and the same worker extension as Quest's.
 */
import { DensePagedAttention } from "../../attention/backend.js";
import { DsaSelector, LruHotRowResolver, SelectionOverlap } from "../../attention/sparse/dsa.js";
import { DsaHiSparseAttention } from "../../attention/sparse/dsa_attention.js";
import type { Backend, Tensor } from "../../backends/backend.js";
import { ConfigError } from "../../config/engine_args.js";
import type { HiSparseConfig } from "../../config/hisparse_config.js";
import { dsaHiSparseConfig } from "../../config/hisparse_dsa.js";
import { indexerSourceLayer } from "../../config/mla_config.js";
import type { ModelConfig } from "../../config/model_config.js";
import type { RequestId } from "../../core/ids.js";
import { DIGEST_ELEMENT_BYTES } from "../../core/kv/kv_cache_interface.js";
import { allocateIndexerKeyCaches, type KVCacheSetup, type KVCacheSetupContext } from "../kv_cache_setup.js";
import { HiSparseWorker } from "./hisparse_worker.js";
import { CpuHostRowCache } from "./host_row_cache.js";
import { hisparseKVCacheSetup, layOutHiSparse } from "./layout.js";

/**
 * The settings a DSA model runs HiSparse with (config/hisparse_dsa.ts) and the reasons they
 * cannot work, or null for a model without a DSA indexer.
 */
export function dsaSettingsOf(
  config: ModelConfig,
  ctx: Pick<KVCacheSetupContext, "args">,
  hs: HiSparseConfig,
): { config: HiSparseConfig; reasons: string[] } | null {
  const indexer = config.mla?.indexer ?? null;
  if (indexer === null) return null;
  return dsaHiSparseConfig(hs, {
    indexer,
    blockSize: ctx.args.blockSize,
    enablePrefixCaching: ctx.args.enablePrefixCaching,
    numLayers: config.numHiddenLayers,
    vocabSize: config.vocabSize,
    architecture: config.architecture,
  });
}

/**
 * HiSparse for a DSA model on a backend with MLA ops and host views (the CPU backend).
 * @throws ConfigError listing every reason the settings cannot work on this model and backend.
 */
export function setupDsaHiSparse(
  backend: Backend,
  ctx: KVCacheSetupContext,
  hs: HiSparseConfig,
): KVCacheSetup {
  const { config, layout } = ctx.model;
  const bs = ctx.args.blockSize;
  const dsa = dsaSettingsOf(config, ctx, hs);
  const hostView = backend.hostView?.bind(backend);
  const reasons = dsa === null ? ["the model has no DSA indexer"] : [...dsa.reasons];
  if (backend.mla === undefined || hostView === undefined)
    reasons.push(
      `--enable-hybrid-sparse ${hs.mode} for DSA models needs MLA ops with host views, which the ${backend.name} backend does not have yet (use --device cpu, or --enable-hybrid-sparse off)`,
    );
  if (reasons.length > 0 || dsa === null || hostView === undefined) throw new ConfigError(reasons);
  const eff = dsa.config;
  const lay = layOutHiSparse(backend, ctx, eff, {
    digestElementBytes: DIGEST_ELEMENT_BYTES.cpu,
    prefillReadsHostTier: true,
  });
  const { numHostBlocks, sparseLayers } = lay;
  const mla = config.mla!;
  const indexerKeyCaches = allocateIndexerKeyCaches(backend, lay.groups, {
    numLayers: config.numHiddenLayers,
    blockSize: bs,
    dtype: ctx.kvCacheDtype,
    numBlocksOf: () => numHostBlocks,
  })!;
  const hostTier = new CpuHostRowCache(
    {
      numSparseLayers: sparseLayers.length,
      numHostBlocks,
      blockSize: bs,
      rowWidth: mla.kvLoraRank + mla.qkRopeHeadDim,
    },
    (t: Tensor) => hostView(t) as Float32Array,
    (n, b, w) => backend.mla!.allocatePagedRows(n, b, w, "f32"),
  );
  const resolver = new LruHotRowResolver(hostTier, bs);
  const overlap =
    ctx.benchmark === undefined
      ? null
      : new SelectionOverlap(ctx.benchmark.selectionOverlap, ctx.benchmark.seed);
  const selector = new DsaSelector((t: Tensor) => hostView(t) as Int32Array, overlap);
  const sourceLayer = Array.from({ length: config.numHiddenLayers }, (_, l) =>
    indexerSourceLayer(mla.indexer!, l),
  );
  const attention = new DsaHiSparseAttention(
    backend,
    bs,
    { sparseIndex: lay.sparseIndex, sourceLayer },
    selector,
    resolver,
    hostTier.tensors,
  );
  const hotState = {
    forget: (id: RequestId) => {
      resolver.forget(id);
      selector.forget(id);
    },
    takeCounters: () => resolver.takeCounters(),
    get numSparsePages() {
      return resolver.numSparsePages;
    },
  };
  const extension = new HiSparseWorker(backend, bs, lay.kvCaches, sparseLayers, hostTier, hotState);
  const gqa = new DensePagedAttention(backend, layout, bs);
  const setup = hisparseKVCacheSetup(backend, ctx, eff, lay, gqa, extension);
  return {
    ...setup,
    mla: { attention, indexerKeyCaches },
    info: { ...setup.info, hisparse: { ...setup.info.hisparse!, config: eff, prefillReadsHostTier: true } },
    dispose: () => {
      setup.dispose();
      for (const t of indexerKeyCaches) if (t !== null) backend.free(t);
      for (const t of hostTier.tensors) backend.free(t);
    },
  };
}
