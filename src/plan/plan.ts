/**
 * `hisparse plan`: how many requests of a given context fit on one GPU, dense vs Hybrid HiSparse,
 * from the model's KV geometry alone (no GPU needed). Every figure comes from the engine's own
 * KV memory formula (core/kv/kv_memory.ts, which the worker's set-ups size their pools with, and
 * core/kv/kv_concurrency.ts): dense = one block of blockSize tokens of every layer's K and V;
 * HiSparse = the memory split of DESIGN.md §4:
 * - the device pool ("main pool") holds the sparse layers only: per request, the sink pages, the
 *   recent window, the tail page and the hot buffer (`device_buffer_tokens`, default 2 × topk);
 * - every page of every request has a host block (all sparse layers' K and V, in the host pool
 *   `--host-pool-gib`), and on the device its dense layers' K and V (default: the first two
 *   layers) and its Quest digest (per sparse layer, KV head and sub-page of digest_tokens, min and
 *   max of the keys: 2 × headDim values, f32 on the CPU engine, on CUDA `digest_dtype`: bf16 (2 B,
 *   the default) or fp8 (1 B): 2/digest_tokens or 1/digest_tokens of K's size in bf16);
 * - so the device budget = gpu blocks × main bytes per block + host blocks × device bytes per
 *   host block;
 * - a request's prefill (whole, chunked, or a recompute after preemption) attends densely over
 *   all its pages, which stay in the device pool until it decodes (core/hisparse/hybrid_policy.ts:
 *   only decoding requests spill; `maxBlocksPerRequest` admits a request only if its pages fit
 *   the device pool), so the device pool must hold one request's every page beside the sparse
 *   footprint of the others; except with `streamingPrefill` (DSA models, whose MLA attention reads
 *   a prefill's spilled pages from the host tier): a prefill then holds at most
 *   core/kv/kv_memory.ts streamingPrefillBlocks (sinks, window, two chunks, hot buffer), and
 *   only the host pool bounds a request's length.
 * This file checks the inputs, lays the model's KV cache out as the engine does and assembles
 * the formula's answers; it computes no size of its own.
 */

import {
  DEFAULT_DIGEST_DTYPE,
  type DefaultHostPool,
  type DigestDtype,
  type HostKvCacheDtype,
} from "../config/hisparse_config.js";
import { KV_CACHE_DTYPE_BYTES } from "../core/kv/kv_cache_dtype.js";
import {
  digestElementBytes,
  DIGEST_ELEMENT_BYTES as ENGINE_DIGEST_BYTES,
  groupPageBytes,
  hisparseKVCacheGroups,
  type KVCacheGroupSpec,
  type KVModelGeometry,
  type KVStorage,
  modelKVCacheGroups,
} from "../core/kv/kv_cache_interface.js";
import {
  bestHostPool,
  concurrency,
  decodeOnlyConcurrency,
  defaultHostPoolBytes,
  maxByDevicePool,
  prefillDeviceBlocks,
  sparseDevicePagesPerRequest,
  sparseRequestDeviceBytes,
  unpagedConcurrency,
} from "../core/kv/kv_concurrency.js";
import {
  blocksForTokens,
  bytesPerToken,
  hisparseBlockCosts,
  type KVMemorySizing,
  sizeKVMemory,
  sparseRequestMinBlocks,
  streamingPrefillBlocksOf,
} from "../core/kv/kv_memory.js";
import { describeKVRefusal } from "../core/kv/kv_refusals.js";
import { PlanError } from "./plan_error.js";

export { maxByDevicePool };

/**
 * The model geometry the plan needs (config/model_config.ts ModelConfig satisfies it): GQA heads,
 * or an MLA model's latent and DSA indexer dims (`mla`), read by core modelKVCacheGroups.
 */
export type PlanModel = KVModelGeometry;

/** HiSparse knobs (config/hisparse_config.ts names, tokens). */
export interface PlanHiSparse {
  topk: number;
  deviceBufferTokens: number;
  sinkTokens: number;
  windowTokens: number;
  /** Tokens per Quest digest (`digest_tokens`); absent: one digest per page. */
  digestTokens?: number;
  /** `digest_dtype` (config/hisparse_config.ts); absent: DEFAULT_DIGEST_DTYPE (bf16). Sizes CUDA's digests ({@link cudaDigestElementBytes}). */
  digestDtype?: DigestDtype;
  denseLayers: readonly number[];
  /** Host pool in bytes; null = the engine's default, sized by `defaultHostPool`. */
  hostPoolBytes: number | null;
  /**
   * config DefaultHostPool; absent: `device_ratio` (HOST_POOL_DEFAULT_RATIO × the device pool's
   * pages). `max_model_len` (DSA models) is planned with --max-model-len = the plan's context.
   */
  defaultHostPool?: DefaultHostPool;
  /** `host_kv_cache_dtype` (config/hisparse_config.ts): fp8 host pages cost 1 byte an element; absent: auto. */
  hostKvCacheDtype?: HostKvCacheDtype;
  /**
   * Present when a prefill streams its completed pages to the host tier (DSA models: the
   * set-up's prefillReadsHostTier), with the step's token budget (`--max-num-batched-tokens`).
   */
  streamingPrefill?: { maxChunkTokens: number };
  /**
   * Knobs that change no figure, kept so that plan refuses what the engine would
   * (`--hisparse-config` min_sparse_tokens, selector, residency; absent = the engine's default).
   */
  unplanned?: { minSparseTokens?: number; selector?: string; residency?: string };
}

/** Bytes of one digest value by default: the CPU engine keeps digests in f32. */
export const DIGEST_ELEMENT_BYTES: number = ENGINE_DIGEST_BYTES.cpu;
/**
 * Bytes of one digest value on the CUDA engine, which `hisparse plan` plans for: 2 with
 * `digest_dtype` bf16 (the default: exact, the keys are bf16), 1 with fp8 (e4m3 rounded outward).
 */
export function cudaDigestElementBytes(h: Pick<PlanHiSparse, "digestDtype">): number {
  return digestElementBytes("cuda", h.digestDtype ?? DEFAULT_DIGEST_DTYPE);
}

/** Everything the plan is computed from. */
export interface PlanInput {
  model: PlanModel;
  /** Device bytes for the KV cache (after weights and workspace). */
  kvBudgetBytes: number;
  /** Tokens per request (prompt + output). */
  contextTokens: number;
  blockSize: number;
  /** Bytes per KV element (core/kv/kv_cache_dtype.ts KV_CACHE_DTYPE_BYTES: 2 bf16/f16, 4 f32, 1 fp8). */
  kvElementBytes: number;
  /**
   * `--tensor-parallel-size`: the figures are one rank's (its KV budget, its KV heads: GQA heads
   * split over the ranks, MLA latent and indexer rows the same on every rank); default 1.
   */
  tensorParallelSize?: number;
  hisparse: PlanHiSparse;
  /** Bytes per digest element; default DIGEST_ELEMENT_BYTES (the CUDA engine: {@link cudaDigestElementBytes}). */
  digestElementBytes?: number;
}

/** The dense engine's figures. */
export interface DensePlan {
  /** The KV cache groups of one rank (core modelKVCacheGroups): what every figure is summed from. */
  groups: KVCacheGroupSpec[];
  /** Σ groups' layers × bytes per token (GQA: 2 × layers × kvHeads × headDim × element bytes). */
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
   * Requests the device pool holds, one of them in its prefill (see {@link maxByDevicePool}), which
   * holds p = pagesPerRequest blocks (with `streamingPrefill`, min(p, streamingPrefillBlocks) when
   * the pool holds that): numGpuBlocks >= p ? floor((numGpuBlocks - p) / devicePagesPerRequest) + 1 : 0.
   */
  maxByDevice: number;
  /** min(maxByHost, maxByDevice), or 0 when the engine would refuse (refusals). */
  maxConcurrent: number;
  /** Device blocks the prefilling request holds in this pool (core kv_concurrency.ts prefillDeviceBlocks). */
  prefillDeviceBlocks: number;
  /**
   * Why the engine would refuse these settings (empty when it serves them): every reason it
   * refuses to start with (core/kv/kv_memory.ts sizeKVMemory), else why it rejects every request
   * of this context at admission (its pages do not fit the device pool for the dense prefill:
   * Scheduler.admissionError); the facts of core/kv/kv_refusals.ts, without the remedies.
   */
  refusals: string[];
}

/** The HiSparse plan: per-page costs, the given (or default) host pool, and the best one. */
export interface HiSparsePlan {
  /** One rank's groups as HiSparse lays them out (core hisparseKVCacheGroups). */
  groups: KVCacheGroupSpec[];
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
   * pagesPerRequest pages instead (a streaming prefill: at most streamingPrefillBlocks).
   */
  devicePagesPerRequest: number;
  /**
   * The smallest device pool the engine starts with: ceil((sink + window + buffer) / blockSize) + 1
   * (core/kv/kv_memory.ts sparseRequestMinBlocks).
   */
  minGpuBlocks: number;
  /**
   * Device blocks a streaming prefill holds at most (core/kv/kv_memory.ts streamingPrefillBlocks),
   * or null when prefills hold all their pages (no `streamingPrefill`).
   */
  streamingPrefillBlocks: number | null;
  /** Device bytes of one request at steady state (decoding sparsely). */
  deviceBytesPerRequest: number;
  given: HiSparsePoolPlan;
  /** What sized `given`: --host-pool-gib, or the engine's default rule (config DefaultHostPool). */
  givenSizedBy: "given" | DefaultHostPool;
  /**
   * The host pool that lets the most requests run: the most N with
   * N × (P × h + d × m) + (P − d) × m <= budget (P pagesPerRequest, d devicePagesPerRequest,
   * m mainBytesPerBlock, h deviceBytesPerHostBlock: N requests' host pages, their sparse device
   * blocks, and one prefill's transient: P − d, or min(P, streamingPrefillBlocks) − d when prefills stream), host pages N × P, but at least
   * ceil(budget / (m + h)) (the engine needs as many host pages as device blocks).
   */
  best: HiSparsePoolPlan;
  /** N of `best` before the minimum-host-pages rule (0 when not even one prefill fits). */
  bestN: number;
  /**
   * floor(budget / (P × h + d × m)): requests of a decode-only instance (prefill elsewhere, as
   * prefill/decode-disaggregated deployments and vLLM's calculator count); not this engine's
   * figure (core kv_concurrency.ts decodeOnlyConcurrency).
   */
  decodeOnly: number;
  /** The minimum-host-pages rule of `best`: ceil(budget / (m + h)). */
  bestMinHostBlocks: number;
}

/**
 * One rank's KV cache groups as the engine lays them out (core modelKVCacheGroups) for the
 * plan's element bytes and ranks (fp8 scales are per tensor, so no bytes per token:
 * core/kv/kv_cache_dtype.ts).
 * @throws PlanError when the KV heads cannot be split over the ranks (core kvHeadsPerRank).
 */
function planKVCacheGroups(p: PlanInput): KVCacheGroupSpec[] {
  const storage: KVStorage = {
    elementBytes: p.kvElementBytes,
    tensorParallelSize: p.tensorParallelSize ?? 1,
  };
  try {
    return modelKVCacheGroups(p.model, storage);
  } catch (e) {
    throw new PlanError(`--tensor-parallel-size ${storage.tensorParallelSize}: ${(e as Error).message}`);
  }
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
  const groups = planKVCacheGroups(p);
  const sizing = sizeKVMemory({ groups, blockSize: p.blockSize, deviceBudgetBytes: p.kvBudgetBytes });
  const kvBytesPerToken = bytesPerToken(groups);
  const pagesPerRequest = blocksForTokens(p.contextTokens, p.blockSize);
  return {
    groups,
    kvBytesPerToken,
    kvBytesPerBlock: sizing.bytesPerBlock,
    numGpuBlocks: sizing.numGpuBlocks,
    pagesPerRequest,
    maxConcurrent: concurrency(sizing, pagesPerRequest, pagesPerRequest, p.blockSize).maxConcurrent,
    maxConcurrentUnpaged: unpagedConcurrency(p.kvBudgetBytes, p.contextTokens, kvBytesPerToken),
  };
}

/**
 * HiSparse figures.
 * @throws PlanError for dense layers out of range or knobs that are not positive.
 */
export function planHiSparse(p: PlanInput): HiSparsePlan {
  const h = p.hisparse;
  const bs = p.blockSize;
  const L = p.model.numHiddenLayers;
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
  const groups = hisparseKVCacheGroups(planKVCacheGroups(p), {
    denseLayers: h.denseLayers,
    digestElementBytes: p.digestElementBytes ?? DIGEST_ELEMENT_BYTES,
    digestsPerPage: bs / (h.digestTokens ?? bs),
  });
  const hostElementBytes = h.hostKvCacheDtype === "fp8" ? KV_CACHE_DTYPE_BYTES.fp8 : undefined;
  const costs = hisparseBlockCosts(groups, bs, hostElementBytes);
  const minGpuBlocks = sparseRequestMinBlocks(h, bs);
  const streaming =
    h.streamingPrefill === undefined
      ? undefined
      : streamingPrefillBlocksOf(h, bs, h.streamingPrefill.maxChunkTokens);
  const pagesPerRequest = blocksForTokens(p.contextTokens, bs);
  const devicePagesPerRequest = sparseDevicePagesPerRequest(pagesPerRequest, minGpuBlocks);
  const digestBytesPerPage = groups
    .filter((g) => g.spec.kind === "page_digest")
    .reduce((s, g) => s + groupPageBytes(g, bs), 0);
  // The engine's default (worker/hisparse/layout.ts), at --max-model-len = the context.
  const defaultPoolBytes = defaultHostPoolBytes(h.defaultHostPool ?? "device_ratio", p.kvBudgetBytes, costs, {
    requestTokens: p.contextTokens,
    minGpuBlocks,
    blockSize: bs,
    streamingBlocks: streaming,
  });
  const pool = (hostPoolBytes: number | null): HiSparsePoolPlan => {
    const sizing = sizeKVMemory({
      groups,
      blockSize: bs,
      deviceBudgetBytes: p.kvBudgetBytes,
      hisparse: { hostPoolBytes, defaultHostPoolBytes: defaultPoolBytes, minGpuBlocks, hostElementBytes },
    });
    return poolPlan(sizing, pagesPerRequest, devicePagesPerRequest, bs, streaming);
  };
  const best = bestHostPool(p.kvBudgetBytes, costs, pagesPerRequest, devicePagesPerRequest, streaming);
  return {
    groups,
    numSparseLayers: L - h.denseLayers.length,
    numDenseLayers: h.denseLayers.length,
    digestBytesPerPage,
    mainBytesPerBlock: costs.mainBytesPerBlock,
    deviceBytesPerHostBlock: costs.deviceBytesPerHostBlock,
    hostBytesPerBlock: costs.hostBytesPerBlock,
    pagesPerRequest,
    devicePagesPerRequest,
    minGpuBlocks,
    streamingPrefillBlocks: streaming ?? null,
    deviceBytesPerRequest: sparseRequestDeviceBytes(costs, pagesPerRequest, devicePagesPerRequest),
    given: pool(h.hostPoolBytes),
    givenSizedBy:
      h.hostPoolBytes !== null ? "given" : defaultPoolBytes !== undefined ? "max_model_len" : "device_ratio",
    best: pool(best.hostPoolBytes),
    bestN: best.bestN,
    decodeOnly: decodeOnlyConcurrency(p.kvBudgetBytes, costs, pagesPerRequest, devicePagesPerRequest),
    bestMinHostBlocks: best.minHostBlocks,
  };
}

/** An integer with thousands separators, for refusal sentences ("8,192"). */
const fmt = (n: number): string => n.toLocaleString("en-US");

/** One host pool's figures from the formula's sizing: pools, requests at once, refusals. */
function poolPlan(
  sizing: KVMemorySizing,
  P: number,
  d: number,
  blockSize: number,
  streaming: number | undefined,
): HiSparsePoolPlan {
  const host = sizing.host!;
  const c = concurrency(sizing, P, d, blockSize, streaming);
  return {
    hostPoolBytes: host.hostPoolBytes,
    numHostBlocks: host.numHostBlocks,
    numGpuBlocks: sizing.numGpuBlocks,
    maxByHost: c.maxByHost,
    maxByDevice: c.maxByDevice,
    maxConcurrent: c.maxConcurrent,
    prefillDeviceBlocks: prefillDeviceBlocks(sizing.numGpuBlocks, P, streaming),
    refusals: c.refusals.map((r) => describeKVRefusal(r, fmt).fact),
  };
}

export { type GpuBudgetInput, kvBudgetFromGpu, noKvBudgetError } from "./gpu_budget.js";
export { PlanError };
