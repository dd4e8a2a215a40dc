/**
 * How many requests of one context run at once in pools sized by the KV memory formula
 * (kv_memory.ts), from how the scheduler and the HiSparse policy use them; `hisparse plan`
 * prints these figures. Pure integer arithmetic.
 */
import type { DefaultHostPool } from "../../config/hisparse_config.js";
import {
  admissionRefusal,
  blocksForTokens,
  type HiSparseBlockCosts,
  type KVMemorySizing,
  type KVRefusal,
  prefillStreams,
} from "./kv_memory.js";

/**
 * Requests a device pool of G blocks runs at once, the prefilling one holding p blocks (P, its
 * pages; a streaming prefill: {@link prefillDeviceBlocks}), d each once it decodes sparsely:
 *   G >= p ? floor((G − p) / d) + 1 : 0
 * (floor(G / P) when d = p = P, the dense count). The steady state it assumes, from
 * core/sched/scheduler.ts and core/hisparse/hybrid_policy.ts:
 * - one request at a time is in its prefill and holds all P pages (prefill, chunked or a
 *   recompute after preemption, attends densely; pages spill only in the decode phase, and a
 *   recompute covers prompt and generated tokens, so up to the whole context), or with a
 *   streaming prefill (DSA set-ups read spilled pages while prefilling) at most
 *   kv_memory.ts streamingPrefillBlocks of them. A waiting request
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
  prefillBlocks: number,
  devicePagesPerRequest: number,
): number {
  if (numGpuBlocks < prefillBlocks) return 0;
  return Math.floor((numGpuBlocks - prefillBlocks) / devicePagesPerRequest) + 1;
}

/**
 * Device blocks of one request once it decodes sparsely: min(P, minGpuBlocks) (a request whose
 * context fits its sinks, window and hot buffer keeps every page).
 */
export function sparseDevicePagesPerRequest(pagesPerRequest: number, minGpuBlocks: number): number {
  return Math.min(pagesPerRequest, minGpuBlocks);
}

/**
 * Device bytes one request holds once it decodes sparsely: d main-pool blocks, and the device
 * cost of each of its P host pages (dense layers' KV, digests).
 */
export function sparseRequestDeviceBytes(
  costs: HiSparseBlockCosts,
  pagesPerRequest: number,
  devicePagesPerRequest: number,
): number {
  return devicePagesPerRequest * costs.mainBytesPerBlock + pagesPerRequest * costs.deviceBytesPerHostBlock;
}

/** Requests that a budget would hold without paging: floor(budget / (context × bytes per token)). */
export function unpagedConcurrency(
  budgetBytes: number,
  contextTokens: number,
  bytesPerToken: number,
): number {
  return Math.floor(budgetBytes / (contextTokens * bytesPerToken));
}

/** Requests at once in sized pools, and why none may run. */
export interface Concurrency {
  /** Dense: floor(G / P). HiSparse: requests the host pool holds, floor(H / P). */
  maxByHost: number;
  /** Requests the device pool holds ({@link maxByDevicePool}). */
  maxByDevice: number;
  /** min of the two, or 0 when refused. */
  maxConcurrent: number;
  /** The start refusals of the sizing, else the admission refusal of one request (or none). */
  refusals: KVRefusal[];
}

/**
 * Device blocks one request holds while it prefills: all its P pages, or with `streamingBlocks`
 * (kv_memory.ts streamingPrefillBlocks: a HiSparse set-up whose prefill reads host pages) that
 * the device pool holds, min(P, streamingBlocks).
 */
export function prefillDeviceBlocks(
  numGpuBlocks: number,
  pagesPerRequest: number,
  streamingBlocks?: number,
): number {
  return prefillStreams(numGpuBlocks, streamingBlocks)
    ? Math.min(pagesPerRequest, streamingBlocks!)
    : pagesPerRequest;
}

/**
 * Requests of `pagesPerRequest` pages that run at once in `sizing`'s pools, `d` device pages each
 * once they decode (d = P for the dense engine), the prefilling one holding
 * {@link prefillDeviceBlocks} (`streamingBlocks`: see there). Refused when the engine would not
 * start, or would reject a request of this context at admission.
 */
export function concurrency(
  sizing: KVMemorySizing,
  pagesPerRequest: number,
  devicePagesPerRequest: number,
  blockSize: number,
  streamingBlocks?: number,
): Concurrency {
  const numHostBlocks = sizing.host?.numHostBlocks ?? null;
  const pools = { numGpuBlocks: sizing.numGpuBlocks, numHostBlocks };
  const admission = admissionRefusal(pools, pagesPerRequest * blockSize, blockSize, streamingBlocks);
  const refusals = sizing.refusals.length > 0 ? sizing.refusals : admission === null ? [] : [admission];
  const prefill = prefillDeviceBlocks(sizing.numGpuBlocks, pagesPerRequest, streamingBlocks);
  const maxByDevice = maxByDevicePool(sizing.numGpuBlocks, prefill, devicePagesPerRequest);
  const maxByHost = numHostBlocks === null ? maxByDevice : Math.floor(numHostBlocks / pagesPerRequest);
  return {
    maxByHost,
    maxByDevice,
    maxConcurrent: refusals.length > 0 ? 0 : Math.min(maxByHost, maxByDevice),
    refusals,
  };
}

/** The host pool that lets the most requests run (HiSparse). */
export interface BestHostPool {
  /** Most N with N × (P × h + d × m) + (P − d) × m <= budget (0 when not even one prefill fits). */
  bestN: number;
  /** ceil(budget / (m + h)): the engine needs as many host pages as device blocks. */
  minHostBlocks: number;
  /** max(bestN × P, minHostBlocks). */
  numHostBlocks: number;
  /** numHostBlocks × host bytes per page: the `--host-pool-gib` to give. */
  hostPoolBytes: number;
}

/**
 * The best host pool for requests of P pages, d device pages each once decoding: N requests'
 * host pages and sparse device blocks, plus one prefill's P − d extra blocks, within the budget
 * (m main bytes per block, h device bytes per host page). With `streamingBlocks`
 * (kv_memory.ts streamingPrefillBlocks) the prefill holds min(P, streamingBlocks) blocks instead of P.
 */
export function bestHostPool(
  budgetBytes: number,
  costs: HiSparseBlockCosts,
  pagesPerRequest: number,
  devicePagesPerRequest: number,
  streamingBlocks?: number,
): BestHostPool {
  const [P, d, m, h] = [
    pagesPerRequest,
    devicePagesPerRequest,
    costs.mainBytesPerBlock,
    costs.deviceBytesPerHostBlock,
  ];
  const prefill = streamingBlocks === undefined ? P : Math.min(P, streamingBlocks);
  const bestN = Math.max(0, Math.floor((budgetBytes - Math.max(0, prefill - d) * m) / (P * h + d * m)));
  const minHostBlocks = Math.ceil(budgetBytes / (m + h));
  const numHostBlocks = Math.max(bestN * P, minHostBlocks);
  return { bestN, minHostBlocks, numHostBlocks, hostPoolBytes: numHostBlocks * costs.hostBytesPerBlock };
}

/**
 * The default host pool in bytes when `--host-pool-gib` is not given, for
 * kv_memory.ts HiSparsePoolInput.defaultHostPoolBytes; the one place the rule is applied, for the
 * engine (worker/hisparse/layout.ts, requestTokens = --max-model-len) and `hisparse plan`
 * (requestTokens = the context). Rule `max_model_len` (config DefaultHostPool): {@link
 * bestHostPool}'s pool for requests of `requestTokens` tokens, d from the settings' minimum
 * device blocks (kv_memory.ts sparseRequestMinBlocks). Undefined, so that the device-ratio
 * default applies: for rule `device_ratio`, with `--num-gpu-blocks-override` (the device pool is
 * given), or when the budget (bytes, after reserved bytes) holds not even one such request (the
 * sizing's refusals then say what is short).
 */
export function defaultHostPoolBytes(
  rule: DefaultHostPool,
  budgetBytes: number,
  costs: HiSparseBlockCosts,
  o: {
    requestTokens: number;
    minGpuBlocks: number;
    blockSize: number;
    numGpuBlocksOverride?: number;
    /** A streaming prefill's device blocks (kv_memory.ts streamingPrefillBlocks), when prefills stream. */
    streamingBlocks?: number;
  },
): number | undefined {
  if (rule !== "max_model_len" || o.numGpuBlocksOverride !== undefined) return undefined;
  const P = blocksForTokens(o.requestTokens, o.blockSize);
  const d = sparseDevicePagesPerRequest(P, o.minGpuBlocks);
  const best = bestHostPool(budgetBytes, costs, P, d, o.streamingBlocks);
  return best.bestN > 0 ? best.hostPoolBytes : undefined;
}

/**
 * Requests a budget holds when none of them prefills here, each decoding sparsely (P host pages
 * with their device cost h, d device blocks of m bytes): floor(budget / (P × h + d × m)), with a
 * host pool of that many requests' pages. This engine prefills on the decoding GPU (one prefill
 * holds P blocks: {@link bestHostPool}); a prefill/decode-disaggregated deployment (SGLang
 * HiSparse, vLLM's Hybrid HiSparse calculator) counts this figure for its decode instance.
 * Not what this engine runs: `hisparse plan` prints it to compare with those.
 */
export function decodeOnlyConcurrency(
  budgetBytes: number,
  costs: HiSparseBlockCosts,
  pagesPerRequest: number,
  devicePagesPerRequest: number,
): number {
  const perRequest =
    pagesPerRequest * costs.deviceBytesPerHostBlock + devicePagesPerRequest * costs.mainBytesPerBlock;
  return Math.max(0, Math.floor(budgetBytes / perRequest));
}
