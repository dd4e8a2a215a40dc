import type { BlockId } from "../ids.js";
import type { BlockHash } from "./block_hash.js";

/**
 * Metadata of one device KV block (page of `blockSize` tokens), as in vLLM's
 * vllm/v1/core/kv_cache_utils.py KVCacheBlock. Pure bookkeeping: the KV bytes live in the
 * worker's cache tensors at index `blockId`.
 */
export class KVCacheBlock {
  /** Index of the block in the device pool, `0 <= blockId < numGpuBlocks`. */
  readonly blockId: BlockId;
  /** Number of requests whose block lists hold this block. 0 means the block is in the free queue. */
  refCnt = 0;
  /**
   * Hash of the block's tokens (and of every token before them) when the block is full and
   * registered in the prefix cache; null otherwise. A free block with a hash is an evictable
   * cache entry.
   */
  blockHash: BlockHash | null = null;
  /** Neighbours in the {@link FreeBlockQueue}; null while the block is not queued. */
  prevFreeBlock: KVCacheBlock | null = null;
  nextFreeBlock: KVCacheBlock | null = null;

  constructor(blockId: BlockId) {
    this.blockId = blockId;
  }
}

/** Sentinel block id of the free queue's fake head and tail nodes (never a real block). */
const SENTINEL_BLOCK_ID = -1 as BlockId;

/**
 * Doubly linked list of free blocks (vllm/v1/core/kv_cache_utils.py FreeKVCacheBlockQueue),
 * threaded through the blocks' own `prevFreeBlock` / `nextFreeBlock` fields so that
 * `popleft`, `remove` and `append` are O(1) with no allocation.
 *
 * Order is the eviction order: the front holds the block freed least recently (or never used),
 * the back the block freed most recently. `BlockPool.getNewBlocks` takes from the front, so a
 * cached block survives as long as possible; `KVCacheManager.free` appends a request's blocks
 * tail-first so its tail blocks (the least shared) are evicted before its head.
 */
export class FreeBlockQueue {
  private numFree = 0;
  private readonly head = new KVCacheBlock(SENTINEL_BLOCK_ID);
  private readonly tail = new KVCacheBlock(SENTINEL_BLOCK_ID);

  /** Builds the queue over `blocks` in the given order (the pool passes them by ascending id). */
  constructor(blocks: readonly KVCacheBlock[]) {
    this.head.nextFreeBlock = this.tail;
    this.tail.prevFreeBlock = this.head;
    for (const b of blocks) this.append(b);
  }

  /** Number of blocks in the queue. */
  get numFreeBlocks(): number {
    return this.numFree;
  }

  /**
   * Removes and returns the front block (least recently freed).
   * @throws Error when the queue is empty (callers check `numFreeBlocks` first).
   */
  popleft(): KVCacheBlock {
    const first = this.head.nextFreeBlock!;
    if (first === this.tail) throw new Error("no free blocks are left in the free block queue");
    this.unlink(first);
    return first;
  }

  /**
   * Removes and returns the `n` front blocks, front first.
   * @throws Error when fewer than `n` blocks are queued (the queue is left unchanged).
   */
  popleftN(n: number): KVCacheBlock[] {
    if (n > this.numFree) throw new Error(`cannot pop ${n} blocks from a free queue holding ${this.numFree}`);
    const out: KVCacheBlock[] = [];
    for (let i = 0; i < n; i++) out.push(this.popleft());
    return out;
  }

  /**
   * Removes `block` from the middle of the queue (a prefix-cache hit on a free cached block).
   * @throws Error when the block is not in the queue.
   */
  remove(block: KVCacheBlock): void {
    if (block.prevFreeBlock === null || block.nextFreeBlock === null)
      throw new Error(`block ${block.blockId} is not in the free block queue`);
    this.unlink(block);
  }

  /**
   * Appends `block` at the back (most recently freed, evicted last).
   * @throws Error when the block is already queued.
   */
  append(block: KVCacheBlock): void {
    if (block.prevFreeBlock !== null || block.nextFreeBlock !== null)
      throw new Error(`block ${block.blockId} is already in the free block queue`);
    const last = this.tail.prevFreeBlock!;
    last.nextFreeBlock = block;
    block.prevFreeBlock = last;
    block.nextFreeBlock = this.tail;
    this.tail.prevFreeBlock = block;
    this.numFree++;
  }

  /** Appends `blocks` in order (the first of them is evicted first). */
  appendN(blocks: readonly KVCacheBlock[]): void {
    for (const b of blocks) this.append(b);
  }

  /** The queued blocks from front to back (O(n); for tests and debugging). */
  getAllFreeBlocks(): KVCacheBlock[] {
    const out: KVCacheBlock[] = [];
    for (let b = this.head.nextFreeBlock!; b !== this.tail; b = b.nextFreeBlock!) out.push(b);
    return out;
  }

  private unlink(block: KVCacheBlock): void {
    const prev = block.prevFreeBlock!;
    const next = block.nextFreeBlock!;
    prev.nextFreeBlock = next;
    next.prevFreeBlock = prev;
    block.prevFreeBlock = null;
    block.nextFreeBlock = null;
    this.numFree--;
  }
}
