/**
 * Hybrid HiSparse for DSA models on the CUDA backend (issue 15), the device twin of
 * dsa_setup.ts (same layout, sizing and settings: layOutHiSparse, dsaSettingsOf): the sparse
 * layers' latent rows in the main pool (offloadable) with a pinned host tier of rows, the indexer
 * keys (and the latent rows of any dense layer) indexed by host block on the device for the whole
 * history, the slot tables with a row LRU per (request, indexer), the device row resolver, the
 * DSA attention backend and the same worker extension as Quest's on CUDA (eager mirrors, graphs).
 */
import { DensePagedAttention } from "../../../attention/backend.js";
import {
  CudaDsaHiSparseAttention,
  type CudaDsaLayerPlan,
  type DeviceSelectionRewrite,
} from "../../../attention/sparse/cuda/cuda_dsa_attention.js";
import { CudaLruRowResolver } from "../../../attention/sparse/cuda/cuda_hot_rows.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import { rowSelectionOverlap, type SelectionOverlapState } from "../../../backends/cuda/hisparse_rows_ops.js";
import { CudaTensor } from "../../../backends/cuda/tensor.js";
import { ConfigError } from "../../../config/engine_args.js";
import { type HiSparseConfig, sparseLayersOf } from "../../../config/hisparse_config.js";
import { indexerSourceLayer, type MlaConfig } from "../../../config/mla_config.js";
import { digestElementBytes } from "../../../core/kv/kv_cache_interface.js";
import {
  allocateIndexerKeyCaches,
  type KVCacheSetup,
  type KVCacheSetupContext,
} from "../../kv_cache_setup.js";
import { dsaSettingsOf } from "../dsa_setup.js";
import { type HiSparseLayout, hisparseKVCacheSetup, layOutHiSparse } from "../layout.js";
import { CudaHiSparseWorker } from "./cuda_hisparse_worker.js";
import { CudaHostKvTier, defaultHostPoolMaxBytes } from "./cuda_host_tier.js";
import { HiSparseSlotTables, type SlotTablesConfig } from "./slot_tables.js";

/** hsRowResolve's bounds (native/kernels/hisparse_rows.cu kMaxTopk, kMaxHotRows). */
export const ROW_RESOLVE_LIMITS = { maxTopk: 8192, maxHotRows: 16384 } as const;

/** Bytes of one bf16 element. */
const BF16_BYTES = 2;

/**
 * The layers' plan: index among the sparse layers, the indexer (full layer) of each layer, and
 * that indexer's index among the sparse layers' indexers (the LRU lane of hsRowResolve).
 */
export function dsaLayerPlan(
  mla: MlaConfig,
  numLayers: number,
  sparseIndex: readonly number[],
): CudaDsaLayerPlan {
  const indexer = mla.indexer!;
  const sourceLayer = Array.from({ length: numLayers }, (_, l) => indexerSourceLayer(indexer, l));
  const sources: number[] = [];
  for (let l = 0; l < numLayers; l++)
    if (sparseIndex[l]! >= 0 && !sources.includes(sourceLayer[l]!)) sources.push(sourceLayer[l]!);
  const sourceIndex = sourceLayer.map((s, l) => (sparseIndex[l]! >= 0 ? sources.indexOf(s) : -1));
  return { sparseIndex, sourceLayer, sourceIndex };
}

/** What the CUDA row kernels need of the model, the settings and the KV dtype (empty when they can run it). */
export function cudaDsaReasons(ctx: KVCacheSetupContext, eff: HiSparseConfig): string[] {
  const mla = ctx.model.config.mla!;
  const row = mla.kvLoraRank + mla.qkRopeHeadDim;
  const reasons: string[] = [];
  if (ctx.kvCacheDtype !== "bf16")
    reasons.push(`HiSparse for DSA models on CUDA keeps the latent rows in bf16, not ${ctx.kvCacheDtype}`);
  if (row % 16 !== 0)
    reasons.push(
      `HiSparse for DSA models on CUDA needs kv_lora_rank + qk_rope_head_dim to be a multiple of 16 (16-byte row copies and page mirrors), got ${row}`,
    );
  if (eff.topk > ROW_RESOLVE_LIMITS.maxTopk)
    reasons.push(
      `HiSparse for DSA models on CUDA takes index_topk <= ${ROW_RESOLVE_LIMITS.maxTopk}, got ${eff.topk}`,
    );
  if (eff.deviceBufferTokens > ROW_RESOLVE_LIMITS.maxHotRows)
    reasons.push(
      `HiSparse for DSA models on CUDA takes device_buffer_tokens <= ${ROW_RESOLVE_LIMITS.maxHotRows} (the resolver's shared memory), got ${eff.deviceBufferTokens}`,
    );
  return reasons;
}

/**
 * HiSparse for a DSA model on CUDA.
 * @throws ConfigError listing every reason the settings cannot work (model, settings, dtype, memory).
 */
export function setupCudaDsaHiSparse(
  backend: CudaBackend,
  ctx: KVCacheSetupContext,
  hs: HiSparseConfig,
): KVCacheSetup {
  const { config, layout } = ctx.model;
  const bs = ctx.args.blockSize;
  const dsa = dsaSettingsOf(config, ctx, hs);
  if (dsa === null)
    throw new ConfigError([
      `Hybrid HiSparse runs multi-head latent attention models only with a DSA indexer (DeepSeek-V3.2, GLM-5): ${config.architecture} has none; use --enable-hybrid-sparse off`,
    ]);
  const eff = dsa.config;
  const reasons = [...dsa.reasons, ...cudaDsaReasons(ctx, eff)];
  if (reasons.length > 0) throw new ConfigError(reasons);
  const mla = config.mla!;
  const L = config.numHiddenLayers;
  const numHot = eff.deviceBufferTokens / bs;
  // The same sparse layers as layOutHiSparse's (every layer not in dense_layers, ascending).
  const sparseLayers = sparseLayersOf(eff, L);
  const sparseIndex = new Array<number>(L).fill(-1);
  sparseLayers.forEach((l, i) => {
    sparseIndex[l] = i;
  });
  const layers = dsaLayerPlan(mla, L, sparseIndex);
  const numSources = Math.max(1, new Set(layers.sourceIndex.filter((s) => s >= 0)).size);
  const tablesConfig: SlotTablesConfig = {
    numSlots: ctx.args.maxNumSeqs,
    maxPages: Math.ceil(ctx.maxModelLen / bs),
    numHot,
    numSparseLayers: sparseLayers.length,
    numKvHeads: 1,
    lruShape: [numSources, numHot * bs],
  };
  const lay = layOutHiSparse(backend, ctx, eff, {
    digestElementBytes: digestElementBytes("cuda", eff.digestDtype),
    reservedDeviceBytes: HiSparseSlotTables.deviceBytes(tablesConfig),
    defaultHostPoolMaxBytes: defaultHostPoolMaxBytes(ctx.args.tensorParallelSize),
    prefillReadsHostTier: true,
  });
  return assemble(backend, ctx, eff, lay, layers, tablesConfig, layout);
}

/** The tables, host tier, resolver, attention backend and worker around a laid-out cache. */
function assemble(
  backend: CudaBackend,
  ctx: KVCacheSetupContext,
  eff: HiSparseConfig,
  lay: HiSparseLayout,
  layers: CudaDsaLayerPlan,
  tablesConfig: SlotTablesConfig,
  layout: KVCacheSetupContext["model"]["layout"],
): KVCacheSetup {
  const { config } = ctx.model;
  const mla = config.mla!;
  const bs = ctx.args.blockSize;
  const row = mla.kvLoraRank + mla.qkRopeHeadDim;
  const { numHostBlocks, sparseLayers } = lay;
  const tables = new HiSparseSlotTables(backend, tablesConfig);
  // A latent page [bs, C + R] is laid out as one "kv head" of two halves [2, bs, (C + R) / 2]:
  // the page mirror of the Quest tier then copies it byte for byte into [numHostBlocks, bs, C + R].
  const hostTier = new CudaHostKvTier(
    backend,
    { numSparseLayers: sparseLayers.length, numHostBlocks, blockSize: bs, numKvHeads: 1, headDim: row / 2 },
    sparseLayers.map((l) => lay.kvCaches[l]!),
  );
  const indexerKeyCaches = allocateIndexerKeyCaches(backend, lay.groups, {
    numLayers: config.numHiddenLayers,
    blockSize: bs,
    dtype: ctx.kvCacheDtype,
    numBlocksOf: () => numHostBlocks,
  })!;
  const resolver = new CudaLruRowResolver(
    backend,
    tables,
    hostTier,
    bs,
    lay.numGpuBlocks,
    tablesConfig.numSlots,
    sparseLayers.length,
  );
  const numSources = tablesConfig.lruShape![0]!;
  const overlap = selectionOverlapOf(backend, ctx, eff, tablesConfig.numSlots, numSources);
  // The host tier of each sparse layer as a tensor the MLA attention reads (SpilledRows): pinned
  // memory owned by the tier, never freed through the allocator.
  const hostRows = sparseLayers.map(
    (_, li) => new CudaTensor([numHostBlocks, bs, row], "bf16", hostTier.layerPtr(li), "persistent", -1),
  );
  const attention = new CudaDsaHiSparseAttention(
    backend,
    bs,
    layers,
    resolver,
    hostRows,
    sparseLayers.map((l) => lay.kvCaches[l]!),
    overlap?.rewrite ?? null,
  );
  const bytesPerMiss = (row * BF16_BYTES * Math.max(1, sparseLayers.length)) / numSources;
  const extension = new CudaHiSparseWorker(backend, bs, tables, hostTier, [], bytesPerMiss);
  const gqa = new DensePagedAttention(backend, layout, bs);
  const setup = hisparseKVCacheSetup(backend, ctx, eff, lay, gqa, extension);
  return {
    ...setup,
    mla: { attention, indexerKeyCaches },
    // The CUDA MLA ops read a streaming prefill's spilled pages from the host tier (SpilledRows).
    info: { ...setup.info, hisparse: { ...setup.info.hisparse!, config: eff, prefillReadsHostTier: true } },
    dispose: () => {
      setup.dispose();
      for (const t of indexerKeyCaches) if (t !== null) backend.free(t);
      overlap?.dispose();
      resolver.dispose();
    },
  };
}

/**
 * Benchmarks only: the selection-overlap rewrite (HiSparseConfig.benchSelectionOverlap, or the
 * context's benchmark knob) over previous selections per (slot, indexer); null when not asked.
 */
function selectionOverlapOf(
  backend: CudaBackend,
  ctx: KVCacheSetupContext,
  eff: HiSparseConfig,
  numSlots: number,
  numSources: number,
): { rewrite: DeviceSelectionRewrite; dispose(): void } | null {
  const p = eff.benchSelectionOverlap ?? ctx.benchmark?.selectionOverlap ?? null;
  if (p === null) return null;
  const state: SelectionOverlapState = {
    prevSelection: backend.allocateFilled([numSlots, numSources, eff.topk], "i32", 0xff),
    prevSeqLen: backend.allocateFilled([numSlots, numSources], "i32", 0xff),
    p,
  };
  return {
    rewrite: (source, topk, hs) => rowSelectionOverlap(backend, topk, hs.rows, state, source),
    dispose: () => {
      backend.free(state.prevSelection);
      backend.free(state.prevSeqLen);
    },
  };
}
