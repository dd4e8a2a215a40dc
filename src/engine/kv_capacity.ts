import { ConfigError } from "../config/engine_args.js";
import { poolsTooSmall, prefillStreams } from "../core/kv/kv_memory.js";
import type { Scheduler } from "../core/sched/scheduler.js";

/**
 * The KV cache cannot hold one request of max_model_len tokens, so the engine refuses to start
 * (vLLM's check_enough_kv_cache_memory, vllm/v1/core/kv_cache_utils.py). A {@link ConfigError}
 * with one reason: its message is one sentence naming both numbers and the remedies.
 */
export class KVCacheCapacityError extends ConfigError {
  override name = "KVCacheCapacityError";
  constructor(
    /** The engine's max_model_len (tokens). */
    readonly maxModelLen: number,
    /** KV tokens one request may hold: the scheduler's maxBlocksPerRequest × blockSize. */
    readonly maxNumKvTokens: number,
    message: string,
  ) {
    super([message]);
    // A capacity refusal, not a malformed setting: no "invalid configuration:" prefix.
    this.message = message;
  }
}

/** The pools behind a scheduler, as the worker sized them (WorkerInfo). */
export interface KVCachePools {
  /** Which backend sized the device pool: names the memory flag in the remedy. */
  backend: "cpu" | "cuda";
  /** Blocks of the HiSparse host pool, or null when HiSparse is off. */
  numHostBlocks: number | null;
  /** Device blocks a streaming prefill holds (core/kv/kv_memory.ts streamingPrefillBlocks), when prefills stream. */
  streamingPrefillBlocks?: number;
}

/**
 * Refuses a KV cache that cannot hold one request of max_model_len tokens, as vLLM does at
 * start-up; without this, every long request would be refused one by one at admission. The
 * limit is what the scheduler admits ({@link Scheduler.maxBlocksPerRequest}): the device pool
 * when dense; with HiSparse, the device pool (a prefill attends densely, so all of a request's
 * pages are resident while it prefills; unless prefills stream, `streamingPrefillBlocks`, and the
 * pool holds that) and the host pool (every page has a host block).
 * Like vLLM, the whole max_model_len must fit, ceil(maxModelLen / blockSize) blocks
 * (core/kv/kv_memory.ts poolsTooSmall names the pools at fault).
 * @throws KVCacheCapacityError naming max_model_len, the tokens that fit, the pools at fault
 *   and their flags.
 */
export function checkKVCacheCapacity(scheduler: Scheduler, pools: KVCachePools): void {
  const { maxModelLen } = scheduler.schedulerConfig;
  const bs = scheduler.cacheConfig.blockSize;
  const maxBlocks = scheduler.maxBlocksPerRequest;
  const maxNumKvTokens = maxBlocks * bs;
  if (maxModelLen <= maxNumKvTokens) return;
  const numGpuBlocks = scheduler.kvCacheManager.blockPool.numGpuBlocks;
  const head = `the model's max seq len (${maxModelLen}) is larger than the maximum number of tokens`;
  const memoryFlag = pools.backend === "cuda" ? "--gpu-memory-utilization" : "--cpu-kv-cache-gib";
  const deviceFlags = `${memoryFlag} or --num-gpu-blocks-override`;
  const tail = "or decrease --max-model-len";
  if (pools.numHostBlocks === null) {
    throw new KVCacheCapacityError(
      maxModelLen,
      maxNumKvTokens,
      `${head} that can be stored in the KV cache (${maxNumKvTokens}: ${maxBlocks} blocks of ${bs} tokens); increase ${deviceFlags}, ${tail}`,
    );
  }
  const numHostBlocks = pools.numHostBlocks;
  // Name each pool too small for max_model_len; the device pool unless the host pool alone is.
  const streaming = pools.streamingPrefillBlocks;
  const short = poolsTooSmall({ numGpuBlocks, numHostBlocks }, maxModelLen, bs, streaming);
  const hostOnly = short.host && !short.device;
  const remedies = [
    ...(hostOnly ? [] : [`the device pool (${deviceFlags})`]),
    ...(short.host ? ["the host pool (--host-pool-gib)"] : []),
  ];
  throw new KVCacheCapacityError(
    maxModelLen,
    maxNumKvTokens,
    `${head} one HiSparse request can hold (${maxNumKvTokens}: ${devicePart(numGpuBlocks, streaming)}the host pool of ${numHostBlocks} blocks, ${bs} tokens a block); increase ${remedies.join(" and ")}, ${tail}`,
  );
}

/** What the device pool must hold of one request, for the capacity sentence ("... and " ends it). */
function devicePart(numGpuBlocks: number, streaming: number | undefined): string {
  if (prefillStreams(numGpuBlocks, streaming))
    return `its prefill streams in ${streaming} of the device pool's ${numGpuBlocks} blocks, and its pages must fit `;
  return `its pages must fit the device pool of ${numGpuBlocks} blocks for its dense prefill and `;
}
