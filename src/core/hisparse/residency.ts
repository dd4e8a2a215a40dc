/**
 * Page residency of Hybrid HiSparse (DESIGN.md §4). A *page* is one KV block of `blockSize`
 * tokens of one request, across all layers; its identity is its host block.
 *
 * - ACTIVE: the page also has a device block in the main pool (its KV is resident).
 * - INACTIVE: its device block was released (spilled); its KV is only in the host tier.
 * - SPARSE: INACTIVE, but currently held in some (layer, kv head) slot of the request's hot
 *   buffer (worker-side knowledge, reported back as a count).
 *
 * Page classes that are never spilled: sinks (the first `sinkTokens`), the recent window (the
 * last `windowTokens / blockSize` pages, the tail page included), and pinned pages (holding a
 * whitelisted token). Only pages whose host mirror has completed may be spilled.
 */
import type { HostBlockId } from "../ids.js";
import type { KVCacheBlock } from "../kv/kv_cache_block.js";

/** Residency state of a page. */
export enum PageState {
  ACTIVE = "ACTIVE",
  SPARSE = "SPARSE",
  INACTIVE = "INACTIVE",
}

/** `mirroredStep` of a page whose KV has not been copied to its host block yet. */
export const NOT_MIRRORED = -1;

/** Sink and window sizes in pages. */
export interface PageClassConfig {
  blockSize: number;
  /** sinkTokens / blockSize. */
  numSinkPages: number;
  /** windowTokens / blockSize (>= 1: the tail page is always in the window). */
  numWindowPages: number;
}

/** Pages holding `numTokens` tokens: ceil(numTokens / blockSize). */
export function numPagesOf(numTokens: number, blockSize: number): number {
  return Math.ceil(numTokens / blockSize);
}

/**
 * First page of the recent window of a context of `numTokens` tokens: the window is the last
 * numWindowPages pages, ending with the tail page (the one holding token numTokens - 1).
 */
export function windowStartPage(numTokens: number, c: PageClassConfig): number {
  return Math.max(0, numPagesOf(numTokens, c.blockSize) - c.numWindowPages);
}

/** True for a sink page (one of the first numSinkPages). */
export function isSinkPage(page: number, c: PageClassConfig): boolean {
  return page < c.numSinkPages;
}

/**
 * HiSparse bookkeeping of one request, beside its device block list in the KVCacheManager
 * (index i of each array describes page i).
 */
export class RequestPages {
  /** [numPages] the page's host block (allocated with the page). */
  readonly hostBlockIds: HostBlockId[] = [];
  /**
   * Pages [0, numMirrored) have their mirror issued (pages fill, and are mirrored, in order;
   * prefix hits count as mirrored: their host block is shared). The mirror's step is kept per
   * host block (HybridKVCacheManager.isMirrored).
   */
  numMirrored = 0;
  /** Pages [0, numCachedPages) were registered in (or taken from) the prefix cache. */
  numCachedPages = 0;
  /** Pages holding a whitelisted token. */
  readonly pinned = new Set<number>();
  /** Tokens already scanned for whitelisted ids. */
  numPinScanned = 0;
  /** Pages whose device block was released. */
  numInactive = 0;
  /** The request's hot-buffer blocks (empty until it first needs them). */
  hotBlocks: KVCacheBlock[] = [];
  /**
   * What the worker's copy of the page table lacks (HybridKVCacheManager.takePageTableDeltas):
   * pages [0, numPagesSent) were sent; earlier pages spilled and pinned since the last delta; the
   * hot blocks, once sent.
   */
  numPagesSent = 0;
  readonly unsentSpills: number[] = [];
  readonly unsentPins: number[] = [];
  hotBlocksSent = false;

  get numPages(): number {
    return this.hostBlockIds.length;
  }
}
