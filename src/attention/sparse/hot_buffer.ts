import type { Tensor } from "../../backends/backend.js";
import type { RequestId } from "../../core/ids.js";
import type { PageSelection, SparseBatch } from "./selector.js";

/**
 * The host tier as the resolver sees it: where INACTIVE pages' KV lives. Implemented by the
 * worker (worker/hisparse/host_kv_cache.ts on the CPU; pinned host memory read by a UVA gather
 * kernel on CUDA).
 */
export interface HostKvTier {
  /** Bytes of one (page, sparse layer, kv head) slice: K and V of blockSize tokens. */
  readonly sliceBytes: number;
  /**
   * Copies the K/V of kv head `g` of sparse layer `sparseLayer` of the page in host block
   * `hostBlockId` into the same (offset, head) positions of device block `blockId` of `kvCache`
   * (that layer's cache, [numBlocks, 2, blockSize, Hkv, D]); other heads are untouched.
   */
  loadHeadSlice(sparseLayer: number, hostBlockId: number, g: number, kvCache: Tensor, blockId: number): void;
}

/** Device blocks of a selection, aligned with it, and the tokens each (request, head) attends over. */
export interface ResolvedPages {
  /** [S * Hkv + 1] the selection's offsets. */
  start: Int32Array;
  /** Device block of each selected page (its own block, or a hot-buffer block). */
  blockIds: Int32Array;
  /** [S * Hkv] full selected pages * blockSize + the tail page's tokens. */
  seqLens: Int32Array;
}

/** Per-step counters of a resolver. */
export interface HotBufferCounters {
  hits: number;
  misses: number;
  hostToDeviceBytes: number;
}

/** Maps selected pages to device locations, recalling INACTIVE ones into the hot buffer (DESIGN.md §4 step 3). */
export interface HotBufferResolver {
  /**
   * Resolves every selected page of sparse layer `sparseLayer`: ACTIVE -> its block; held in the
   * request's hot buffer -> that block (hit); else copied from the host tier into an LRU victim
   * slot (miss). `kvCache` is that layer's cache (copies land in it).
   * @throws Error when a selection holds more INACTIVE pages than the hot buffer has slots, or
   *   an INACTIVE page of a request without a hot buffer.
   */
  resolve(sparseLayer: number, selection: PageSelection, batch: SparseBatch, kvCache: Tensor): ResolvedPages;
  /** Drops a request's hot-buffer state (finished, preempted, or given new hot blocks). */
  forget(reqId: RequestId): void;
  /** Counters since the last call. */
  takeCounters(): HotBufferCounters;
  /** INACTIVE pages held in some slot (SPARSE), over all requests. */
  readonly numSparsePages: number;
}

/** `slotPage` of an empty slot. */
const EMPTY_SLOT = -1;

/**
 * The LRU of one (request, sparse layer, kv head): slot s is the [layer, head] slice of the
 * request's hot block s. Resolution of one step is two-phase, as SGLang's swap-in kernel
 * (LMSYS HiSparse blog): first every hit is marked used in this step, then each miss (in page
 * order) takes the least recently used slot not used in this step, empty slots first, ties to
 * the lowest slot. So a page selected in this step is never evicted by another of the same step.
 */
export class HotBufferLru {
  /** [numSlots] page held by each slot, or EMPTY_SLOT. */
  readonly slotPage: Int32Array;
  /** [numSlots] step counter of the last use (-1: never). */
  readonly lastUse: Int32Array;
  private readonly pageToSlot = new Map<number, number>();
  /** Number of resolve rounds so far (the "step" of lastUse). */
  private tick = 0;

  constructor(numSlots: number) {
    this.slotPage = new Int32Array(numSlots).fill(EMPTY_SLOT);
    this.lastUse = new Int32Array(numSlots).fill(-1);
  }

  /** Starts a resolve round (one per step). */
  beginRound(): void {
    this.tick++;
  }

  /** The slot holding `page`, marked used in this round, or -1 (a miss). */
  hit(page: number): number {
    const slot = this.pageToSlot.get(page);
    if (slot === undefined) return -1;
    this.lastUse[slot] = this.tick;
    return slot;
  }

  /**
   * Gives `page` the least recently used slot not used in this round and marks it used.
   * @returns the slot and the page it evicted (EMPTY_SLOT when none).
   * @throws Error when every slot was used in this round.
   */
  insert(page: number): { slot: number; evicted: number } {
    let best = -1;
    for (let s = 0; s < this.slotPage.length; s++) {
      if (this.lastUse[s]! >= this.tick) continue; // used in this round
      if (best < 0 || this.lastUse[s]! < this.lastUse[best]!) best = s;
    }
    if (best < 0)
      throw new Error(`the hot buffer has ${this.slotPage.length} slots, fewer than this step's pages`);
    const evicted = this.slotPage[best]!;
    if (evicted !== EMPTY_SLOT) this.pageToSlot.delete(evicted);
    this.slotPage[best] = page;
    this.lastUse[best] = this.tick;
    this.pageToSlot.set(page, best);
    return { slot: best, evicted };
  }
}

/** Hot-buffer state of one request. */
interface RequestHotBuffer {
  /** The request's hot blocks (slot s = hotBlockIds[s]). */
  hotBlockIds: Int32Array;
  /** [numSparseLayers * Hkv] one LRU per (layer, kv head). */
  lrus: HotBufferLru[];
  /** Page -> number of (layer, head) slots holding it. */
  heldPages: Map<number, number>;
}

/**
 * The resolver on the CPU (the oracle of the CUDA resolver kernel): one {@link HotBufferLru}
 * per (request, sparse layer, kv head), misses copied through a {@link HostKvTier}.
 */
export class LruHotBufferResolver implements HotBufferResolver {
  private readonly reqs = new Map<RequestId, RequestHotBuffer>();
  private counters: HotBufferCounters = { hits: 0, misses: 0, hostToDeviceBytes: 0 };
  private numHeld = 0;

  constructor(
    private readonly tier: HostKvTier,
    private readonly blockSize: number,
    private readonly numKvHeads: number,
    private readonly numSparseLayers: number,
  ) {}

  get numSparsePages(): number {
    return this.numHeld;
  }

  resolve(sparseLayer: number, selection: PageSelection, batch: SparseBatch, kvCache: Tensor): ResolvedPages {
    const Hkv = this.numKvHeads;
    const blockIds = new Int32Array(selection.pages.length);
    const seqLens = new Int32Array(batch.numSparse * Hkv);
    for (let s = 0; s < batch.numSparse; s++) {
      const buf = this.bufferOf(batch, s);
      const p0 = batch.pageStart[s]!;
      const numPages = Math.ceil(batch.numTokens[s]! / this.blockSize);
      for (let g = 0; g < Hkv; g++) {
        const i = s * Hkv + g;
        const [a, b] = [selection.start[i]!, selection.start[i + 1]!];
        if (b <= a || selection.pages[b - 1] !== numPages - 1)
          throw new Error(`the selection of request ${batch.reqIds[s]} head ${g} lacks its tail page`);
        const lru = buf?.lrus[sparseLayer * Hkv + g];
        lru?.beginRound();
        const misses: number[] = [];
        for (let j = a; j < b; j++) {
          const page = selection.pages[j]!;
          const own = batch.blockIds[p0 + page]!;
          if (own >= 0) blockIds[j] = own;
          else if (buf === null || lru === undefined)
            throw new Error(`request ${batch.reqIds[s]} selects INACTIVE page ${page} without a hot buffer`);
          else {
            const slot = lru.hit(page);
            if (slot < 0) misses.push(j);
            else {
              blockIds[j] = buf.hotBlockIds[slot]!;
              this.counters.hits++;
            }
          }
        }
        for (const j of misses) {
          // a miss was only recorded with a buffer (the INACTIVE case without one threw above)
          const page = selection.pages[j]!;
          const { slot, evicted } = lru!.insert(page);
          this.release(buf!, evicted);
          this.hold(buf!, page);
          const hot = buf!.hotBlockIds[slot]!;
          this.tier.loadHeadSlice(sparseLayer, batch.hostBlockIds[p0 + page]!, g, kvCache, hot);
          blockIds[j] = hot;
          this.counters.misses++;
          this.counters.hostToDeviceBytes += this.tier.sliceBytes;
        }
        seqLens[i] = (b - a - 1) * this.blockSize + (batch.numTokens[s]! - (numPages - 1) * this.blockSize);
      }
    }
    return { start: selection.start, blockIds, seqLens };
  }

  forget(reqId: RequestId): void {
    const buf = this.reqs.get(reqId);
    if (buf === undefined) return;
    this.numHeld -= buf.heldPages.size;
    this.reqs.delete(reqId);
  }

  takeCounters(): HotBufferCounters {
    const c = this.counters;
    this.counters = { hits: 0, misses: 0, hostToDeviceBytes: 0 };
    return c;
  }

  /**
   * The request's buffer state, created (or reset when its hot blocks changed) from the batch;
   * null for a request without a hot buffer (every page resident: `on` with residency hybrid).
   */
  private bufferOf(batch: SparseBatch, s: number): RequestHotBuffer | null {
    const reqId = batch.reqIds[s]!;
    const hot = batch.hotBlockIds.subarray(batch.hotStart[s]!, batch.hotStart[s + 1]!);
    const cur = this.reqs.get(reqId);
    if (cur !== undefined && sameIds(cur.hotBlockIds, hot)) return cur;
    this.forget(reqId);
    if (hot.length === 0) return null;
    const buf: RequestHotBuffer = {
      hotBlockIds: hot.slice(),
      lrus: Array.from(
        { length: this.numSparseLayers * this.numKvHeads },
        () => new HotBufferLru(hot.length),
      ),
      heldPages: new Map(),
    };
    this.reqs.set(reqId, buf);
    return buf;
  }

  private hold(buf: RequestHotBuffer, page: number): void {
    if (holdPage(buf.heldPages, page)) this.numHeld++;
  }

  private release(buf: RequestHotBuffer, page: number): void {
    if (page !== EMPTY_SLOT && releasePage(buf.heldPages, page)) this.numHeld--;
  }
}

/** True when two id lists are equal element by element (a request's hot blocks unchanged). */
export function sameIds(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * One more hold on `page` in a request's page ref counts (the page stays pinned in the host tier
 * while a hot slot keeps a copy of it). @returns true when the page was not held before.
 */
export function holdPage(held: Map<number, number>, page: number): boolean {
  const n = held.get(page) ?? 0;
  held.set(page, n + 1);
  return n === 0;
}

/** One hold fewer on `page` (held before). @returns true when that was its last hold. */
export function releasePage(held: Map<number, number>, page: number): boolean {
  const n = held.get(page)!;
  if (n > 1) {
    held.set(page, n - 1);
    return false;
  }
  held.delete(page);
  return true;
}
