import { totalmem } from "node:os";
import { CudaHiSparseAttention } from "../../../attention/sparse/cuda/cuda_hisparse_attention.js";
import { CudaLruResolver } from "../../../attention/sparse/cuda/cuda_hot_buffer.js";
import { CudaQuestSelector } from "../../../attention/sparse/cuda/cuda_quest.js";
import type { DType, QkvLayout } from "../../../backends/backend.js";
import { DTYPE_BYTES } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import { ConfigError, type EngineArgs } from "../../../config/engine_args.js";
import { type HiSparseConfig, sparseLayersOf } from "../../../config/hisparse_config.js";
import type { ModelConfig } from "../../../config/model_config.js";
import { planHiSparseMemory } from "../memory_plan.js";
import { allocateKvCaches, type HiSparseSetup, modelReasons } from "../setup.js";
import { CudaHiSparseWorker } from "./cuda_hisparse_worker.js";
import { CudaHostKvTier } from "./cuda_host_tier.js";
import { HiSparseSlotTables, type SlotTablesConfig } from "./slot_tables.js";

/** Bytes of a bf16 digest element (CudaQuestSelector). */
const DIGEST_BF16_BYTES = 2;
/**
 * Largest share of the machine's RAM that the default host pool (no --host-pool-gib) pins. The
 * default of the memory plan (HOST_POOL_DEFAULT_RATIO x the device pool's pages) would ask a GPU
 * with more device memory than the host has RAM for more pinned memory than exists.
 */
export const DEFAULT_HOST_POOL_MAX_RAM_FRACTION = 0.5;

/** Shared memory the Quest scoring kernel may use for the group's float64 queries (hsQuestSelect). */
const QUEST_SMEM_LIMIT_BYTES = 48 * 1024;

/**
 * setupHiSparse on CUDA: sizes the pools as the CPU path does (worker/hisparse/memory_plan.ts,
 * with bf16 digests and after the slot tables' device bytes), allocates the main pool, the
 * dense layers' host-block-indexed KV, the digests, the slot tables and the pinned host tier,
 * and builds the device selector, resolver, attention backend and worker extension.
 * @param maxModelLen the engine's max model length (sizes the per-request tables).
 * @throws ConfigError listing every reason the settings cannot work (model, dtype, memory).
 */
export function setupCudaHiSparse(
  backend: CudaBackend,
  model: { config: ModelConfig; layout: QkvLayout },
  args: EngineArgs,
  hs: HiSparseConfig,
  kvCacheDtype: DType,
  deviceBudgetBytes: number,
  maxModelLen: number,
): HiSparseSetup {
  const { config, layout } = model;
  const bs = args.blockSize;
  const reasons = modelReasons(backend, config, args, hs);
  if (kvCacheDtype !== "bf16")
    reasons.push(`HiSparse on CUDA keeps the KV cache in bf16, not ${kvCacheDtype}`);
  if (config.headDim % 8 !== 0 || config.headDim > 256)
    reasons.push(
      `HiSparse on CUDA needs a head dim that is a multiple of 8 and at most 256, got ${config.headDim}`,
    );
  // The Quest scoring kernel keeps the group's queries in float64 shared memory (hisparse.h).
  const group = config.numAttentionHeads / config.numKeyValueHeads;
  if (group * config.headDim * 8 > QUEST_SMEM_LIMIT_BYTES)
    reasons.push(
      `HiSparse on CUDA needs (attention heads / kv heads) x head dim x 8 bytes <= ${QUEST_SMEM_LIMIT_BYTES} (the Quest kernel's shared memory), got ${group} x ${config.headDim} x 8`,
    );
  if (reasons.length > 0) throw new ConfigError(reasons);
  const { numKeyValueHeads: Hkv, headDim: D, numHiddenLayers: L } = config;
  const sparseLayers = sparseLayersOf(hs, L);
  const tablesConfig: SlotTablesConfig = {
    numSlots: args.maxNumSeqs,
    maxPages: Math.ceil(maxModelLen / bs),
    numHot: hs.deviceBufferTokens / bs,
    numSparseLayers: sparseLayers.length,
    numKvHeads: Hkv,
  };
  const planFor = (config: HiSparseConfig) =>
    planHiSparseMemory({
      config,
      blockSize: bs,
      numLayers: L,
      numKvHeads: Hkv,
      headDim: D,
      kvElementBytes: DTYPE_BYTES[kvCacheDtype],
      digestElementBytes: DIGEST_BF16_BYTES,
      deviceBudgetBytes: deviceBudgetBytes - HiSparseSlotTables.deviceBytes(tablesConfig),
      numGpuBlocksOverride: args.numGpuBlocksOverride,
    });
  let plan = planFor(hs);
  const ramCap = Math.floor(totalmem() * DEFAULT_HOST_POOL_MAX_RAM_FRACTION);
  if (hs.hostPoolBytes === null && plan.numHostBlocks * plan.hostBytesPerBlock > ramCap)
    plan = planFor({ ...hs, hostPoolBytes: ramCap });
  if (plan.reasons.length > 0) throw new ConfigError(plan.reasons);
  const denseLayers = [...hs.denseLayers].sort((a, b) => a - b);
  const kvCaches = allocateKvCaches(backend, config, bs, kvCacheDtype, sparseLayers, denseLayers, plan);
  const sparseIndex = new Array<number>(L).fill(-1);
  sparseLayers.forEach((l, i) => {
    sparseIndex[l] = i;
  });
  const tables = new HiSparseSlotTables(backend, tablesConfig);
  const hostTier = new CudaHostKvTier(
    backend,
    {
      numSparseLayers: sparseLayers.length,
      numHostBlocks: plan.numHostBlocks,
      blockSize: bs,
      numKvHeads: Hkv,
      headDim: D,
    },
    sparseLayers.map((l) => kvCaches[l]!),
  );
  const selector = new CudaQuestSelector(
    backend,
    {
      layout,
      blockSize: bs,
      numSparseLayers: sparseLayers.length,
      numHostBlocks: plan.numHostBlocks,
      topk: hs.topk,
      sinkTokens: hs.sinkTokens,
      windowTokens: hs.windowTokens,
    },
    tables,
  );
  const resolver = new CudaLruResolver(backend, tables, hostTier, bs);
  const attention = new CudaHiSparseAttention(backend, layout, bs, { sparseIndex }, selector, resolver);
  const extension = new CudaHiSparseWorker(backend, bs, tables, hostTier, [selector]);
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
