import { asHostBlockId, type HostBlockId } from "../ids.js";

/**
 * Pages of the host tier (pinned host memory; SGLang's host KV pool, vLLM's CPU offload pool):
 * `numHostBlocks` slots, each holding one page's KV of every sparse layer. In a HiSparse mode
 * every page of every request owns one host block from its creation to its request's end (page
 * identity = host block), so a spill needs no allocation and no copy.
 *
 * Free blocks are handed out lowest id first, and freed blocks return to the back of the queue
 * in the order given (FIFO reuse), so allocation order is deterministic and testable.
 */
export class HostBlockPool {
  readonly numHostBlocks: number;
  /** Free ids as a ring buffer (FIFO). */
  private readonly ring: Int32Array;
  private head = 0;
  private numFree: number;
  /** 1 while a block is allocated (catches double frees). */
  private readonly used: Uint8Array;

  /**
   * @param numHostBlocks number of host blocks (>= 1).
   * @throws Error when numHostBlocks is not a positive integer.
   */
  constructor(numHostBlocks: number) {
    if (!Number.isInteger(numHostBlocks) || numHostBlocks < 1)
      throw new Error(`the host pool needs at least one block, got ${numHostBlocks}`);
    this.numHostBlocks = numHostBlocks;
    this.ring = new Int32Array(numHostBlocks);
    for (let i = 0; i < numHostBlocks; i++) this.ring[i] = i;
    this.numFree = numHostBlocks;
    this.used = new Uint8Array(numHostBlocks);
  }

  get numFreeBlocks(): number {
    return this.numFree;
  }
  get numUsedBlocks(): number {
    return this.numHostBlocks - this.numFree;
  }
  /** Fraction of host blocks in use, in [0, 1]. */
  get usage(): number {
    return this.numUsedBlocks / this.numHostBlocks;
  }

  /**
   * Takes `n` blocks from the front of the free queue. Plan, then apply: on failure nothing changes.
   * @returns the ids in queue order, or null when fewer than `n` are free.
   */
  allocate(n: number): HostBlockId[] | null {
    if (n > this.numFree) return null;
    const out: HostBlockId[] = [];
    for (let i = 0; i < n; i++) {
      const id = this.ring[this.head]!;
      this.head = (this.head + 1) % this.numHostBlocks;
      this.used[id] = 1;
      out.push(asHostBlockId(id));
    }
    this.numFree -= n;
    return out;
  }

  /**
   * Returns blocks to the back of the free queue, in the order given.
   * @throws Error (and changes nothing) when a block is out of range, not allocated, or listed twice.
   */
  free(ids: readonly HostBlockId[]): void {
    const seen = new Set<number>();
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.numHostBlocks || this.used[id] !== 1 || seen.has(id))
        throw new Error(`host block ${id} is not allocated (freed twice?)`);
      seen.add(id);
    }
    for (const id of ids) {
      this.used[id] = 0;
      this.ring[(this.head + this.numFree) % this.numHostBlocks] = id;
      this.numFree++;
    }
  }

  /** Free ids from front (next to be allocated) to back; for tests. */
  freeBlockIds(): HostBlockId[] {
    const out: HostBlockId[] = [];
    for (let i = 0; i < this.numFree; i++)
      out.push(asHostBlockId(this.ring[(this.head + i) % this.numHostBlocks]!));
    return out;
  }
}
