import { type HiSparseConfig, HOST_POOL_DEFAULT_RATIO } from "../../config/hisparse_config.js";

/** What sizing the HiSparse pools depends on. */
export interface HiSparseMemoryInput {
  config: HiSparseConfig;
  blockSize: number;
  numLayers: number;
  numKvHeads: number;
  headDim: number;
  /** Bytes per KV element on the device and in the host tier. */
  kvElementBytes: number;
  /** Bytes per digest element: 4 (f32, the CPU selector) unless given; 2 on CUDA (bf16, exact there). */
  digestElementBytes?: number;
  /** Device bytes for KV (main pool, dense-layer tensors, digests), when the pool is not fixed. */
  deviceBudgetBytes: number;
  /** `--num-gpu-blocks-override`. */
  numGpuBlocksOverride?: number;
}

/** Sizes of the HiSparse pools, in blocks, and what one block costs. */
export interface HiSparseMemoryPlan {
  numGpuBlocks: number;
  numHostBlocks: number;
  /** Device bytes of one main-pool block (sparse layers only). */
  mainBytesPerBlock: number;
  /** Device bytes per host block: the page's dense-layer KV and its digests (min and max). */
  deviceBytesPerHostBlock: number;
  /** Host bytes of one host block (every sparse layer's K and V). */
  hostBytesPerBlock: number;
  /** Reasons the plan cannot work (empty when it can). */
  reasons: string[];
}

/**
 * Splits the memory between the pools (DESIGN.md §4; worker/README.md). With dense layers
 * indexed by host block, each host block also costs device memory (its dense-layer KV and its
 * digests), so
 *   budget = numGpuBlocks * mainBytesPerBlock + numHostBlocks * deviceBytesPerHostBlock,
 * with numHostBlocks = hostPoolBytes / hostBytesPerBlock, or HOST_POOL_DEFAULT_RATIO *
 * numGpuBlocks when `--host-pool-gib` is absent. The plan is refused when the device pool has no
 * block, when the host tier holds fewer pages than the device pool (every device page has a host
 * copy), or when the device pool cannot hold one sparse request's minimum (sinks, window and hot
 * buffer).
 */
export function planHiSparseMemory(m: HiSparseMemoryInput): HiSparseMemoryPlan {
  const c = m.config;
  const bs = m.blockSize;
  const numDense = c.denseLayers.length;
  const numSparse = m.numLayers - numDense;
  const layerBlockBytes = 2 * bs * m.numKvHeads * m.headDim * m.kvElementBytes;
  const mainBytesPerBlock = numSparse * layerBlockBytes;
  const digestBytes = m.digestElementBytes ?? 4;
  const deviceBytesPerHostBlock =
    numDense * layerBlockBytes + numSparse * 2 * m.numKvHeads * m.headDim * digestBytes;
  const hostBytesPerBlock = numSparse * layerBlockBytes;
  let numGpuBlocks: number;
  let numHostBlocks: number;
  if (c.hostPoolBytes !== null) {
    numHostBlocks = Math.floor(c.hostPoolBytes / hostBytesPerBlock);
    numGpuBlocks =
      m.numGpuBlocksOverride ??
      Math.floor((m.deviceBudgetBytes - numHostBlocks * deviceBytesPerHostBlock) / mainBytesPerBlock);
  } else {
    numGpuBlocks =
      m.numGpuBlocksOverride ??
      Math.floor(
        m.deviceBudgetBytes / (mainBytesPerBlock + HOST_POOL_DEFAULT_RATIO * deviceBytesPerHostBlock),
      );
    numHostBlocks = HOST_POOL_DEFAULT_RATIO * numGpuBlocks;
  }
  numGpuBlocks = Math.max(0, numGpuBlocks);
  const reasons: string[] = [];
  const gib = (b: number) => (b / 2 ** 30).toFixed(3);
  if (numGpuBlocks < 1)
    reasons.push(
      `no device memory is left for the KV pool after the dense layers and digests of ${numHostBlocks} host pages; lower --host-pool-gib or raise the memory budget`,
    );
  else if (numHostBlocks < numGpuBlocks)
    reasons.push(
      `the host pool holds ${numHostBlocks} pages, fewer than the ${numGpuBlocks} device blocks; every page has a host copy, so raise --host-pool-gib to at least ${gib(numGpuBlocks * hostBytesPerBlock)}`,
    );
  const minBlocks = (c.sinkTokens + c.windowTokens + c.deviceBufferTokens) / bs + 1;
  if (numGpuBlocks >= 1 && minBlocks > numGpuBlocks)
    reasons.push(
      `the device pool (${numGpuBlocks} blocks) cannot hold one sparse request's minimum of ${minBlocks} blocks (sinks, window, hot buffer and a new page); lower device_buffer_tokens or raise the memory budget`,
    );
  return {
    numGpuBlocks,
    numHostBlocks,
    mainBytesPerBlock,
    deviceBytesPerHostBlock,
    hostBytesPerBlock,
    reasons,
  };
}
