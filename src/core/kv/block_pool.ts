import { asBlockId, type BlockId } from "../ids.js";
import type { BlockHash } from "./block_hash.js";
import { FreeBlockQueue, KVCacheBlock } from "./kv_cache_block.js";

/**
 * The device KV blocks and their reference counts (vllm/v1/core/block_pool.py BlockPool).
 *
 * Every block is in exactly one of two states:
 * - in use: `refCnt > 0`, held by one or more requests' block lists, not in the free queue;
 * - free: `refCnt == 0`, in the free queue. A free block that still has a `blockHash` is an
 *   evictable prefix-cache entry: `touch` revives it, `getNewBlocks` evicts it.
 *
 * All `numGpuBlocks` blocks are usable (there is no reserved null block).
 */
export class BlockPool {
  readonly numGpuBlocks: number;
  readonly enableCaching: boolean;
  /** All blocks, indexed by block id. */
  readonly blocks: readonly KVCacheBlock[];
  private readonly freeBlockQueue: FreeBlockQueue;
  /**
   * Prefix cache: block hash -> blocks with that hash, by id. Two blocks can share a hash when
   * two requests filled the same prefix before either could hit the other's block.
   */
  private readonly cachedBlockHashToBlock = new Map<BlockHash, Map<BlockId, KVCacheBlock>>();
  /**
   * Called when `getNewBlocks` evicts a free cached block (its hash is dropped before the call),
   * so that an owner pairing blocks with other state (HiSparse: the page's host block) can follow.
   */
  onEvict: ((block: KVCacheBlock, hash: BlockHash) => void) | null = null;

  /**
   * @param numGpuBlocks number of device blocks (>= 1).
   * @param enableCaching register full blocks by hash for prefix caching.
   * @throws Error when numGpuBlocks is not a positive integer.
   */
  constructor(numGpuBlocks: number, enableCaching: boolean) {
    if (!Number.isInteger(numGpuBlocks) || numGpuBlocks < 1)
      throw new Error(`the KV cache needs at least one block, got ${numGpuBlocks}`);
    this.numGpuBlocks = numGpuBlocks;
    this.enableCaching = enableCaching;
    const blocks: KVCacheBlock[] = [];
    for (let i = 0; i < numGpuBlocks; i++) blocks.push(new KVCacheBlock(asBlockId(i)));
    this.blocks = blocks;
    this.freeBlockQueue = new FreeBlockQueue(blocks);
  }

  /** Blocks in the free queue (including evictable cached blocks). */
  get numFreeBlocks(): number {
    return this.freeBlockQueue.numFreeBlocks;
  }

  /** Fraction of blocks in use, in [0, 1] (vLLM get_usage). */
  get usage(): number {
    return 1 - this.numFreeBlocks / this.numGpuBlocks;
  }

  /** The free queue from front (evicted first) to back; for tests and debugging. */
  freeBlockIds(): BlockId[] {
    return this.freeBlockQueue.getAllFreeBlocks().map((b) => b.blockId);
  }

  /** A cached block with this hash, or null (prefix-cache lookup; does not change ref counts). */
  getCachedBlock(blockHash: BlockHash): KVCacheBlock | null {
    const byId = this.cachedBlockHashToBlock.get(blockHash);
    if (byId === undefined) return null;
    for (const b of byId.values()) return b;
    return null;
  }

  /**
   * Takes `n` blocks from the front of the free queue, evicting their prefix-cache entries, and
   * sets their ref counts to 1.
   * @returns the blocks, in free-queue order.
   * @throws Error when fewer than `n` blocks are free (callers check `numFreeBlocks` first).
   */
  getNewBlocks(n: number): KVCacheBlock[] {
    if (n > this.numFreeBlocks)
      throw new Error(`cannot get ${n} blocks, only ${this.numFreeBlocks} are free`);
    const out = this.freeBlockQueue.popleftN(n);
    for (const b of out) {
      if (b.refCnt !== 0) throw new Error(`free block ${b.blockId} has ref count ${b.refCnt}`);
      this.maybeEvictCachedBlock(b);
      b.refCnt = 1;
    }
    return out;
  }

  /**
   * Adds a reference to each block (prefix-cache hit); a block revived from ref count 0 leaves
   * the free queue.
   */
  touch(blocks: readonly KVCacheBlock[]): void {
    for (const b of blocks) {
      if (b.refCnt === 0) this.freeBlockQueue.remove(b);
      b.refCnt++;
    }
  }

  /**
   * Drops one reference from each block, in the order given; blocks that reach 0 are appended
   * to the free queue in that order, so the first of them is evicted first.
   * @throws Error when a block is already free (a double free).
   */
  freeBlocks(orderedBlocks: readonly KVCacheBlock[]): void {
    for (const b of orderedBlocks) {
      if (b.refCnt <= 0) throw new Error(`block ${b.blockId} is freed twice`);
      b.refCnt--;
      if (b.refCnt === 0) this.freeBlockQueue.append(b);
    }
  }

  /**
   * Registers full blocks in the prefix cache (vLLM cache_full_blocks). No-op when caching is off.
   * @param blocks the newly full blocks, in token order.
   * @param blockHashes their hashes, same length.
   * @throws Error on a length mismatch or when a block already has a hash (an internal bug).
   */
  cacheFullBlocks(blocks: readonly KVCacheBlock[], blockHashes: readonly BlockHash[]): void {
    if (!this.enableCaching) return;
    if (blocks.length !== blockHashes.length)
      throw new Error(`cacheFullBlocks got ${blocks.length} blocks but ${blockHashes.length} hashes`);
    blocks.forEach((b, i) => {
      if (b.blockHash !== null) throw new Error(`block ${b.blockId} is already cached`);
      const h = blockHashes[i]!;
      b.blockHash = h;
      let byId = this.cachedBlockHashToBlock.get(h);
      if (byId === undefined) {
        byId = new Map();
        this.cachedBlockHashToBlock.set(h, byId);
      }
      byId.set(b.blockId, b);
    });
  }

  /**
   * Drops every prefix-cache entry (vLLM reset_prefix_cache), only when no block is in use, so
   * that no running request's blocks lose their hashes.
   * @returns true when the cache was reset, false when some block is still in use.
   */
  resetPrefixCache(): boolean {
    if (this.numFreeBlocks !== this.numGpuBlocks) return false;
    this.cachedBlockHashToBlock.clear();
    for (const b of this.blocks) b.blockHash = null;
    return true;
  }

  /** Number of distinct hashes in the prefix cache (for tests and stats). */
  get numCachedHashes(): number {
    return this.cachedBlockHashToBlock.size;
  }

  private maybeEvictCachedBlock(b: KVCacheBlock): void {
    const h = b.blockHash;
    if (h === null) return;
    this.uncacheBlock(b);
    this.onEvict?.(b, h);
  }

  /** Drops the block's prefix-cache entry, if any (it keeps its references and queue place). */
  uncacheBlock(b: KVCacheBlock): void {
    const h = b.blockHash;
    if (h === null) return;
    b.blockHash = null;
    const byId = this.cachedBlockHashToBlock.get(h);
    if (byId === undefined) return;
    byId.delete(b.blockId);
    if (byId.size === 0) this.cachedBlockHashToBlock.delete(h);
  }
}
