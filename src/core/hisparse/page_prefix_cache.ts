/**
 * Prefix caching over both tiers of Hybrid HiSparse (DESIGN.md §4). A HiSparse page is
 * identified by its host block (its dense-layer KV and Quest digests live on the device indexed by
 * host block; its sparse-layer KV is mirrored there), so the cache is keyed on host blocks: one
 * host block per block hash ({@link HostBlockPool.cache}), and for each cached page at most one
 * device copy (a device block registered under the same hash in the {@link BlockPool}).
 *
 * A lookup walks the request's block hashes and, per page, answers the device copy when there is
 * one (read in place, ref counted like a dense hit), else the host block alone as a
 * {@link HostResidentHit} when its mirror has completed (the KV is only in pinned host memory;
 * the manager loads it into a fresh device block for the prefill), else stops.
 *
 * The pairing follows evictions in either pool: a device copy evicted by the device pool leaves
 * the page cached host-only (or drops it from the cache when its mirror had not completed: the
 * host block may not hold the KV yet); a host block evicted by the host pool drops its device
 * copy's cache entry (the device block keeps its place in the free queue). A device copy is
 * never held without its host block (every holder of a page holds its host block), so a device
 * copy whose host block is evicted is always free.
 */

import type { BlockId, HostBlockId } from "../ids.js";
import type { BlockHash } from "../kv/block_hash.js";
import type { BlockPool } from "../kv/block_pool.js";
import { KVCacheBlock } from "../kv/kv_cache_block.js";
import { NULL_BLOCK_ID } from "../kv/kv_cache_manager.js";
import type { HostBlockPool } from "./host_block_pool.js";

/**
 * A prefix hit on a page that lives only in the host tier: a placeholder in the hit list (block
 * id {@link NULL_BLOCK_ID}, never in a pool). Its ref count stays 0, so the dense formulas
 * (`canAllocate`, the pressure handler's blocks needed) count it as one block leaving the free
 * queue, which is what it costs: the fresh device block its KV is loaded into.
 */
export class HostResidentHit extends KVCacheBlock {
  constructor(readonly hostBlockId: HostBlockId) {
    super(NULL_BLOCK_ID);
  }
}

/** The two-tier page cache of one HybridKVCacheManager (module comment). */
export class PagePrefixCache {
  /** Cached pages with a device copy: host block -> device block, and back. */
  private readonly hostToDevice = new Map<HostBlockId, KVCacheBlock>();
  private readonly deviceToHost = new Map<BlockId, HostBlockId>();

  /**
   * @param isMirrorComplete whether a host block holds its page's KV (its mirror completed).
   * Installs itself as both pools' eviction listener.
   */
  constructor(
    private readonly blockPool: BlockPool,
    private readonly hostPool: HostBlockPool,
    private readonly isMirrorComplete: (hostBlockId: HostBlockId) => boolean,
  ) {
    blockPool.onEvict = (b) => {
      const h = this.deviceToHost.get(b.blockId);
      if (h === undefined) return;
      this.unlink(h, b);
      if (!this.isMirrorComplete(h)) this.hostPool.uncache(h);
    };
    hostPool.onEvict = (h) => {
      const b = this.hostToDevice.get(h);
      if (b === undefined) return;
      this.unlink(h, b);
      this.blockPool.uncacheBlock(b);
    };
  }

  /**
   * The longest run of cached pages for `hashes[0..maxHitBlocks)`: device copies, or
   * {@link HostResidentHit}s for host-only pages whose mirror completed. Takes no references.
   */
  lookup(hashes: readonly BlockHash[], maxHitBlocks: number): KVCacheBlock[] {
    const out: KVCacheBlock[] = [];
    for (let i = 0; i < maxHitBlocks; i++) {
      const h = this.hostPool.getCachedBlock(hashes[i]!);
      if (h === null) break;
      const b = this.hostToDevice.get(h);
      if (b !== undefined) out.push(b);
      else if (this.isMirrorComplete(h)) out.push(new HostResidentHit(h));
      else break;
    }
    return out;
  }

  /**
   * The host block of a hit from {@link lookup}.
   * @throws Error for a block that is not a cached page's device copy (an internal bug).
   */
  hostBlockOf(hit: KVCacheBlock): HostBlockId {
    if (hit instanceof HostResidentHit) return hit.hostBlockId;
    const h = this.deviceToHost.get(hit.blockId);
    if (h === undefined) throw new Error(`block ${hit.blockId} is not a cached page's device copy`);
    return h;
  }

  /**
   * Registers a full page: its host block under `hash` and, when it has one, its device block as
   * the page's device copy. No change when another page already holds the hash (two requests
   * filled the same prefix at once: the later one stays uncached) or the host block is cached.
   */
  register(hostBlockId: HostBlockId, block: KVCacheBlock | null, hash: BlockHash): void {
    if (!this.hostPool.cache(hostBlockId, hash)) return;
    if (block !== null && block.blockId !== NULL_BLOCK_ID) this.linkDeviceCopy(hostBlockId, block, hash);
  }

  /**
   * Makes `block` (fresh, uncached) the device copy of the cached host page `hostBlockId` (a
   * host-resident hit loaded back for a prefill).
   */
  linkDeviceCopy(hostBlockId: HostBlockId, block: KVCacheBlock, hash: BlockHash): void {
    this.blockPool.cacheFullBlocks([block], [hash]);
    this.hostToDevice.set(hostBlockId, block);
    this.deviceToHost.set(block.blockId, hostBlockId);
  }

  /** The device copy of a cached page, or null (host-only, or not cached). */
  deviceCopyOf(hostBlockId: HostBlockId): KVCacheBlock | null {
    return this.hostToDevice.get(hostBlockId) ?? null;
  }

  private unlink(h: HostBlockId, b: KVCacheBlock): void {
    this.hostToDevice.delete(h);
    this.deviceToHost.delete(b.blockId);
  }
}
