import type { BlockId, RequestId } from "../ids.js";
import type { Request } from "../request.js";
import { type BlockHash, extendBlockHashes } from "./block_hash.js";
import type { BlockPool } from "./block_pool.js";
import { KVCacheBlock } from "./kv_cache_block.js";

/**
 * Block id standing in a request's block list for a page whose device block was released
 * ({@link KVCacheManager.releaseBlocks}; HiSparse keeps that page in host memory). Never a pool
 * block (vLLM's null_block plays this part for sliding-window pages).
 */
export const NULL_BLOCK_ID = -1 as BlockId;
/** The placeholder block of released pages (shared, never in the pool or its free queue). */
const NULL_BLOCK = new KVCacheBlock(NULL_BLOCK_ID);

/** Prefix-cache hits of a request: blocks to reuse and the tokens they cover. */
export interface ComputedBlocks {
  /** Cached blocks holding the request's first tokens, in token order (refs not yet taken). */
  blocks: KVCacheBlock[];
  /** `blocks.length * blockSize` tokens. */
  numComputedTokens: number;
}

const NO_COMPUTED_BLOCKS: readonly KVCacheBlock[] = [];

/** Pages of a cached prefix by tier ({@link KVCacheManager.locateCachedPrefix}). */
export interface CachedPrefix {
  /** Pages of the run with a device block (in use, or an evictable cache entry). */
  numDevicePages: number;
  /** Pages of the same run held only in the host tier (HiSparse; in token order they mix with the device ones). */
  numHostPages: number;
}

/**
 * Maps requests to their device block lists (vllm/v1/core/kv_cache_manager.py KVCacheManager,
 * single full-attention group). Request `r`'s token `i` lives in block
 * `getBlockIds(r)[floor(i / blockSize)]` at offset `i % blockSize`.
 *
 * With caching on, each request's full blocks are hashed ({@link extendBlockHashes}) and
 * registered in the pool as soon as they are scheduled to be filled, so later requests with the
 * same prefix reuse them. The worker writes a step's KV before attention reads it, so a hit on
 * a block that is being filled in the same step is safe (as in vLLM).
 */
export class KVCacheManager {
  readonly blockPool: BlockPool;
  /** Tokens per block. */
  readonly blockSize: number;
  /** Request -> its blocks in token order. */
  private readonly reqToBlocks = new Map<RequestId, KVCacheBlock[]>();
  /** Request -> hashes of its full blocks (kept across preemption; tokens only grow). */
  private readonly reqToBlockHashes = new Map<RequestId, BlockHash[]>();
  /** Request -> how many of its leading blocks are registered in the prefix cache. */
  private readonly reqToNumCachedBlocks = new Map<RequestId, number>();

  /**
   * @param blockPool the device blocks.
   * @param blockSize tokens per block (>= 1).
   * @throws Error when blockSize is not a positive integer.
   */
  constructor(blockPool: BlockPool, blockSize: number) {
    if (!Number.isInteger(blockSize) || blockSize < 1)
      throw new Error(`block size must be a positive integer, got ${blockSize}`);
    this.blockPool = blockPool;
    this.blockSize = blockSize;
  }

  get enableCaching(): boolean {
    return this.blockPool.enableCaching;
  }
  /** Fraction of device blocks in use, in [0, 1]. */
  get usage(): number {
    return this.blockPool.usage;
  }
  /** Free device blocks (evictable cached ones included). */
  get numFreeBlocks(): number {
    return this.blockPool.numFreeBlocks;
  }

  /** Prefix-hit tokens served from a slower tier than the device pool, total (none here; HiSparse: the host tier). */
  get numHostHitTokens(): number {
    return 0;
  }

  /**
   * Where the cached prefix of `tokenIds` lives, without taking references: the longest run of
   * its full blocks found in the cache, split into pages with a device block and pages held only
   * by a slower tier (HiSparse's host pool; none here). Used by POST /v1/preheat's answer.
   */
  locateCachedPrefix(tokenIds: readonly number[]): CachedPrefix {
    if (!this.enableCaching) return { numDevicePages: 0, numHostPages: 0 };
    const hashes = extendBlockHashes(tokenIds, this.blockSize, []);
    let n = 0;
    while (n < hashes.length && this.blockPool.getCachedBlock(hashes[n]!) !== null) n++;
    return { numDevicePages: n, numHostPages: 0 };
  }

  /**
   * Tokens of `hits` (from {@link getComputedBlocks}) whose pages are held only by a slower tier
   * than the device pool, which the allocation loads back (none here; HiSparse: the host tier).
   */
  numHostHitTokensOf(_hits: readonly KVCacheBlock[]): number {
    return 0;
  }

  /** Hashes of the request's full blocks, computed up to its current token count. */
  blockHashesOf(request: Request): readonly BlockHash[] {
    let hashes = this.reqToBlockHashes.get(request.requestId);
    if (hashes === undefined) {
      hashes = [];
      this.reqToBlockHashes.set(request.requestId, hashes);
    }
    return extendBlockHashes(request.allTokenIds, this.blockSize, hashes);
  }

  /**
   * Prefix-cache lookup (vLLM get_computed_blocks): the longest run of cached full blocks that
   * match the request's first tokens, leaving at least its last token to compute (the model must
   * run on one token to produce logits). Takes no references; pass the result to `allocateSlots`.
   * @returns no blocks when caching is off.
   */
  getComputedBlocks(request: Request): ComputedBlocks {
    if (!this.enableCaching) return { blocks: [], numComputedTokens: 0 };
    const hashes = this.blockHashesOf(request);
    const maxHitBlocks = Math.min(hashes.length, Math.floor((request.numTokens - 1) / this.blockSize));
    const blocks: KVCacheBlock[] = [];
    for (let i = 0; i < maxHitBlocks; i++) {
      const b = this.blockPool.getCachedBlock(hashes[i]!);
      if (b === null) break;
      blocks.push(b);
    }
    return { blocks, numComputedTokens: blocks.length * this.blockSize };
  }

  /**
   * Fresh blocks `allocateSlots` would take from the free queue: enough for the request's first
   * `numComputedTokens + hits + numNewTokens` tokens, less the blocks it holds and the hits.
   * Subclasses that allocate more per request (HiSparse hot buffers) add to it.
   */
  numBlocksToAllocate(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = NO_COMPUTED_BLOCKS,
  ): number {
    return this.numTokenBlocksToAllocate(request, numNewTokens, newComputedBlocks);
  }

  /**
   * The token blocks (pages) among {@link numBlocksToAllocate}: released pages count as held,
   * since their positions keep their place in the list.
   */
  protected numTokenBlocksToAllocate(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[],
  ): number {
    const held = this.reqToBlocks.get(request.requestId)?.length ?? 0;
    const numTokensNeedSlot =
      request.numComputedTokens + newComputedBlocks.length * this.blockSize + numNewTokens;
    const needed = Math.ceil(numTokensNeedSlot / this.blockSize) - held - newComputedBlocks.length;
    return Math.max(0, needed);
  }

  /**
   * Answers whether `allocateSlots` with the same arguments would succeed. Hits that sit in the
   * free queue (ref count 0) leave it when touched, so they do not count as free space.
   */
  canAllocate(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = NO_COMPUTED_BLOCKS,
  ): boolean {
    const numEvictableHits = newComputedBlocks.filter((b) => b.refCnt === 0).length;
    const available = this.blockPool.numFreeBlocks - numEvictableHits;
    return this.numBlocksToAllocate(request, numNewTokens, newComputedBlocks) <= available;
  }

  /**
   * Gives the request slots for `numNewTokens` more tokens after its `numComputedTokens` and the
   * prefix hits `newComputedBlocks` (vLLM allocate_slots). Plan, then apply: on failure nothing
   * changes. On success the hits are referenced and appended to the request's blocks, fresh
   * blocks follow them, and (caching on) every block that becomes full is registered by hash.
   * @param numNewTokens tokens to compute this step (>= 1).
   * @param newComputedBlocks prefix hits from `getComputedBlocks` (only for a request holding no blocks).
   * @returns ids of the fresh blocks (possibly empty), or null when the pool is too small now.
   * @throws Error when numNewTokens < 1 or hits are passed for a request that holds blocks.
   */
  allocateSlots(
    request: Request,
    numNewTokens: number,
    newComputedBlocks: readonly KVCacheBlock[] = NO_COMPUTED_BLOCKS,
  ): BlockId[] | null {
    if (!Number.isInteger(numNewTokens) || numNewTokens < 1)
      throw new Error(`numNewTokens must be a positive integer, got ${numNewTokens}`);
    const reqId = request.requestId;
    const held = this.reqToBlocks.get(reqId);
    if (newComputedBlocks.length > 0 && held !== undefined && held.length > 0)
      throw new Error(
        `request ${reqId} already holds blocks; prefix hits apply only to its first allocation`,
      );
    if (!this.canAllocate(request, numNewTokens, newComputedBlocks)) return null;

    const numToAllocate = this.numTokenBlocksToAllocate(request, numNewTokens, newComputedBlocks);
    const blocks = held ?? [];
    if (held === undefined) this.reqToBlocks.set(reqId, blocks);
    if (newComputedBlocks.length > 0) {
      blocks.push(...this.takeComputedBlocks(request, newComputedBlocks));
      this.reqToNumCachedBlocks.set(reqId, newComputedBlocks.length);
    }
    const fresh = this.blockPool.getNewBlocks(numToAllocate);
    blocks.push(...fresh);

    const numTokensToCache = Math.min(
      request.numComputedTokens + newComputedBlocks.length * this.blockSize + numNewTokens,
      request.numTokens,
    );
    this.cacheBlocks(request, numTokensToCache);
    return fresh.map((b) => b.blockId);
  }

  /**
   * Takes references on a first allocation's prefix hits and returns the blocks the request's
   * list starts with, in token order (already registered in the cache). Dense: the hits
   * themselves. HiSparse replaces the placeholders of host-resident hits with fresh blocks.
   */
  protected takeComputedBlocks(_request: Request, hits: readonly KVCacheBlock[]): KVCacheBlock[] {
    this.blockPool.touch(hits);
    return [...hits];
  }

  /**
   * Whether {@link releaseBlocks} may drop a page's reference with prefix caching on (HiSparse,
   * whose pages are identified by their host block: a shared page stays resident while another
   * request holds it).
   */
  protected get releasesSharedPages(): boolean {
    return false;
  }

  /**
   * Returns the request's blocks to the pool, tail first, so that its last blocks are evicted
   * before its first ones (which other requests are likelier to share). Released pages
   * ({@link NULL_BLOCK_ID}) hold no block and are skipped. Keeps its block hashes (a preempted
   * request reuses them); no-op for a request holding no blocks.
   */
  free(request: Request): void {
    const reqId = request.requestId;
    const blocks = this.reqToBlocks.get(reqId);
    this.reqToBlocks.delete(reqId);
    this.reqToNumCachedBlocks.delete(reqId);
    if (blocks !== undefined) this.blockPool.freeBlocks(blocks.filter((b) => b !== NULL_BLOCK).reverse());
  }

  /**
   * Releases the device blocks of some pages of a running request (HiSparse spills pages whose
   * KV is kept in host memory): each becomes {@link NULL_BLOCK_ID} in the request's list, which
   * keeps its length (token i still lives at page floor(i / blockSize)), and its block returns to
   * the pool, in the order given (the first is reused first). Plan, then apply: every index is
   * checked before anything changes.
   * @param pageIndices distinct indices into the request's block list, each holding a block.
   * @returns the released block ids, in the order given.
   * @throws Error (and changes nothing) when the request holds no blocks, an index is out of
   *   range, repeated or already released, or prefix caching is on (a cached block may be shared).
   */
  releaseBlocks(reqId: RequestId, pageIndices: readonly number[]): BlockId[] {
    const blocks = this.reqToBlocks.get(reqId);
    if (blocks === undefined) throw new Error(`request ${reqId} holds no blocks to release`);
    if (this.enableCaching && !this.releasesSharedPages)
      throw new Error("releasing pages of a request is not supported with prefix caching");
    const seen = new Set<number>();
    for (const i of pageIndices) {
      if (!Number.isInteger(i) || i < 0 || i >= blocks.length)
        throw new Error(`request ${reqId} has no page ${i} (it holds ${blocks.length})`);
      if (seen.has(i) || blocks[i] === NULL_BLOCK)
        throw new Error(`page ${i} of request ${reqId} is released twice`);
      seen.add(i);
    }
    const released = pageIndices.map((i) => blocks[i]!);
    for (const i of pageIndices) blocks[i] = NULL_BLOCK;
    this.blockPool.freeBlocks(released);
    return released.map((b) => b.blockId);
  }

  /** Forgets the request's block hashes (call once it is finished). */
  freeBlockHashes(reqId: RequestId): void {
    this.reqToBlockHashes.delete(reqId);
  }

  /** Ids of the request's blocks in token order, NULL_BLOCK_ID for released pages (empty when it holds none). */
  getBlockIds(reqId: RequestId): BlockId[] {
    return (this.reqToBlocks.get(reqId) ?? []).map((b) => b.blockId);
  }

  /** The request's blocks in token order (empty when it holds none). */
  getBlocks(reqId: RequestId): readonly KVCacheBlock[] {
    return this.reqToBlocks.get(reqId) ?? NO_COMPUTED_BLOCKS;
  }

  /** Registers the request's blocks that are full within its first `numTokens` tokens. */
  protected cacheBlocks(request: Request, numTokens: number): void {
    if (!this.enableCaching) return;
    const reqId = request.requestId;
    const numFull = Math.floor(numTokens / this.blockSize);
    const numCached = this.reqToNumCachedBlocks.get(reqId) ?? 0;
    if (numFull <= numCached) return;
    const blocks = this.reqToBlocks.get(reqId)!;
    const hashes = this.blockHashesOf(request);
    this.blockPool.cacheFullBlocks(blocks.slice(numCached, numFull), hashes.slice(numCached, numFull));
    this.reqToNumCachedBlocks.set(reqId, numFull);
  }
}
