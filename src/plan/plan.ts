/**
 * `hisparse plan`: how many requests of a given context fit on one GPU, dense vs Hybrid HiSparse,
 * from the model's KV geometry alone (no GPU needed). The arithmetic is the engine's own sizing:
 * dense = worker/worker.ts (one block = blockSize tokens of every layer's K and V); HiSparse =
 * the HiSparse memory plan of DESIGN.md §4 as worker/hisparse/memory_plan.ts sizes it:
 * - the device pool ("main pool") holds the sparse layers only: per request, the sink pages, the
 *   recent window, the tail page and the hot buffer (`device_buffer_tokens`, default 2 × topk);
 * - every page of every request has a host block (all sparse layers' K and V, in the host pool
 *   `--host-pool-gib`), and on the device its dense layers' K and V (default: the first two
 *   layers) and its Quest digest (per sparse layer and KV head, min and max of the keys: 2 ×
 *   headDim values, f32 on the CPU engine, bf16 on CUDA: 2/blockSize of K's size in bf16);
 * - so the device budget = gpu blocks × main bytes per block + host blocks × device bytes per
 *   host block.
 * Pure arithmetic over numbers; every count is floored as the engine floors it.
 */

/** The model geometry the plan needs (config/model_config.ts ModelConfig satisfies it). */
export interface PlanModel {
  numHiddenLayers: number;
  numKeyValueHeads: number;
  headDim: number;
}

/** HiSparse knobs (config/hisparse_config.ts names, tokens). */
export interface PlanHiSparse {
  topk: number;
  deviceBufferTokens: number;
  sinkTokens: number;
  windowTokens: number;
  denseLayers: readonly number[];
  /** Host pool in bytes; null = the engine's default, HOST_POOL_DEFAULT_RATIO × the device pool's pages. */
  hostPoolBytes: number | null;
}

/** Defaults of config/hisparse_config.ts (DEFAULT_TOPK, DEFAULT_SINK_TOKENS, ...). */
export const PLAN_HISPARSE_DEFAULTS = {
  topk: 2048,
  bufferFactor: 2,
  sinkTokens: 64,
  windowTokens: 256,
  denseLayers: [0, 1] as readonly number[],
  /** Host pages per device page when no host pool size is given (SGLang HiCache's ratio 2). */
  hostPoolDefaultRatio: 2,
} as const;

/** Bytes of one digest value by default: the CPU engine keeps digests in f32. */
export const DIGEST_ELEMENT_BYTES = 4;
/** Bytes of one digest value on the CUDA engine (bf16, exact there: the keys are bf16); `hisparse plan` uses it. */
export const CUDA_DIGEST_ELEMENT_BYTES = 2;

/** Everything the plan is computed from. */
export interface PlanInput {
  model: PlanModel;
  /** Device bytes for the KV cache (after weights and workspace). */
  kvBudgetBytes: number;
  /** Tokens per request (prompt + output). */
  contextTokens: number;
  blockSize: number;
  /** Bytes per KV element (2 for bf16/f16, 4 for f32). */
  kvElementBytes: number;
  hisparse: PlanHiSparse;
  /** Bytes per digest element; default DIGEST_ELEMENT_BYTES (the CUDA engine keeps bf16 digests: 2). */
  digestElementBytes?: number;
}

/** The dense engine's figures. */
export interface DensePlan {
  /** 2 × layers × kvHeads × headDim × element bytes. */
  kvBytesPerToken: number;
  kvBytesPerBlock: number;
  numGpuBlocks: number;
  pagesPerRequest: number;
  /** floor(numGpuBlocks / pagesPerRequest): what the scheduler admits at once. */
  maxConcurrent: number;
  /** floor(budget / (context × bytes per token)), the block-free estimate. */
  maxConcurrentUnpaged: number;
}

/** HiSparse's figures for one host pool size. */
export interface HiSparsePoolPlan {
  hostPoolBytes: number;
  numHostBlocks: number;
  numGpuBlocks: number;
  /** Requests the host pool holds: floor(numHostBlocks / pagesPerRequest). */
  maxByHost: number;
  /** Requests the device pool holds: floor(numGpuBlocks / devicePagesPerRequest). */
  maxByDevice: number;
  maxConcurrent: number;
  /** Why the engine would refuse these settings (empty when it starts). */
  refusals: string[];
}

/** The HiSparse plan: per-page costs, the given (or default) host pool, and the best one. */
export interface HiSparsePlan {
  numSparseLayers: number;
  numDenseLayers: number;
  /** Device bytes of one main-pool block: sparse layers' K and V. */
  mainBytesPerBlock: number;
  /** Device bytes per page of any request: its dense layers' K and V plus its digests. */
  deviceBytesPerHostBlock: number;
  /** of which digests */
  digestBytesPerPage: number;
  /** Host bytes per page: every sparse layer's K and V. */
  hostBytesPerBlock: number;
  pagesPerRequest: number;
  /** Device pages of one sparse request: ceil((sink + window + buffer) / blockSize) + 1 (new page). */
  devicePagesPerRequest: number;
  /** Device bytes of one request at steady state. */
  deviceBytesPerRequest: number;
  given: HiSparsePoolPlan;
  /** The host pool that lets the most requests run (each request's pages exactly). */
  best: HiSparsePoolPlan;
}

/** Error for settings that cannot be planned; one sentence for the user. */
export class PlanError extends Error {
  override name = "PlanError";
}

/**
 * Dense figures (the engine without HiSparse).
 * @throws PlanError for a non-positive budget, context or block size.
 */
export function planDense(p: PlanInput): DensePlan {
  if (!(p.kvBudgetBytes > 0))
    throw new PlanError("no GPU memory is left for the KV cache after the weights and reserve");
  if (!(Number.isInteger(p.contextTokens) && p.contextTokens >= 1))
    throw new PlanError(`--context must be a positive integer, got ${p.contextTokens}`);
  if (!(Number.isInteger(p.blockSize) && p.blockSize >= 1))
    throw new PlanError(`--block-size must be a positive integer, got ${p.blockSize}`);
  const m = p.model;
  const kvBytesPerToken = 2 * m.numHiddenLayers * m.numKeyValueHeads * m.headDim * p.kvElementBytes;
  const kvBytesPerBlock = p.blockSize * kvBytesPerToken;
  const numGpuBlocks = Math.floor(p.kvBudgetBytes / kvBytesPerBlock);
  const pagesPerRequest = Math.ceil(p.contextTokens / p.blockSize);
  return {
    kvBytesPerToken,
    kvBytesPerBlock,
    numGpuBlocks,
    pagesPerRequest,
    maxConcurrent: Math.floor(numGpuBlocks / pagesPerRequest),
    maxConcurrentUnpaged: Math.floor(p.kvBudgetBytes / (p.contextTokens * kvBytesPerToken)),
  };
}

/**
 * HiSparse figures.
 * @throws PlanError for dense layers out of range or knobs that are not positive.
 */
export function planHiSparse(p: PlanInput): HiSparsePlan {
  const m = p.model;
  const h = p.hisparse;
  const bs = p.blockSize;
  const L = m.numHiddenLayers;
  if (
    h.denseLayers.some((l) => !Number.isInteger(l) || l < 0 || l >= L) ||
    new Set(h.denseLayers).size !== h.denseLayers.length
  )
    throw new PlanError(
      `dense_layers must be distinct layers in [0, ${L - 1}], got [${h.denseLayers.join(", ")}]`,
    );
  if (h.denseLayers.length === L) throw new PlanError("every layer is dense, so nothing attends sparsely");
  if (!(h.topk > 0 && h.deviceBufferTokens > 0 && h.sinkTokens >= 0 && h.windowTokens >= 0))
    throw new PlanError("topk and device_buffer_tokens must be > 0, sink_tokens and window_tokens >= 0");
  const numDense = h.denseLayers.length;
  const numSparse = L - numDense;
  const layerBlockBytes = 2 * bs * m.numKeyValueHeads * m.headDim * p.kvElementBytes;
  const mainBytesPerBlock = numSparse * layerBlockBytes;
  const digestBytesPerPage =
    numSparse * 2 * m.numKeyValueHeads * m.headDim * (p.digestElementBytes ?? DIGEST_ELEMENT_BYTES);
  const deviceBytesPerHostBlock = numDense * layerBlockBytes + digestBytesPerPage;
  const hostBytesPerBlock = numSparse * layerBlockBytes;
  const pagesPerRequest = Math.ceil(p.contextTokens / bs);
  const devicePagesPerRequest = Math.min(
    pagesPerRequest,
    Math.ceil((h.sinkTokens + h.windowTokens + h.deviceBufferTokens) / bs) + 1,
  );
  const costs = {
    mainBytesPerBlock,
    deviceBytesPerHostBlock,
    hostBytesPerBlock,
    pagesPerRequest,
    devicePagesPerRequest,
  };
  // Most requests N with N × (device pages × main block + pages × device bytes per host block)
  // within the budget; the engine also needs at least as many host pages as device blocks.
  const bestN = Math.floor(
    p.kvBudgetBytes / (pagesPerRequest * deviceBytesPerHostBlock + devicePagesPerRequest * mainBytesPerBlock),
  );
  const minHostBlocks = Math.ceil(p.kvBudgetBytes / (mainBytesPerBlock + deviceBytesPerHostBlock));
  const bestHostBlocks = Math.max(bestN * pagesPerRequest, minHostBlocks);
  return {
    numSparseLayers: numSparse,
    numDenseLayers: numDense,
    digestBytesPerPage,
    ...costs,
    deviceBytesPerRequest:
      devicePagesPerRequest * mainBytesPerBlock + pagesPerRequest * deviceBytesPerHostBlock,
    given: poolPlan(p.kvBudgetBytes, h.hostPoolBytes, costs),
    best: poolPlan(p.kvBudgetBytes, bestHostBlocks * hostBytesPerBlock, costs),
  };
}

/**
 * Pool sizes for one host pool, as the engine splits its budget (worker/hisparse/memory_plan.ts
 * planHiSparseMemory), and the requests each pool holds.
 */
function poolPlan(
  budget: number,
  hostPoolBytes: number | null,
  c: {
    mainBytesPerBlock: number;
    deviceBytesPerHostBlock: number;
    hostBytesPerBlock: number;
    pagesPerRequest: number;
    devicePagesPerRequest: number;
  },
): HiSparsePoolPlan {
  let numGpuBlocks: number;
  let numHostBlocks: number;
  if (hostPoolBytes !== null) {
    numHostBlocks = Math.floor(hostPoolBytes / c.hostBytesPerBlock);
    numGpuBlocks = Math.floor((budget - numHostBlocks * c.deviceBytesPerHostBlock) / c.mainBytesPerBlock);
  } else {
    const ratio = PLAN_HISPARSE_DEFAULTS.hostPoolDefaultRatio;
    numGpuBlocks = Math.floor(budget / (c.mainBytesPerBlock + ratio * c.deviceBytesPerHostBlock));
    numHostBlocks = ratio * numGpuBlocks;
  }
  numGpuBlocks = Math.max(0, numGpuBlocks);
  const refusals: string[] = [];
  if (numGpuBlocks < 1)
    refusals.push(
      "no device memory is left for the KV pool after the dense layers and digests of the host pages",
    );
  else if (numHostBlocks < numGpuBlocks)
    refusals.push(`the host pool holds ${numHostBlocks} pages, fewer than the ${numGpuBlocks} device blocks`);
  else if (c.devicePagesPerRequest > numGpuBlocks)
    refusals.push(
      `the device pool (${numGpuBlocks} blocks) cannot hold one sparse request's ${c.devicePagesPerRequest}`,
    );
  const maxByHost = Math.floor(numHostBlocks / c.pagesPerRequest);
  const maxByDevice = Math.floor(numGpuBlocks / c.devicePagesPerRequest);
  return {
    hostPoolBytes: numHostBlocks * c.hostBytesPerBlock,
    numHostBlocks,
    numGpuBlocks,
    maxByHost,
    maxByDevice,
    maxConcurrent: refusals.length > 0 ? 0 : Math.min(maxByHost, maxByDevice),
    refusals,
  };
}

/** Device memory left for the KV cache: total × utilization − weights − reserve (bytes). */
export function kvBudgetFromGpu(o: {
  gpuMemBytes: number;
  gpuMemoryUtilization: number;
  weightBytes: number;
  reserveBytes: number;
}): number {
  return Math.floor(o.gpuMemBytes * o.gpuMemoryUtilization - o.weightBytes - o.reserveBytes);
}
