import { asHostBlockId, type HostBlockId } from "../ids.js";
import type { BlockHash } from "../kv/block_hash.js";

/** Link value of a host block that is not in the free queue, and of the queue's ends. */
const NONE = -1;

/**
 * Pages of the host tier (pinned host memory; SGLang's host KV pool, vLLM's CPU offload pool):
 * `numHostBlocks` slots, each holding one page's KV of every sparse layer. In a HiSparse mode
 * every page of every request owns one host block from its creation to its request's end (page
 * identity = host block), so a spill needs no allocation and no copy.
 *
 * Reference counts and the prefix cache (vLLM's BlockPool habits, for the host tier): a block is
 * in use while some request's page list holds it (`refCount > 0`; with prefix caching, several
 * requests sharing a prefix hold the same block), free otherwise. A free block that still has a
 * hash is an evictable cache entry (host-tier retention: the pages of finished requests stay
 * reusable); `allocate` evicts entries from the front of the free queue, so the least recently
 * freed go first, and `touch` revives one. Free blocks (cached or not) count as free: a cache
 * entry is always evicted before an allocation fails.
 *
 * Free blocks are handed out lowest id first at the start, and freed blocks return to the back of
 * the queue in the order given (FIFO reuse = LRU eviction), so allocation order is deterministic
 * and testable.
 */
export class HostBlockPool {
  readonly numHostBlocks: number;
  /** Free-queue links (doubly linked through the ids; NONE at the ends and for blocks in use). */
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private head = NONE;
  private tail = NONE;
  private numFree: number;
  /** References per block (0 = free). */
  private readonly refCnt: Int32Array;
  /** Hash of each cached block (prefix cache), null otherwise. */
  private readonly hashes: Array<BlockHash | null>;
  private readonly hashToBlock = new Map<BlockHash, HostBlockId>();
  /**
   * Called when `allocate` evicts a free cached block (its hash is dropped before the call), so
   * that the owner can drop what refers to it (the page's device copy).
   */
  onEvict: ((id: HostBlockId, hash: BlockHash) => void) | null = null;

  /**
   * @param numHostBlocks number of host blocks (>= 1).
   * @throws Error when numHostBlocks is not a positive integer.
   */
  constructor(numHostBlocks: number) {
    if (!Number.isInteger(numHostBlocks) || numHostBlocks < 1)
      throw new Error(`the host pool needs at least one block, got ${numHostBlocks}`);
    this.numHostBlocks = numHostBlocks;
    this.prev = new Int32Array(numHostBlocks).fill(NONE);
    this.next = new Int32Array(numHostBlocks).fill(NONE);
    this.refCnt = new Int32Array(numHostBlocks);
    this.hashes = new Array<BlockHash | null>(numHostBlocks).fill(null);
    this.numFree = 0;
    for (let i = 0; i < numHostBlocks; i++) this.append(i);
  }

  /** Free blocks, evictable cache entries included. */
  get numFreeBlocks(): number {
    return this.numFree;
  }
  get numUsedBlocks(): number {
    return this.numHostBlocks - this.numFree;
  }
  /** Fraction of host blocks in use, in [0, 1] (cache entries of finished requests count as free). */
  get usage(): number {
    return this.numUsedBlocks / this.numHostBlocks;
  }
  /** Blocks registered in the prefix cache (in use or free). */
  get numCachedBlocks(): number {
    return this.hashToBlock.size;
  }

  /** Requests holding the block (0 = free). */
  refCount(id: HostBlockId): number {
    return this.refCnt[id] ?? 0;
  }

  /** The block's prefix-cache hash, or null. */
  hashOf(id: HostBlockId): BlockHash | null {
    return this.hashes[id] ?? null;
  }

  /**
   * Takes `n` blocks from the front of the free queue, evicting their cache entries, with ref
   * count 1. Plan, then apply: on failure nothing changes.
   * @returns the ids in queue order, or null when fewer than `n` are free.
   */
  allocate(n: number): HostBlockId[] | null {
    if (n > this.numFree) return null;
    const out: HostBlockId[] = [];
    for (let i = 0; i < n; i++) {
      const id = this.head;
      this.unlink(id);
      this.refCnt[id] = 1;
      const h = this.hashes[id]!;
      if (h !== null) {
        this.uncache(asHostBlockId(id));
        this.onEvict?.(asHostBlockId(id), h);
      }
      out.push(asHostBlockId(id));
    }
    return out;
  }

  /**
   * Adds a reference to each block (a prefix-cache hit); a free one leaves the free queue.
   * @throws Error for an id out of range.
   */
  touch(ids: readonly HostBlockId[]): void {
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.numHostBlocks)
        throw new Error(`host block ${id} does not exist`);
      if (this.refCnt[id] === 0) this.unlink(id);
      this.refCnt[id]!++;
    }
  }

  /**
   * Drops one reference from each block, in the order given; blocks that reach 0 go to the back
   * of the free queue in that order (the first is evicted or reused first). Cached ones stay in
   * the cache until evicted.
   * @throws Error (and changes nothing) when a block is out of range, not allocated, or listed
   *   more often than it is referenced.
   */
  free(ids: readonly HostBlockId[]): void {
    const drops = new Map<number, number>();
    for (const id of ids) {
      const d = (drops.get(id) ?? 0) + 1;
      if (!Number.isInteger(id) || id < 0 || id >= this.numHostBlocks || this.refCnt[id]! < d)
        throw new Error(`host block ${id} is not allocated (freed twice?)`);
      drops.set(id, d);
    }
    for (const id of ids) {
      this.refCnt[id]!--;
      if (this.refCnt[id] === 0) this.append(id);
    }
  }

  /**
   * Registers a full page in the prefix cache under `hash`.
   * @returns false (no change) when another block already holds that hash or this block is cached.
   */
  cache(id: HostBlockId, hash: BlockHash): boolean {
    if (this.hashToBlock.has(hash) || this.hashes[id] !== null) return false;
    this.hashes[id] = hash;
    this.hashToBlock.set(hash, id);
    return true;
  }

  /** Drops the block's cache entry (if any); the block keeps its references and place. */
  uncache(id: HostBlockId): void {
    const h = this.hashes[id];
    if (h === null || h === undefined) return;
    this.hashes[id] = null;
    this.hashToBlock.delete(h);
  }

  /** The cached block with this hash (in use or free), or null; changes nothing. */
  getCachedBlock(hash: BlockHash): HostBlockId | null {
    return this.hashToBlock.get(hash) ?? null;
  }

  /** Free ids from front (next to be allocated) to back; for tests. */
  freeBlockIds(): HostBlockId[] {
    const out: HostBlockId[] = [];
    for (let id = this.head; id !== NONE; id = this.next[id]!) out.push(asHostBlockId(id));
    return out;
  }

  private append(id: number): void {
    this.prev[id] = this.tail;
    this.next[id] = NONE;
    if (this.tail === NONE) this.head = id;
    else this.next[this.tail] = id;
    this.tail = id;
    this.numFree++;
  }

  private unlink(id: number): void {
    const p = this.prev[id]!;
    const n = this.next[id]!;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
    this.prev[id] = NONE;
    this.next[id] = NONE;
    this.numFree--;
  }
}
