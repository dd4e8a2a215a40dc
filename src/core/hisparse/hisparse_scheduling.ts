import type { HiSparseConfig } from "../../config/hisparse_config.js";
import { BlockPool } from "../kv/block_pool.js";
import type { SchedulerOptions } from "../sched/extensions.js";
import { HiSparseExtension } from "./hisparse_extension.js";
import { HostBlockPool } from "./host_block_pool.js";
import { HybridKVCacheManager } from "./hybrid_kv_cache_manager.js";
import { HybridPolicy } from "./hybrid_policy.js";
import type { HiSparseStats } from "./plan.js";

/** Pool geometry the scheduler side of HiSparse is built for (the worker sized the pools). */
export interface HiSparseGeometry {
  blockSize: number;
  numGpuBlocks: number;
  numHostBlocks: number;
  /** Prefix caching over both tiers (default false). */
  enablePrefixCaching?: boolean;
  /**
   * The worker reads a prefilling request's host-resident pages from the host tier
   * (HiSparseWorkerInfo.prefillReadsHostTier: DSA models), so pages may spill while it prefills
   * (HybridPolicyConfig.spillsPrefill; default false).
   */
  prefillReadsHostTier?: boolean;
  /** Most tokens one step computes for a request (max_num_batched_tokens; needed with prefillReadsHostTier). */
  maxNumBatchedTokens?: number;
}

/** The scheduler side of HiSparse: the objects to give the Scheduler, and their stats. */
export interface HiSparseScheduling {
  kvCacheManager: HybridKVCacheManager;
  policy: HybridPolicy;
  extension: HiSparseExtension;
  /** `{ kvCacheManager, kvPressureHandler: policy, extensions: [extension] }`. */
  schedulerOptions: SchedulerOptions;
  stats(): HiSparseStats;
}

/**
 * Builds the scheduler side of HiSparse for a validated config in mode `auto` or `on`: a
 * {@link HybridKVCacheManager} over fresh device and host pools, the {@link HybridPolicy} as
 * pressure handler, and the "hisparse" {@link HiSparseExtension}.
 * @throws Error for mode `off` (the dense engine needs none of this).
 */
export function createHiSparseScheduling(config: HiSparseConfig, geo: HiSparseGeometry): HiSparseScheduling {
  if (config.mode === "off") throw new Error("HiSparse scheduling is only built for modes auto and on");
  const bs = geo.blockSize;
  const kvCacheManager = new HybridKVCacheManager(
    new BlockPool(geo.numGpuBlocks, geo.enablePrefixCaching ?? false),
    bs,
    {
      hostBlockPool: new HostBlockPool(geo.numHostBlocks),
      numHotBlocks: config.deviceBufferTokens / bs,
      whitelistTokenIds: new Set(config.whitelistTokenIds),
    },
  );
  const policy = new HybridPolicy(kvCacheManager, {
    mode: config.mode,
    blockSize: bs,
    numSinkPages: config.sinkTokens / bs,
    numWindowPages: config.windowTokens / bs,
    minSparseTokens: config.minSparseTokens,
    residency: config.residency,
    spillsPrefill: geo.prefillReadsHostTier ?? false,
    maxChunkTokens: geo.maxNumBatchedTokens ?? geo.numGpuBlocks * bs,
  });
  const extension = new HiSparseExtension(kvCacheManager, policy);
  return {
    kvCacheManager,
    policy,
    extension,
    schedulerOptions: { kvCacheManager, kvPressureHandler: policy, extensions: [extension] },
    stats: () => extension.stats(),
  };
}
