import type { HiSparseResidency } from "../../config/hisparse_config.js";
import { chunkPages, maxBlocksPerRequest, streamingPrefillBlocks } from "../kv/kv_memory.js";
import { type Request, RequestStatus } from "../request.js";
import type { KVPressureContext, KVPressureHandler, SchedulerView } from "../sched/extensions.js";
import type { HybridKVCacheManager } from "./hybrid_kv_cache_manager.js";
import { isSinkPage, numPagesOf, type PageClassConfig, windowStartPage } from "./residency.js";

/** Settings of a {@link HybridPolicy} (HiSparseConfig in pages). */
export interface HybridPolicyConfig extends PageClassConfig {
  mode: "auto" | "on";
  /** `on`: requests longer than this attend sparsely in their decode steps. */
  minSparseTokens: number;
  /**
   * `on`: `host` sends a long request's spillable pages to the host tier at its first decode
   * step; `hybrid` keeps them on the device until pressure spills them.
   */
  residency: HiSparseResidency;
  /**
   * The worker's attention reads a prefilling request's host-resident pages from the host tier
   * (DSA models: BackendMlaOps.attention's SpilledRows), so pages may spill during a prefill too;
   * false (Quest: a prefill attends densely on the device) keeps every page of a prefill resident.
   */
  spillsPrefill: boolean;
  /** Most tokens one step computes for a request (the scheduler's max_num_batched_tokens). */
  maxChunkTokens: number;
}

/**
 * When pages leave the device (DESIGN.md §4 "Hybrid residency"). Pure decisions over a
 * {@link HybridKVCacheManager}; the worker moves the bytes.
 *
 * A page may be spilled when it is ACTIVE, its host mirror has completed, it is not a sink,
 * window (tail included) or pinned page, and its request is in its decode phase (one token left
 * to compute) or, with `spillsPrefill`, prefilling past its first chunk (the window then ends at
 * the tokens computed so far). Without `spillsPrefill` a prefill (chunked, or a recompute after
 * preemption) attends densely on the device and needs every page resident.
 *
 * - `auto` and `on`: as the scheduler's {@link KVPressureHandler}, when an allocation fails the
 *   policy spills pages instead of letting the scheduler preempt (relieveKVPressure).
 * - `on` with residency `host` additionally moves every spillable page of a decoding request
 *   longer than minSparseTokens to the host tier (offloadLongRequest, once per step from the
 *   extension).
 *
 * Which requests attend sparsely in a step is {@link decodesSparsely}.
 */
export class HybridPolicy implements KVPressureHandler {
  /** Pages spilled since start. */
  spilledPagesTotal = 0;

  constructor(
    private readonly kv: HybridKVCacheManager,
    readonly config: HybridPolicyConfig,
  ) {}

  /**
   * True when the request's next token to compute is an output token, one per step: prefill done
   * (a prompt's last chunk of one token is still prefill, so the first output does not depend on
   * how the prompt was chunked; the last token of a recompute after preemption is an output).
   */
  isDecodePhase(request: Request): boolean {
    return (
      request.status === RequestStatus.RUNNING &&
      request.numComputedTokens > 0 &&
      request.numTokens - request.numComputedTokens <= 1 &&
      request.numComputedTokens >= request.numPromptTokens
    );
  }

  /**
   * Pages of the request that may be spilled now, ascending (class comment). The window is
   * taken at the context the request's next decode step will have (numTokens tokens).
   */
  spillablePages(request: Request): number[] {
    const reqId = request.requestId;
    const rp = this.kv.pagesOf(reqId);
    if (rp === undefined) return [];
    const context = this.isDecodePhase(request)
      ? request.numTokens
      : this.isStreamingPrefill(request)
        ? request.numComputedTokens
        : 0;
    const end = Math.min(rp.numPages, windowStartPage(context, this.config));
    const out: number[] = [];
    for (let p = 0; p < end; p++) {
      if (isSinkPage(p, this.config) || rp.pinned.has(p)) continue;
      if (this.kv.isResident(reqId, p) && this.kv.isMirrored(reqId, p)) out.push(p);
    }
    return out;
  }

  /*
   * relieveKVPressure: an allocation of ctx.numBlocksNeeded device blocks failed. Victims are the
   * running requests with spillable pages (decoding, or with `spillsPrefill` prefilling: the
   * requester itself may be one), best first: the most
   * blocks gained, counting the hot buffer a victim without one takes with its spill (spillable
   * pages - numHotBlocks), then the most spillable pages, then the newest. Each victim spills all
   * its spillable pages (it attends sparsely from now on anyway) and takes its hot buffer at once
   * (the requester with its retried allocation): a victim gains only when its pages outnumber its
   * hot buffer, and victims without gain are never spilled (when a request's whole context fits
   * its hot buffer, spilling it frees nothing). All or nothing: victims are chosen until their gain covers the deficit,
   * and nothing is spilled when it cannot (a spill that does not admit the request would only
   * make its victims sparse and swap-bound; the scheduler preempts or waits instead). A shortage
   * of host blocks cannot be relieved by spilling: preemption frees them. With prefix caching,
   * only pages whose device block the victim alone holds count and spill (a shared page's block
   * would stay in use).
   */
  relieveKVPressure(ctx: KVPressureContext): boolean {
    const kv = this.kv;
    const numNewPages = ctx.numBlocksNeeded - kv.numHotBlocksNeeded(ctx.request.requestId);
    if (kv.hostBlockPool.numFreeBlocks < numNewPages) return false;
    const deficit = ctx.numBlocksNeeded - ctx.numFreeBlocks;
    if (deficit <= 0) return false;
    const victims = ctx.scheduler.runningRequests
      .map((r, order) => ({ r, order, pages: this.exclusivePages(r, this.spillablePages(r)) }))
      .map((v) => ({ ...v, gain: v.pages.length - this.hotCost(v.r) }))
      .filter((v) => v.gain > 0)
      .sort((a, b) => b.gain - a.gain || b.pages.length - a.pages.length || b.order - a.order);
    const chosen: typeof victims = [];
    let gained = 0;
    for (const v of victims) {
      if (gained >= deficit) break;
      chosen.push(v);
      gained += v.gain;
    }
    if (gained < deficit) return false;
    for (const v of chosen) {
      const reqId = v.r.requestId;
      kv.releasePages(reqId, v.pages);
      this.spilledPagesTotal += v.pages.length;
      // The requester takes its hot buffer with its retried allocation; every other victim takes
      // it now, so that the blocks its gain left for it cannot go to another request first.
      if (v.r !== ctx.request && !kv.allocateHotBuffer(reqId))
        throw new Error(
          `request ${reqId} was spilled but its hot buffer does not fit (a gain accounting bug)`,
        );
    }
    return true;
  }

  /**
   * The pages whose device block only this request holds: with prefix caching a page may be
   * shared, and dropping one holder's reference frees nothing (relief spills only these).
   */
  private exclusivePages(request: Request, pages: number[]): number[] {
    const blocks = this.kv.getBlocks(request.requestId);
    return pages.filter((p) => blocks[p]!.refCnt === 1);
  }

  /** Device blocks a victim's first spill will cost besides its pages: its hot buffer, unless it has one. */
  private hotCost(request: Request): number {
    const rp = this.kv.pagesOf(request.requestId);
    return rp !== undefined && rp.hotBlocks.length > 0 ? 0 : this.kv.numHotBlocks;
  }

  /**
   * Admission limit (core/kv/kv_memory.ts maxBlocksPerRequest): a request must fit the host tier
   * (every page has a host block) and the device pool densely (prefill, and a recompute after
   * preemption, attend over all its pages), unless `spillsPrefill` and the pool holds what a
   * streaming prefill keeps ({@link streamingPrefillBlocks}): then the host tier alone bounds it.
   */
  maxBlocksPerRequest(numGpuBlocks: number): number {
    const numHostBlocks = this.kv.hostBlockPool.numHostBlocks;
    return maxBlocksPerRequest({ numGpuBlocks, numHostBlocks }, this.streamingPrefillBlocks());
  }

  /**
   * Device blocks a streaming prefill holds at most (core/kv/kv_memory.ts streamingPrefillBlocks),
   * or undefined without `spillsPrefill` (a prefill then holds all its pages).
   */
  streamingPrefillBlocks(): number | undefined {
    const c = this.config;
    return c.spillsPrefill ? streamingPrefillBlocks({ ...c, numHotBlocks: this.kv.numHotBlocks }) : undefined;
  }

  /**
   * Admission of a waiting request's prefill (KVPressureHandler.admitsPrefill): a prefill attends
   * densely and holds every page of its context on the device until it decodes (with
   * `spillsPrefill`, at most {@link streamingPrefillBlocks}), so the request starts only when the
   * device pool holds that beside what each running request will still hold ({@link blocksKept}). Without this, a second long prefill admitted beside a
   * running one runs the pool dry mid-prefill and preempts the newest, which then recomputes its
   * whole context; with it, the pool holds what core/kv/kv_concurrency.ts maxByDevicePool counts.
   * With nothing running the answer is true (the admission limit makes a request's pages fit the
   * pool), so the head of the queue always starts once the running requests finish. Pages shared
   * through the prefix cache count once per holder: the check errs towards waiting.
   */
  admitsPrefill(request: Request, scheduler: SchedulerView): boolean {
    let need = this.prefillPagesKept(numPagesOf(request.numTokens, this.config.blockSize));
    for (const r of scheduler.runningRequests) need += this.blocksKept(r);
    return need <= this.kv.blockPool.numGpuBlocks;
  }

  /**
   * Device blocks a running request keeps under pressure: a prefilling one every page of its
   * context (with `spillsPrefill`, as a decoding one, growing by a chunk instead of a page); a decoding one its resident pages and hot buffer less what relieveKVPressure would
   * spill now (its exclusive spillable pages, net of the hot buffer a first spill takes: no spill
   * without a gain), plus the page a step may open. Sinks, the window and pages not yet mirrored,
   * pinned or shared cannot spill, so they count as kept (once all of a long request's pages are
   * mirrored this is core/kv/kv_memory.ts sparseRequestMinBlocks).
   */
  private blocksKept(r: Request): number {
    const pages = numPagesOf(r.numTokens, this.config.blockSize);
    const rp = this.kv.pagesOf(r.requestId);
    const decoding = this.isDecodePhase(r);
    if (rp === undefined || !(decoding || this.isStreamingPrefill(r))) return this.prefillPagesKept(pages);
    const gain = this.exclusivePages(r, this.spillablePages(r)).length - this.hotCost(r);
    const held = rp.numPages - rp.numInactive + rp.hotBlocks.length;
    const grows = decoding
      ? 1
      : Math.min(pages - rp.numPages, chunkPages(this.config.maxChunkTokens, this.config.blockSize));
    return held - Math.max(0, gain) + grows;
  }

  /**
   * Device blocks a prefill of `pages` pages keeps: all of them, or with `spillsPrefill` at most
   * what a streaming prefill holds ({@link streamingPrefillBlocks}).
   */
  private prefillPagesKept(pages: number): number {
    const streaming = this.streamingPrefillBlocks();
    return streaming === undefined ? pages : Math.min(pages, streaming);
  }

  /** With `spillsPrefill`: the request runs, has computed part of its prompt and is not yet decoding. */
  private isStreamingPrefill(request: Request): boolean {
    return (
      this.config.spillsPrefill &&
      request.status === RequestStatus.RUNNING &&
      request.numComputedTokens > 0 &&
      !this.isDecodePhase(request)
    );
  }

  /** `on` mode: the request is longer than minSparseTokens and in its decode phase. */
  private isLongOnDecode(request: Request): boolean {
    return (
      this.config.mode === "on" &&
      request.numTokens > this.config.minSparseTokens &&
      this.isDecodePhase(request)
    );
  }

  /**
   * Whether the request attends sparsely in a step that computes `numScheduledTokens` of its
   * tokens: always when it decodes and holds an INACTIVE page (its KV is not all on the device);
   * in `on` mode with residency `hybrid` also when it decodes one output token and is longer than
   * minSparseTokens (its selected pages are read where they are: resident ones in place). A
   * prefill holding INACTIVE pages (`spillsPrefill`) attends as prefills do, reading those pages
   * from the host tier (the worker flags it).
   */
  decodesSparsely(request: Request, numScheduledTokens: number): boolean {
    const rp = this.kv.pagesOf(request.requestId);
    if (rp === undefined) return false;
    if (rp.numInactive > 0) return !this.config.spillsPrefill || this.isDecodePhase(request);
    return this.config.residency === "hybrid" && numScheduledTokens === 1 && this.isLongOnDecode(request);
  }

  /**
   * `on` mode with residency `host`, for a request scheduled in this step: when it decodes and is
   * longer than minSparseTokens, spill every spillable page and give it its hot buffer; skipped
   * (it stays dense this step) when the pool cannot hold the hot buffer even after the spill.
   * @returns the number of pages spilled.
   */
  offloadLongRequest(request: Request): number {
    if (this.config.residency !== "host" || !this.isLongOnDecode(request)) return 0;
    const pages = this.spillablePages(request);
    if (pages.length === 0) return 0;
    const reqId = request.requestId;
    // Only pages this request alone holds free their block (prefix caching shares pages).
    const freed = this.exclusivePages(request, pages).length;
    if (this.hotCost(request) > this.kv.numFreeBlocks + freed) return 0;
    this.kv.releasePages(reqId, pages);
    if (!this.kv.allocateHotBuffer(reqId))
      throw new Error(
        `request ${reqId} went host-resident but its hot buffer does not fit (an accounting bug)`,
      );
    this.spilledPagesTotal += pages.length;
    return pages.length;
  }
}
