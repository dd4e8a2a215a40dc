import { CudaHiSparseAttention } from "../../../attention/sparse/cuda/cuda_hisparse_attention.js";
import { CudaLruResolver } from "../../../attention/sparse/cuda/cuda_hot_buffer.js";
import { CudaQuestSelector } from "../../../attention/sparse/cuda/cuda_quest.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import { BF16_HOST_KV, type HostKvFormat } from "../../../backends/cuda/hisparse_ops.js";
import { ConfigError } from "../../../config/engine_args.js";
import { digestTokensFor } from "../../../config/hisparse_budget.js";
import { type HiSparseConfig, sparseLayersOf } from "../../../config/hisparse_config.js";
import { DEFAULT_KV_CACHE_SCALE } from "../../../core/kv/kv_cache_dtype.js";
import { digestElementBytes } from "../../../core/kv/kv_cache_interface.js";
import type { KVCacheSetup, KVCacheSetupContext } from "../../kv_cache_setup.js";
import { hisparseKVCacheSetup, layOutHiSparse } from "../layout.js";
import { modelReasons } from "../setup.js";
import { CudaHiSparseWorker } from "./cuda_hisparse_worker.js";
import { CudaHostKvTier, defaultHostPoolMaxBytes } from "./cuda_host_tier.js";
import { setupCudaDsaHiSparse } from "./dsa_setup_cuda.js";
import { HiSparseSlotTables, type SlotTablesConfig } from "./slot_tables.js";

/** Shared memory the Quest scoring kernel may use for the group's float64 queries (hsQuestSelect). */
const QUEST_SMEM_LIMIT_BYTES = 48 * 1024;

/**
 * HiSparse on CUDA: the pools and caches of layOutHiSparse (digests of `digest_dtype`, after the slot tables'
 * device bytes; the default host pool capped at DEFAULT_HOST_POOL_MAX_RAM_FRACTION (cuda_host_tier.ts) of the
 * RAM), the slot tables, the pinned host tier, and the device selector, resolver, attention
 * backend and worker extension.
 * @throws ConfigError listing every reason the settings cannot work (model, dtype, memory).
 */
export function setupCudaHiSparse(
  backend: CudaBackend,
  ctx: KVCacheSetupContext,
  hs: HiSparseConfig,
): KVCacheSetup {
  const { config, layout } = ctx.model;
  const bs = ctx.args.blockSize;
  // MLA models: the DSA layout (latent rows, indexer keys, hot rows) has its own set-up.
  if (config.mla != null) return setupCudaDsaHiSparse(backend, ctx, hs);
  const reasons = [...modelReasons(backend, config, ctx.args, hs), ...cudaReasons(ctx, hs)];
  if (reasons.length > 0) throw new ConfigError(reasons);
  // The rank's KV heads (tensor parallelism: its share, or one replicated head).
  const { headDim: D, numHiddenLayers: L } = config;
  const Hkv = layout.numKvHeads;
  const numSparseLayers = sparseLayersOf(hs, L).length;
  const tablesConfig: SlotTablesConfig = {
    numSlots: ctx.args.maxNumSeqs,
    maxPages: Math.ceil(ctx.maxModelLen / bs),
    numHot: hs.deviceBufferTokens / bs,
    numSparseLayers,
    numKvHeads: Hkv,
  };
  const lay = layOutHiSparse(backend, ctx, hs, {
    digestElementBytes: digestElementBytes("cuda", hs.digestDtype),
    reservedDeviceBytes: HiSparseSlotTables.deviceBytes(tablesConfig),
    defaultHostPoolMaxBytes: defaultHostPoolMaxBytes(ctx.args.tensorParallelSize),
  });
  const tables = new HiSparseSlotTables(backend, tablesConfig);
  const tier = { numSparseLayers, numHostBlocks: lay.numHostBlocks, blockSize: bs };
  const hostTier = new CudaHostKvTier(
    backend,
    { ...tier, numKvHeads: Hkv, headDim: D, format: hostKvFormatOf(hs) },
    lay.sparseLayers.map((l) => lay.kvCaches[l]!),
  );
  const selector = new CudaQuestSelector(
    backend,
    {
      ...tier,
      layout,
      topk: hs.topk,
      sinkTokens: hs.sinkTokens,
      windowTokens: hs.windowTokens,
      digestTokens: digestTokensFor(hs, ctx.args.blockSize),
      digestDtype: hs.digestDtype,
    },
    tables,
    hs.benchSelectionOverlap ?? null,
  );
  const resolver = new CudaLruResolver(backend, tables, hostTier, bs);
  const attention = new CudaHiSparseAttention(
    backend,
    layout,
    bs,
    { sparseIndex: lay.sparseIndex },
    selector,
    resolver,
  );
  const extension = new CudaHiSparseWorker(backend, bs, tables, hostTier, [selector]);
  return hisparseKVCacheSetup(backend, ctx, hs, lay, attention, extension);
}

/** The host tier's format of the settings: fp8 e4m3 at the default per-tensor scales, or bf16. */
export function hostKvFormatOf(hs: HiSparseConfig): HostKvFormat {
  return hs.hostKvCacheDtype === "fp8"
    ? { dtype: "fp8", kScale: DEFAULT_KV_CACHE_SCALE, vScale: DEFAULT_KV_CACHE_SCALE }
    : BF16_HOST_KV;
}

/** What the CUDA kernels need of the model and the KV dtype (empty when they can run it). */
function cudaReasons(ctx: KVCacheSetupContext, hs: HiSparseConfig): string[] {
  const { config } = ctx.model;
  const reasons: string[] = [];
  if (ctx.kvCacheDtype !== "bf16")
    reasons.push(`HiSparse on CUDA keeps the KV cache in bf16, not ${ctx.kvCacheDtype}`);
  if (config.headDim % 8 !== 0 || config.headDim > 256)
    reasons.push(
      `HiSparse on CUDA needs a head dim that is a multiple of 8 and at most 256, got ${config.headDim}`,
    );
  if (hs.hostKvCacheDtype === "fp8" && config.headDim % 16 !== 0)
    reasons.push(
      `host_kv_cache_dtype fp8 on CUDA needs a head dim that is a multiple of 16 (16-byte units of e4m3), got ${config.headDim}`,
    );
  // The Quest scoring kernel keeps the group's qPos and qNeg in float32 shared memory (hisparse.h).
  const group = config.numAttentionHeads / config.numKeyValueHeads;
  if (group * config.headDim * 8 > QUEST_SMEM_LIMIT_BYTES)
    reasons.push(
      `HiSparse on CUDA needs (attention heads / kv heads) x head dim x 8 bytes <= ${QUEST_SMEM_LIMIT_BYTES} (the Quest kernel's shared memory), got ${group} x ${config.headDim} x 8`,
    );
  return reasons;
}
