import type { BlockId, HostBlockId, RequestId } from "../ids.js";
import type { BlockPool } from "../kv/block_pool.js";
import type { KVCacheBlock } from "../kv/kv_cache_block.js";
import { KVCacheManager, NULL_BLOCK_ID } from "../kv/kv_cache_manager.js";
import type { Request } from "../request.js";
import type { HostBlockPool } from "./host_block_pool.js";
import type { PageTableDelta } from "./plan.js";
import { NOT_MIRRORED, RequestPages } from "./residency.js";

/** Settings of a {@link HybridKVCacheManager}. */
export interface HybridKVCacheManagerOptions {
  /** The host tier: one host block per page of every request. */
  hostBlockPool: HostBlockPool;
  /** Device blocks of one request's hot buffer (deviceBufferTokens / blockSize). */
  numHotBlocks: number;
  /** Token ids whose pages are pinned. */
  whitelistTokenIds: ReadonlySet<number>;
}

/** A (device block -> host block) copy of one page. */
export interface MirrorCopy {
  blockId: BlockId;
  hostBlockId: HostBlockId;
}

/**
 * The KVCacheManager of the HiSparse modes: device blocks as in the dense engine, plus for every
 * page a host block (allocated with the page, freed with the request), the step its host mirror
 * was issued, pins, and the request's hot-buffer blocks.
 *
 * An allocation succeeds only when both pools can serve it: the device pool the new pages and,
 * for a request that holds INACTIVE pages but no hot buffer yet, its hot buffer; the host pool a
 * host block per new page. So a short host pool makes allocations fail, and the scheduler falls
 * back to its pressure handler, then to preemption (which frees host blocks).
 *
 * Prefix caching is not supported (pages would be shared between requests).
 */
export class HybridKVCacheManager extends KVCacheManager {
  readonly hostBlockPool: HostBlockPool;
  readonly numHotBlocks: number;
  private readonly whitelist: ReadonlySet<number>;
  private readonly reqToPages = new Map<RequestId, RequestPages>();
  /**
   * Last step whose worker output came back: mirrors issued in steps up to it are complete, and
   * only such pages may be spilled.
   */
  completedStep = 0;

  /** @throws Error when the pool has prefix caching on or numHotBlocks < 1. */
  constructor(blockPool: BlockPool, blockSize: number, options: HybridKVCacheManagerOptions) {
    super(blockPool, blockSize);
    if (blockPool.enableCaching) throw new Error("HiSparse does not support prefix caching yet");
    if (!Number.isInteger(options.numHotBlocks) || options.numHotBlocks < 1)
      throw new Error(`a hot buffer needs at least one block, got ${options.numHotBlocks}`);
    this.hostBlockPool = options.hostBlockPool;
    this.numHotBlocks = options.numHotBlocks;
    this.whitelist = options.whitelistTokenIds;
  }

  /** Device blocks for new pages, plus the hot buffer of a request that needs one now. */
  override numBlocksToAllocate(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = [],
  ): number {
    return (
      this.numTokenBlocksToAllocate(request, numNewTokens, newComputedBlocks) +
      this.numHotBlocksNeeded(request.requestId)
    );
  }

  /** Both pools can serve the allocation (see the class comment). */
  override canAllocate(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = [],
  ): boolean {
    const numNewPages = this.numTokenBlocksToAllocate(request, numNewTokens, newComputedBlocks);
    return (
      this.hostBlockPool.numFreeBlocks >= numNewPages &&
      super.canAllocate(request, numNewTokens, newComputedBlocks)
    );
  }

  /**
   * allocateSlots of the dense manager, then a host block per new page and the hot buffer when
   * the request needs one. Plan, then apply: null and no change when either pool is short.
   * @throws Error when prefix hits are passed (prefix caching is not supported).
   */
  override allocateSlots(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = [],
  ): BlockId[] | null {
    if (newComputedBlocks.length > 0) throw new Error("HiSparse does not support prefix-cache hits");
    if (!this.canAllocate(request, numNewTokens)) return null;
    const reqId = request.requestId;
    const numHot = this.numHotBlocksNeeded(reqId);
    const numNewPages = this.numTokenBlocksToAllocate(request, numNewTokens, newComputedBlocks);
    const fresh = super.allocateSlots(request, numNewTokens)!;
    let pages = this.reqToPages.get(reqId);
    if (pages === undefined) {
      pages = new RequestPages();
      this.reqToPages.set(reqId, pages);
    }
    for (const h of this.hostBlockPool.allocate(numNewPages)!) {
      pages.hostBlockIds.push(h);
      pages.mirroredStep.push(NOT_MIRRORED);
    }
    if (numHot > 0) pages.hotBlocks = this.blockPool.getNewBlocks(numHot);
    return fresh;
  }

  /** Frees the request's device pages (tail first), its hot buffer and its host blocks (tail first). */
  override free(request: Request): void {
    super.free(request);
    const pages = this.reqToPages.get(request.requestId);
    if (pages === undefined) return;
    this.reqToPages.delete(request.requestId);
    if (pages.hotBlocks.length > 0) this.blockPool.freeBlocks(pages.hotBlocks);
    this.hostBlockPool.free([...pages.hostBlockIds].reverse());
  }

  /** The request's HiSparse bookkeeping, or undefined when it holds no pages. */
  pagesOf(reqId: RequestId): Readonly<RequestPages> | undefined {
    return this.reqToPages.get(reqId);
  }

  /** Requests holding pages, in the order they first got one. */
  get requestIds(): IterableIterator<RequestId> {
    return this.reqToPages.keys();
  }

  /** True when page `page` of the request has its device block (ACTIVE). */
  isResident(reqId: RequestId, page: number): boolean {
    const b = this.getBlocks(reqId)[page];
    return b !== undefined && b.blockId !== NULL_BLOCK_ID;
  }

  /** True when the page's host mirror was issued in a step whose output came back. */
  isMirrored(reqId: RequestId, page: number): boolean {
    const step = this.reqToPages.get(reqId)?.mirroredStep[page] ?? NOT_MIRRORED;
    return step !== NOT_MIRRORED && step <= this.completedStep;
  }

  /** Hot-buffer blocks the request must get with its next allocation: all of them when it has INACTIVE pages and no buffer. */
  numHotBlocksNeeded(reqId: RequestId): number {
    const p = this.reqToPages.get(reqId);
    return p !== undefined && p.numInactive > 0 && p.hotBlocks.length === 0 ? this.numHotBlocks : 0;
  }

  /**
   * Spills pages: releases their device blocks (KVCacheManager.releaseBlocks, in the order
   * given) so they become INACTIVE. Plan, then apply.
   * @throws Error (and changes nothing) for an unknown request, a page that is not ACTIVE, or a
   *   page whose host mirror is not complete (its KV would be lost).
   */
  releasePages(reqId: RequestId, pages: readonly number[]): BlockId[] {
    const rp = this.reqToPages.get(reqId);
    if (rp === undefined) throw new Error(`request ${reqId} holds no pages`);
    for (const p of pages)
      if (!this.isMirrored(reqId, p))
        throw new Error(`page ${p} of request ${reqId} cannot be spilled before its host mirror completes`);
    const released = this.releaseBlocks(reqId, pages);
    rp.numInactive += released.length;
    for (const p of pages) if (p < rp.numPagesSent) rp.unsentSpills.push(p);
    return released;
  }

  /**
   * Gives the request its hot buffer now, if it has none (numHotBlocks device blocks).
   * @returns true when the request has a hot buffer afterwards; false (no change) when the pool is short.
   * @throws Error for a request holding no pages.
   */
  allocateHotBuffer(reqId: RequestId): boolean {
    const rp = this.reqToPages.get(reqId);
    if (rp === undefined) throw new Error(`request ${reqId} holds no pages`);
    if (rp.hotBlocks.length > 0) return true;
    if (this.blockPool.numFreeBlocks < this.numHotBlocks) return false;
    rp.hotBlocks = this.blockPool.getNewBlocks(this.numHotBlocks);
    return true;
  }

  /**
   * Records the pages that the request's first `numTokens` tokens fill, not mirrored yet, as
   * mirrored in `step` (the worker copies them after that step's forward).
   * @returns their (device block -> host block) copies, in page order.
   * @throws Error when such a page has no device block (a full page is mirrored before it can be spilled).
   */
  markMirrors(request: Request, numTokens: number, step: number): MirrorCopy[] {
    const reqId = request.requestId;
    const rp = this.reqToPages.get(reqId);
    if (rp === undefined) return [];
    const blocks = this.getBlocks(reqId);
    const numFull = Math.min(Math.floor(numTokens / this.blockSize), rp.numPages);
    const out: MirrorCopy[] = [];
    for (let p = rp.numMirrored; p < numFull; p++) {
      const blockId = blocks[p]!.blockId;
      if (blockId === NULL_BLOCK_ID) throw new Error(`page ${p} of request ${reqId} was released unmirrored`);
      rp.mirroredStep[p] = step;
      out.push({ blockId, hostBlockId: rp.hostBlockIds[p]! });
    }
    rp.numMirrored = Math.max(rp.numMirrored, numFull);
    return out;
  }

  /** Pins the pages of tokens [numPinScanned, numTokens) that are whitelisted. */
  scanPinned(request: Request, numTokens: number): void {
    const rp = this.reqToPages.get(request.requestId);
    if (rp === undefined || this.whitelist.size === 0) return;
    const end = Math.min(numTokens, request.numTokens);
    for (let i = rp.numPinScanned; i < end; i++) {
      const page = Math.floor(i / this.blockSize);
      if (this.whitelist.has(request.allTokenIds[i]!) && !rp.pinned.has(page)) {
        rp.pinned.add(page);
        rp.unsentPins.push(page);
      }
    }
    rp.numPinScanned = Math.max(rp.numPinScanned, end);
  }

  /**
   * What changed in each request's page table since the last call (new pages, spills, pins, hot
   * blocks), in the order the requests first got pages; marks it sent. Requests without changes
   * get no delta.
   */
  takePageTableDeltas(): PageTableDelta[] {
    const deltas: PageTableDelta[] = [];
    for (const [reqId, rp] of this.reqToPages) {
      const from = rp.numPagesSent;
      const sendHot = !rp.hotBlocksSent && rp.hotBlocks.length > 0;
      if (from === rp.numPages && rp.unsentSpills.length === 0 && rp.unsentPins.length === 0 && !sendHot)
        continue;
      const blocks = this.getBlocks(reqId);
      deltas.push({
        reqId,
        firstNewPage: from,
        newHostBlockIds: rp.hostBlockIds.slice(from),
        newBlockIds: blocks.slice(from).map((b) => b.blockId),
        spilledPages: rp.unsentSpills.splice(0),
        newPinnedPages: rp.unsentPins.splice(0).sort((a, b) => a - b),
        newHotBlockIds: sendHot ? rp.hotBlocks.map((b) => b.blockId) : [],
      });
      rp.numPagesSent = rp.numPages;
      rp.hotBlocksSent = rp.hotBlocksSent || sendHot;
    }
    return deltas;
  }

  /** Pages over all requests: with a device block (ACTIVE) and without (INACTIVE, SPARSE included). */
  countPages(): { numActive: number; numInactive: number; numSparseRequests: number } {
    let numActive = 0;
    let numInactive = 0;
    let numSparseRequests = 0;
    for (const rp of this.reqToPages.values()) {
      numActive += rp.numPages - rp.numInactive;
      numInactive += rp.numInactive;
      if (rp.numInactive > 0) numSparseRequests++;
    }
    return { numActive, numInactive, numSparseRequests };
  }
}
