/**
 * The KV memory formula: how many blocks a memory budget buys, how they split between the
 * HiSparse pools, what one request may hold, and why a setting cannot work. Integer arithmetic
 * over the KV cache groups of kv_cache_interface.ts; the worker's set-ups size their pools with it,
 * the scheduler admits with it, and `hisparse plan` prints it. Every count is floored.
 *
 * Dense engine (vLLM determine_num_available_blocks, one block across every group):
 *   numGpuBlocks = floor(budget / Σ groups' page bytes).
 * HiSparse (DESIGN.md §4): every page has a host block; offloadable groups (sparse layers' K/V)
 * live in the device pool ("main pool") while ACTIVE and in the host pool always; the other
 * groups (dense layers' KV, digests, indexer keys) stay on the device for every page, indexed by
 * host block. So
 *   budget − reserved = numGpuBlocks × m + numHostBlocks × h
 * (m: offloadable bytes per block, h: device bytes per host page), with numHostBlocks =
 * floor(hostPoolBytes / host bytes per page), or HOST_POOL_DEFAULT_RATIO × numGpuBlocks when no
 * host pool is given (capped at defaultHostPoolMaxBytes when set).
 */
import { HOST_POOL_DEFAULT_RATIO } from "../../config/hisparse_config.js";
import { groupPageBytes, type KVCacheGroupSpec } from "./kv_cache_interface.js";

/** Blocks that hold `numTokens` tokens: ceil(numTokens / blockSize) (vLLM cdiv). */
export function blocksForTokens(numTokens: number, blockSize: number): number {
  return Math.ceil(numTokens / blockSize);
}

/** Bytes one token adds across every group and layer (per-page bytes, e.g. digests, excluded). */
export function bytesPerToken(groups: readonly KVCacheGroupSpec[]): number {
  return groups.reduce((s, g) => s + g.layers.length * g.spec.bytesPerToken, 0);
}

/** Device bytes of one dense-engine block: one page of every group. */
export function denseBytesPerBlock(groups: readonly KVCacheGroupSpec[], blockSize: number): number {
  return groups.reduce((s, g) => s + groupPageBytes(g, blockSize), 0);
}

/** What one block / page costs under HiSparse, in bytes. */
export interface HiSparseBlockCosts {
  /** Device bytes of one main-pool block: a page of every offloadable group. */
  mainBytesPerBlock: number;
  /** Host bytes of one host block: the same offloadable groups. */
  hostBytesPerBlock: number;
  /** Device bytes each host page costs: a page of every group that is not offloadable. */
  deviceBytesPerHostBlock: number;
}

/**
 * Per-block costs of the HiSparse layout (kv_cache_interface.ts hisparseKVCacheGroups).
 * @param hostElementBytes bytes per K/V element of host pages (`host_kv_cache_dtype`: 1 for fp8,
 *   per-tensor scales add none); absent: the device pool's, so a host block costs what a device
 *   block does.
 */
export function hisparseBlockCosts(
  groups: readonly KVCacheGroupSpec[],
  blockSize: number,
  hostElementBytes?: number,
): HiSparseBlockCosts {
  let offloadable = 0;
  let host = 0;
  let resident = 0;
  for (const g of groups) {
    const bytes = groupPageBytes(g, blockSize);
    if (!g.offloadable) {
      resident += bytes;
      continue;
    }
    offloadable += bytes;
    host += hostElementBytes === undefined ? bytes : (bytes / g.spec.elementBytes) * hostElementBytes;
  }
  return {
    mainBytesPerBlock: offloadable,
    hostBytesPerBlock: host,
    deviceBytesPerHostBlock: resident,
  };
}

/**
 * Blocks one sparse request holds on the device at least: its sink pages, window, hot buffer
 * (tokens, each a whole number of pages: validateHiSparseConfig) and the page a decode step may
 * open: ceil((sink + window + buffer) / blockSize) + 1. The HiSparse device pool must hold it.
 */
export function sparseRequestMinBlocks(
  c: { sinkTokens: number; windowTokens: number; deviceBufferTokens: number },
  blockSize: number,
): number {
  return blocksForTokens(c.sinkTokens + c.windowTokens + c.deviceBufferTokens, blockSize) + 1;
}

/** Why a setting cannot work, with the numbers (kv_refusals.ts words them). */
export type KVRefusal =
  /** Dense: the budget holds no block. */
  | { kind: "no_block"; bytesPerBlock: number }
  /** HiSparse: nothing is left for the main pool after the host pages' device costs. */
  | { kind: "no_device_block"; numHostBlocks: number }
  /** HiSparse: every device page has a host copy, so the host pool must hold the device pool. */
  | {
      kind: "host_pool_below_device_pool";
      numHostBlocks: number;
      numGpuBlocks: number;
      minHostPoolBytes: number;
    }
  /** HiSparse: the main pool cannot hold one sparse request ({@link sparseRequestMinBlocks}). */
  | { kind: "below_sparse_minimum"; numGpuBlocks: number; minGpuBlocks: number }
  /** Admission: one request's pages exceed what it may hold ({@link maxBlocksPerRequest}). */
  | {
      kind: "request_exceeds_pool";
      numGpuBlocks: number;
      /** HiSparse's host pool, or null for the dense engine. */
      numHostBlocks: number | null;
      blocksPerRequest: number;
      /** Device blocks a streaming prefill holds ({@link streamingPrefillBlocks}), when prefills stream. */
      streamingBlocks?: number;
    };

/** The HiSparse half of {@link KVMemoryInput}. */
export interface HiSparsePoolInput {
  /**
   * `--host-pool-gib` in bytes; null: the default, {@link defaultHostPoolBytes} when given, else
   * HOST_POOL_DEFAULT_RATIO × the device pool's pages.
   */
  hostPoolBytes: number | null;
  /** The default host pool in bytes (kv_concurrency.ts defaultHostPoolBytes; absent: the device ratio). */
  defaultHostPoolBytes?: number;
  /** Largest default host pool in bytes (CUDA: a share of the RAM, the host tier is pinned). */
  defaultHostPoolMaxBytes?: number;
  /** {@link sparseRequestMinBlocks} of the settings. */
  minGpuBlocks: number;
  /** Bytes per K/V element of host pages (fp8 host pages: 1); absent: the device pool's. */
  hostElementBytes?: number;
}

/** Everything the pools are sized from. */
export interface KVMemoryInput {
  /** The layout: modelKVCacheGroups (dense) or hisparseKVCacheGroups (HiSparse). */
  groups: readonly KVCacheGroupSpec[];
  blockSize: number;
  /** Device bytes for the KV cache (after weights and workspace). */
  deviceBudgetBytes: number;
  /** Device bytes taken out of the budget before the pools (CUDA HiSparse: its slot tables). */
  reservedDeviceBytes?: number;
  /** `--num-gpu-blocks-override`: the device pool's size, whatever the budget. */
  numGpuBlocksOverride?: number;
  /** HiSparse pools; absent for the dense engine. */
  hisparse?: HiSparsePoolInput;
}

/** The pools' sizes and what one block costs. */
export interface KVMemorySizing {
  numGpuBlocks: number;
  /** Device bytes of one device-pool block (HiSparse: the offloadable groups only). */
  bytesPerBlock: number;
  /** HiSparse host pool and per-page costs, or null for the dense engine. */
  host: {
    numHostBlocks: number;
    /** numHostBlocks × hostBytesPerBlock (at most the given host pool). */
    hostPoolBytes: number;
    hostBytesPerBlock: number;
    deviceBytesPerHostBlock: number;
  } | null;
  /** Why the engine cannot start with these pools (empty when it can). */
  refusals: KVRefusal[];
}

/**
 * Sizes the device pool, and with `hisparse` the host pool (module comment). Refusals: dense, no
 * block; HiSparse, no device block, or else a host pool smaller than the device pool, and
 * (independently) a device pool below one sparse request's minimum.
 */
export function sizeKVMemory(i: KVMemoryInput): KVMemorySizing {
  const budget = i.deviceBudgetBytes - (i.reservedDeviceBytes ?? 0);
  if (i.hisparse === undefined) {
    const bytesPerBlock = denseBytesPerBlock(i.groups, i.blockSize);
    const numGpuBlocks = i.numGpuBlocksOverride ?? Math.floor(budget / bytesPerBlock);
    const refusals: KVRefusal[] = numGpuBlocks < 1 ? [{ kind: "no_block", bytesPerBlock }] : [];
    return { numGpuBlocks, bytesPerBlock, host: null, refusals };
  }
  const hs = i.hisparse;
  const costs = hisparseBlockCosts(i.groups, i.blockSize, hs.hostElementBytes);
  const hostPoolBytes = hs.hostPoolBytes ?? hs.defaultHostPoolBytes ?? null;
  let pools = splitHiSparse(budget, hostPoolBytes, costs, i.numGpuBlocksOverride);
  const cap = hs.defaultHostPoolMaxBytes;
  if (hs.hostPoolBytes === null && cap !== undefined && pools.numHostBlocks * costs.hostBytesPerBlock > cap)
    pools = splitHiSparse(budget, cap, costs, i.numGpuBlocksOverride);
  const { numGpuBlocks, numHostBlocks } = pools;
  const refusals: KVRefusal[] = [];
  if (numGpuBlocks < 1) refusals.push({ kind: "no_device_block", numHostBlocks });
  else if (numHostBlocks < numGpuBlocks)
    refusals.push({
      kind: "host_pool_below_device_pool",
      numHostBlocks,
      numGpuBlocks,
      minHostPoolBytes: numGpuBlocks * costs.hostBytesPerBlock,
    });
  if (numGpuBlocks >= 1 && hs.minGpuBlocks > numGpuBlocks)
    refusals.push({ kind: "below_sparse_minimum", numGpuBlocks, minGpuBlocks: hs.minGpuBlocks });
  return {
    numGpuBlocks,
    bytesPerBlock: costs.mainBytesPerBlock,
    host: {
      numHostBlocks,
      hostPoolBytes: numHostBlocks * costs.hostBytesPerBlock,
      hostBytesPerBlock: costs.hostBytesPerBlock,
      deviceBytesPerHostBlock: costs.deviceBytesPerHostBlock,
    },
    refusals,
  };
}

/**
 * The HiSparse split of `budget` for one host pool (null: the default ratio); the device pool is
 * never negative.
 */
function splitHiSparse(
  budget: number,
  hostPoolBytes: number | null,
  c: HiSparseBlockCosts,
  numGpuBlocksOverride: number | undefined,
): { numGpuBlocks: number; numHostBlocks: number } {
  let numGpuBlocks: number;
  let numHostBlocks: number;
  if (hostPoolBytes !== null) {
    numHostBlocks = Math.floor(hostPoolBytes / c.hostBytesPerBlock);
    numGpuBlocks =
      numGpuBlocksOverride ??
      Math.floor((budget - numHostBlocks * c.deviceBytesPerHostBlock) / c.mainBytesPerBlock);
  } else {
    numGpuBlocks =
      numGpuBlocksOverride ??
      Math.floor(budget / (c.mainBytesPerBlock + HOST_POOL_DEFAULT_RATIO * c.deviceBytesPerHostBlock));
    numHostBlocks = HOST_POOL_DEFAULT_RATIO * numGpuBlocks;
  }
  return { numGpuBlocks: Math.max(0, numGpuBlocks), numHostBlocks };
}

/** The pools a scheduler admits into: the device pool, and HiSparse's host pool (null when dense). */
export interface KVPools {
  numGpuBlocks: number;
  numHostBlocks: number | null;
}

/**
 * Most blocks one request may ever hold (the scheduler's admission limit): the device pool
 * (dense; with HiSparse too, since a prefill or a recompute attends densely over all its pages),
 * and with HiSparse the host pool (every page has a host block). With `streamingBlocks` (a
 * HiSparse set-up whose prefill reads host pages: {@link streamingPrefillBlocks}) that the device
 * pool holds, the host pool alone: the prefill spills its completed pages as it goes.
 */
export function maxBlocksPerRequest(pools: KVPools, streamingBlocks?: number): number {
  if (pools.numHostBlocks === null) return pools.numGpuBlocks;
  if (prefillStreams(pools.numGpuBlocks, streamingBlocks)) return pools.numHostBlocks;
  return Math.min(pools.numGpuBlocks, pools.numHostBlocks);
}

/**
 * Whether a prefill streams in a device pool of `numGpuBlocks`: prefills can stream
 * (`streamingBlocks` given: {@link streamingPrefillBlocks}) and the pool holds what one keeps.
 * Else a prefill holds all its pages on the device.
 */
export function prefillStreams(numGpuBlocks: number, streamingBlocks: number | undefined): boolean {
  return streamingBlocks !== undefined && streamingBlocks <= numGpuBlocks;
}

/**
 * Pages one prefill chunk of up to `maxChunkTokens` tokens touches at most:
 * ceil(maxChunkTokens / blockSize) + 1 (one more for a chunk that straddles pages).
 */
export function chunkPages(maxChunkTokens: number, blockSize: number): number {
  return blocksForTokens(maxChunkTokens, blockSize) + 1;
}

/** What a streaming prefill's device footprint is computed from (pages and blocks of blockSize tokens). */
export interface StreamingPrefillInput {
  numSinkPages: number;
  numWindowPages: number;
  /** Blocks of one request's hot buffer (device_buffer_tokens / blockSize). */
  numHotBlocks: number;
  /** Most tokens one step computes for a request (max_num_batched_tokens). */
  maxChunkTokens: number;
  blockSize: number;
}

/**
 * Device blocks a streaming prefill (HiSparse, a set-up whose prefill reads host pages: DSA
 * models) holds at most beside pages it could spill: its sinks and window, the chunk whose
 * mirrors are in flight and the next ({@link chunkPages} each), and the hot buffer its first
 * spill takes (core/hisparse/hybrid_policy.ts and `hisparse plan` both count it here).
 */
export function streamingPrefillBlocks(o: StreamingPrefillInput): number {
  return o.numSinkPages + o.numWindowPages + 2 * chunkPages(o.maxChunkTokens, o.blockSize) + o.numHotBlocks;
}

/**
 * {@link streamingPrefillBlocks} from HiSparse settings (tokens, each a whole number of pages:
 * validateHiSparseConfig) and the step's token budget (max_num_batched_tokens).
 */
export function streamingPrefillBlocksOf(
  c: { sinkTokens: number; windowTokens: number; deviceBufferTokens: number },
  blockSize: number,
  maxChunkTokens: number,
): number {
  return streamingPrefillBlocks({
    numSinkPages: c.sinkTokens / blockSize,
    numWindowPages: c.windowTokens / blockSize,
    numHotBlocks: c.deviceBufferTokens / blockSize,
    maxChunkTokens,
    blockSize,
  });
}

/**
 * Which pools cannot hold one request of `numTokens` tokens (both false when it fits); with
 * `streamingBlocks` ({@link streamingPrefillBlocks}) that the device pool holds, never the device pool.
 */
export function poolsTooSmall(
  pools: KVPools,
  numTokens: number,
  blockSize: number,
  streamingBlocks?: number,
): { device: boolean; host: boolean } {
  const need = blocksForTokens(numTokens, blockSize);
  return {
    device: !prefillStreams(pools.numGpuBlocks, streamingBlocks) && pools.numGpuBlocks < need,
    host: pools.numHostBlocks !== null && pools.numHostBlocks < need,
  };
}

/**
 * The admission refusal of a request of `numTokens` tokens (its pages exceed
 * {@link maxBlocksPerRequest}), or null when it is admitted.
 */
export function admissionRefusal(
  pools: KVPools,
  numTokens: number,
  blockSize: number,
  streamingBlocks?: number,
): KVRefusal | null {
  const blocksPerRequest = blocksForTokens(numTokens, blockSize);
  return blocksPerRequest > maxBlocksPerRequest(pools, streamingBlocks)
    ? { kind: "request_exceeds_pool", ...pools, blocksPerRequest, streamingBlocks }
    : null;
}
