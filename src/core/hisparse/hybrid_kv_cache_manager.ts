import type { BlockId, HostBlockId, RequestId } from "../ids.js";
import { extendBlockHashes } from "../kv/block_hash.js";
import type { BlockPool } from "../kv/block_pool.js";
import type { KVCacheBlock } from "../kv/kv_cache_block.js";
import {
  type CachedPrefix,
  type ComputedBlocks,
  KVCacheManager,
  NULL_BLOCK_ID,
} from "../kv/kv_cache_manager.js";
import type { Request } from "../request.js";
import type { HostBlockPool } from "./host_block_pool.js";
import { HostResidentHit, PagePrefixCache } from "./page_prefix_cache.js";
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
 * Prefix caching (the device pool's `enableCaching`): full pages are registered in a
 * {@link PagePrefixCache} keyed on host blocks, and a new request's first allocation starts with
 * the cached pages of its prefix, shared (ref counted in both pools): a device copy is read in
 * place; a host-only page is loaded into a fresh device block before the step's forward (a
 * `load` of the plan; the prefill attends densely over every page) and becomes the page's device
 * copy again. Its dense-layer KV and digests are already on the device (indexed by host block).
 * A spill drops one request's reference to the device copy (the host copy is the one shared
 * host block: nothing is copied); finished requests' pages stay cached in both pools until
 * evicted, least recently freed first.
 */
export class HybridKVCacheManager extends KVCacheManager {
  readonly hostBlockPool: HostBlockPool;
  readonly numHotBlocks: number;
  private readonly whitelist: ReadonlySet<number>;
  private readonly reqToPages = new Map<RequestId, RequestPages>();
  /** [numHostBlocks] step whose forward mirrored the host block's page, or NOT_MIRRORED. */
  private readonly mirroredStep: Int32Array;
  /** The two-tier prefix cache (null when caching is off). */
  readonly prefixCache: PagePrefixCache | null;
  /** Host -> device copies of host-resident hits to perform before the next forward. */
  private pendingLoads: MirrorCopy[] = [];
  private hostHitTokens = 0;
  /**
   * Last step whose worker output came back: mirrors issued in steps up to it are complete, and
   * only such pages may be spilled.
   */
  completedStep = 0;

  /** @throws Error when numHotBlocks < 1. */
  constructor(blockPool: BlockPool, blockSize: number, options: HybridKVCacheManagerOptions) {
    super(blockPool, blockSize);
    if (!Number.isInteger(options.numHotBlocks) || options.numHotBlocks < 1)
      throw new Error(`a hot buffer needs at least one block, got ${options.numHotBlocks}`);
    this.hostBlockPool = options.hostBlockPool;
    this.numHotBlocks = options.numHotBlocks;
    this.whitelist = options.whitelistTokenIds;
    this.mirroredStep = new Int32Array(this.hostBlockPool.numHostBlocks).fill(NOT_MIRRORED);
    this.prefixCache = blockPool.enableCaching
      ? new PagePrefixCache(blockPool, this.hostBlockPool, (h) => this.isHostMirrored(h))
      : null;
  }

  /** Prefix-hit tokens whose pages were only in the host tier (loaded back), total. */
  override get numHostHitTokens(): number {
    return this.hostHitTokens;
  }

  protected override get releasesSharedPages(): boolean {
    return true;
  }

  /**
   * Prefix-cache lookup over both tiers (PagePrefixCache.lookup): device copies and
   * {@link HostResidentHit}s, leaving at least the last token to compute.
   */
  override getComputedBlocks(request: Request): ComputedBlocks {
    if (this.prefixCache === null) return { blocks: [], numComputedTokens: 0 };
    const hashes = this.blockHashesOf(request);
    const maxHitBlocks = Math.min(hashes.length, Math.floor((request.numTokens - 1) / this.blockSize));
    const blocks = this.prefixCache.lookup(hashes, maxHitBlocks);
    return { blocks, numComputedTokens: blocks.length * this.blockSize };
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
      this.hostBlockPool.numFreeBlocks - this.numEvictableHostHits(newComputedBlocks) >= numNewPages &&
      super.canAllocate(request, numNewTokens, newComputedBlocks)
    );
  }

  /** The cached prefix of `tokenIds` over both tiers: pages with a device copy, and host-only pages. */
  override locateCachedPrefix(tokenIds: readonly number[]): CachedPrefix {
    if (this.prefixCache === null) return { numDevicePages: 0, numHostPages: 0 };
    const hashes = extendBlockHashes(tokenIds, this.blockSize, []);
    const hits = this.prefixCache.lookup(hashes, hashes.length);
    const numHostPages = this.numHostHitTokensOf(hits) / this.blockSize;
    return { numDevicePages: hits.length - numHostPages, numHostPages };
  }

  /** Tokens of the {@link HostResidentHit}s among `hits` (pages only in the host tier). */
  override numHostHitTokensOf(hits: readonly KVCacheBlock[]): number {
    return hits.filter((b) => b instanceof HostResidentHit).length * this.blockSize;
  }

  /** Hits whose host block is free (a cache entry): touching them takes them out of the free queue. */
  private numEvictableHostHits(hits: readonly KVCacheBlock[]): number {
    if (this.prefixCache === null) return 0;
    let n = 0;
    for (const b of hits) if (this.hostBlockPool.refCount(this.prefixCache.hostBlockOf(b)) === 0) n++;
    return n;
  }

  /**
   * allocateSlots of the dense manager, then a host block per new page and the hot buffer when
   * the request needs one. Prefix hits (a first allocation only) are shared: their host blocks
   * and device copies get a reference; host-resident ones get a fresh device block and a load.
   * Plan, then apply: null and no change when either pool is short.
   * @throws Error when hits are passed for a request holding blocks, or without prefix caching.
   */
  override allocateSlots(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = [],
  ): BlockId[] | null {
    const cache = this.prefixCache;
    if (newComputedBlocks.length > 0 && cache === null)
      throw new Error("prefix-cache hits need prefix caching on");
    if (!this.canAllocate(request, numNewTokens, newComputedBlocks)) return null;
    const reqId = request.requestId;
    const numHot = this.numHotBlocksNeeded(reqId);
    const numNewPages = this.numTokenBlocksToAllocate(request, numNewTokens, newComputedBlocks);
    const hitHosts = newComputedBlocks.map((b) => cache!.hostBlockOf(b));
    if (newComputedBlocks.length > 0 && this.reqToPages.has(reqId))
      throw new Error(`request ${reqId} already holds pages; prefix hits apply only to its first allocation`);
    // Host references first, so that no allocation below can evict a hit.
    this.hostBlockPool.touch(hitHosts);
    const fresh = super.allocateSlots(request, numNewTokens, newComputedBlocks)!;
    let pages = this.reqToPages.get(reqId);
    if (pages === undefined) {
      pages = new RequestPages();
      this.reqToPages.set(reqId, pages);
    }
    pages.hostBlockIds.push(...hitHosts);
    pages.numMirrored = Math.max(pages.numMirrored, hitHosts.length);
    pages.numCachedPages = Math.max(pages.numCachedPages, hitHosts.length);
    for (const h of this.hostBlockPool.allocate(numNewPages)!) {
      pages.hostBlockIds.push(h);
      this.mirroredStep[h] = NOT_MIRRORED;
    }
    if (numHot > 0) pages.hotBlocks = this.blockPool.getNewBlocks(numHot);
    const numTokensToCache = Math.min(
      request.numComputedTokens + newComputedBlocks.length * this.blockSize + numNewTokens,
      request.numTokens,
    );
    this.registerFullPages(request, pages, numTokensToCache);
    return fresh;
  }

  /**
   * Device blocks of the hits: device copies get a reference; each host-resident hit gets a fresh
   * block (after those references, so it cannot evict a hit), becomes that page's device copy
   * and is queued for a load (host -> device, before the step's forward).
   */
  protected override takeComputedBlocks(_request: Request, hits: readonly KVCacheBlock[]): KVCacheBlock[] {
    const cache = this.prefixCache!;
    this.blockPool.touch(hits.filter((b) => !(b instanceof HostResidentHit)));
    const numHostResident = hits.filter((b) => b instanceof HostResidentHit).length;
    const fresh = this.blockPool.getNewBlocks(numHostResident);
    let next = 0;
    return hits.map((b) => {
      if (!(b instanceof HostResidentHit)) return b;
      const block = fresh[next++]!;
      cache.linkDeviceCopy(b.hostBlockId, block, this.hostBlockPool.hashOf(b.hostBlockId)!);
      this.pendingLoads.push({ blockId: block.blockId, hostBlockId: b.hostBlockId });
      this.hostHitTokens += this.blockSize;
      return block;
    });
  }

  /** The dense registration is replaced by {@link registerFullPages} (host blocks first). */
  protected override cacheBlocks(): void {}

  /** Registers the pages that are full within the request's first `numTokens` tokens. */
  private registerFullPages(request: Request, rp: RequestPages, numTokens: number): void {
    const cache = this.prefixCache;
    if (cache === null) return;
    const numFull = Math.min(Math.floor(numTokens / this.blockSize), rp.numPages);
    if (numFull <= rp.numCachedPages) return;
    const hashes = this.blockHashesOf(request);
    const blocks = this.getBlocks(request.requestId);
    for (let p = rp.numCachedPages; p < numFull; p++)
      cache.register(rp.hostBlockIds[p]!, blocks[p] ?? null, hashes[p]!);
    rp.numCachedPages = numFull;
  }

  /** Host -> device loads queued since the last call (host-resident hits), in allocation order. */
  takeLoads(): MirrorCopy[] {
    const out = this.pendingLoads;
    this.pendingLoads = [];
    return out;
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
    const h = this.reqToPages.get(reqId)?.hostBlockIds[page];
    return h !== undefined && this.isHostMirrored(h);
  }

  /** True when the host block's mirror was issued in a step whose output came back. */
  isHostMirrored(hostBlockId: HostBlockId): boolean {
    const step = this.mirroredStep[hostBlockId] ?? NOT_MIRRORED;
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
      this.mirroredStep[rp.hostBlockIds[p]!] = step;
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
