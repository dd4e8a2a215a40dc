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
 *   host block;
 * - a request's prefill (whole, chunked, or a recompute after preemption) attends densely over
 *   all its pages, which stay in the device pool until it decodes (core/hisparse/hybrid_policy.ts:
 *   only decoding requests spill; `maxBlocksPerRequest` admits a request only if its pages fit
 *   the device pool), so the device pool must hold one request's every page beside the sparse
 *   footprint of the others.
 * Pure arithmetic over numbers; every count is floored as the engine floors it.
 */

import { HOST_POOL_DEFAULT_RATIO } from "../config/hisparse_config.js";

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
  /**
   * Knobs that change no figure, kept so that plan refuses what the engine would
   * (`--hisparse-config` min_sparse_tokens, selector, residency; absent = the engine's default).
   */
  unplanned?: { minSparseTokens?: number; selector?: string; residency?: string };
}

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
  /**
   * Requests the device pool holds, one of them in its dense prefill (see {@link maxByDevicePool}):
   * numGpuBlocks >= pagesPerRequest ? floor((numGpuBlocks - pagesPerRequest) / devicePagesPerRequest) + 1 : 0.
   */
  maxByDevice: number;
  /** min(maxByHost, maxByDevice), or 0 when the engine would refuse (refusals). */
  maxConcurrent: number;
  /**
   * Why the engine would refuse these settings (empty when it serves them): at start
   * (worker/hisparse/memory_plan.ts reasons), or every request at admission (its pages do not fit
   * the device pool for the dense prefill: Scheduler.admissionError).
   */
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
  /**
   * Device pages of one request once it decodes sparsely: min(pagesPerRequest,
   * ceil((sink + window + buffer) / blockSize) + 1 (new page)). While it prefills it holds all
   * pagesPerRequest pages instead.
   */
  devicePagesPerRequest: number;
  /**
   * The smallest device pool the engine starts with: ceil((sink + window + buffer) / blockSize) + 1
   * (worker/hisparse/memory_plan.ts; ceil(x) > G exactly when x > G for a whole G).
   */
  minGpuBlocks: number;
  /** Device bytes of one request at steady state (decoding sparsely). */
  deviceBytesPerRequest: number;
  given: HiSparsePoolPlan;
  /**
   * The host pool that lets the most requests run: the most N with
   * N × (P × h + d × m) + (P − d) × m <= budget (P pagesPerRequest, d devicePagesPerRequest,
   * m mainBytesPerBlock, h deviceBytesPerHostBlock: N requests' host pages, their sparse device
   * blocks, and one prefill's dense transient), host pages N × P, but at least
   * ceil(budget / (m + h)) (the engine needs as many host pages as device blocks).
   */
  best: HiSparsePoolPlan;
  /** N of `best` before the minimum-host-pages rule (0 when not even one prefill fits). */
  bestN: number;
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
  const costs: PoolCosts = {
    mainBytesPerBlock,
    deviceBytesPerHostBlock,
    hostBytesPerBlock,
    pagesPerRequest,
    devicePagesPerRequest,
    minGpuBlocks: Math.ceil((h.sinkTokens + h.windowTokens + h.deviceBufferTokens) / bs) + 1,
  };
  // Most requests N with N × (P × h + d × m) + (P − d) × m within the budget (HiSparsePlan.best);
  // the engine also needs at least as many host pages as device blocks.
  const bestN = Math.max(
    0,
    Math.floor(
      (p.kvBudgetBytes - (pagesPerRequest - devicePagesPerRequest) * mainBytesPerBlock) /
        (pagesPerRequest * deviceBytesPerHostBlock + devicePagesPerRequest * mainBytesPerBlock),
    ),
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
    bestN,
  };
}

/** Per-page costs and per-request page counts that {@link poolPlan} splits the budget with. */
interface PoolCosts {
  mainBytesPerBlock: number;
  deviceBytesPerHostBlock: number;
  hostBytesPerBlock: number;
  pagesPerRequest: number;
  devicePagesPerRequest: number;
  minGpuBlocks: number;
}

/** An integer with thousands separators, for refusal sentences ("8,192"). */
const fmt = (n: number): string => n.toLocaleString("en-US");

/**
 * Pool sizes for one host pool, as the engine splits its budget (worker/hisparse/memory_plan.ts
 * planHiSparseMemory), the requests each pool holds, and the engine's refusals, at start
 * (memory_plan.ts reasons) or at admission (Scheduler.admissionError with
 * HybridPolicy.maxBlocksPerRequest: a request's pages must fit the device pool).
 */
function poolPlan(budget: number, hostPoolBytes: number | null, c: PoolCosts): HiSparsePoolPlan {
  let numGpuBlocks: number;
  let numHostBlocks: number;
  if (hostPoolBytes !== null) {
    numHostBlocks = Math.floor(hostPoolBytes / c.hostBytesPerBlock);
    numGpuBlocks = Math.floor((budget - numHostBlocks * c.deviceBytesPerHostBlock) / c.mainBytesPerBlock);
  } else {
    const ratio = HOST_POOL_DEFAULT_RATIO;
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
    refusals.push(
      `the host pool holds ${fmt(numHostBlocks)} pages, fewer than the ${fmt(numGpuBlocks)} device blocks`,
    );
  else if (c.minGpuBlocks > numGpuBlocks)
    refusals.push(
      `the device pool (${fmt(numGpuBlocks)} blocks) cannot hold one sparse request's ${fmt(c.minGpuBlocks)} blocks (sinks, window, hot buffer and a new page)`,
    );
  else if (c.pagesPerRequest > numGpuBlocks)
    refusals.push(
      `the device pool (${fmt(numGpuBlocks)} blocks) cannot hold one request's ${fmt(c.pagesPerRequest)} pages for its dense prefill`,
    );
  const maxByHost = Math.floor(numHostBlocks / c.pagesPerRequest);
  const maxByDevice = maxByDevicePool(numGpuBlocks, c.pagesPerRequest, c.devicePagesPerRequest);
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

/**
 * Requests a device pool of G blocks runs at once, P pages per request, d once it decodes:
 *   G >= P ? floor((G − P) / d) + 1 : 0
 * (floor(G / P) when d = P). The steady state it assumes, from core/sched/scheduler.ts and
 * core/hisparse/hybrid_policy.ts:
 * - one request at a time is in its prefill and holds all P pages (prefill, chunked or a
 *   recompute after preemption, attends densely; pages spill only in the decode phase, and a
 *   recompute covers prompt and generated tokens, so up to the whole context). A waiting request
 *   starts only when the pool has room for its chunk after the pressure handler spilled the
 *   decoding requests' pages, and a running prefill that runs out of blocks preempts the newest
 *   request, so two prefills hold their pages together only when the pool has room for both;
 * - the N − 1 others decode sparsely on d blocks each (sinks, window, hot buffer and the page a
 *   decode step may open before the page that leaves the window is spilled): `on` mode moves them
 *   there after their prefill, `auto` mode when the pool runs short.
 * So the figure is what the engine is sure to run, not always its peak: under pressure it spills
 * the page leaving the window before taking a new block (d − 1 blocks per decoding request), and a
 * fresh prefill holds only its prompt's pages, so it may run a few more (on the CPU engine, G 132,
 * P 40, d 11 with 600-token prompts: 9 planned, 10 at once).
 */
export function maxByDevicePool(
  numGpuBlocks: number,
  pagesPerRequest: number,
  devicePagesPerRequest: number,
): number {
  if (numGpuBlocks < pagesPerRequest) return 0;
  return Math.floor((numGpuBlocks - pagesPerRequest) / devicePagesPerRequest) + 1;
}

/** What the KV budget is derived from when only the GPU's size is given (bytes; utilization a fraction). */
export interface GpuBudgetInput {
  gpuMemBytes: number;
  gpuMemoryUtilization: number;
  weightBytes: number;
  reserveBytes: number;
}

/** Device memory left for the KV cache: total × utilization − weights − reserve (bytes). */
export function kvBudgetFromGpu(o: GpuBudgetInput): number {
  return Math.floor(o.gpuMemBytes * o.gpuMemoryUtilization - o.weightBytes - o.reserveBytes);
}

/** Bytes as GiB with 2 decimals ("0.90 GiB"), for {@link noKvBudgetError}. */
const gib = (b: number): string => `${(b / 2 ** 30).toFixed(2)} GiB`;

/**
 * The error for a GPU budget that leaves nothing for the KV cache ({@link kvBudgetFromGpu} <= 0):
 * one sentence with every term of the subtraction, in GiB with 2 decimals, and the flags that
 * change it, e.g. "no GPU memory is left for the KV cache: 1.00 GiB × 0.9 utilization = 0.90 GiB,
 * minus weights 0.05 GiB and reserve 2.00 GiB, leaves -1.15 GiB; raise --gpu-mem-gib or
 * --gpu-memory-utilization, or lower --reserve-gib".
 */
export function noKvBudgetError(o: GpuBudgetInput): PlanError {
  const usable = o.gpuMemBytes * o.gpuMemoryUtilization;
  return new PlanError(
    `no GPU memory is left for the KV cache: ${gib(o.gpuMemBytes)} × ${o.gpuMemoryUtilization} utilization = ${gib(usable)}, ` +
      `minus weights ${gib(o.weightBytes)} and reserve ${gib(o.reserveBytes)}, leaves ${gib(kvBudgetFromGpu(o))}; ` +
      "raise --gpu-mem-gib or --gpu-memory-utilization, or lower --reserve-gib",
  );
}
