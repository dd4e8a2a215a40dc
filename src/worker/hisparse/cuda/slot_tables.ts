import type { Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import type { ResolverState } from "../../../backends/cuda/hisparse_ops.js";
import type { PageTableRow } from "../../../core/hisparse/plan.js";
import type { RequestId } from "../../../core/ids.js";

/** Sizes of the slot tables. */
export interface SlotTablesConfig {
  /** Request slots: the most requests that hold pages at once (maxNumSeqs). */
  numSlots: number;
  /** Table width in pages: ceil(maxModelLen / blockSize). */
  maxPages: number;
  /** Hot-buffer blocks per request (deviceBufferTokens / blockSize). */
  numHot: number;
  numSparseLayers: number;
  numKvHeads: number;
}

/** Host copy of one slot's rows (what the device holds), to upload only what changed. */
interface SlotRows {
  host: Int32Array;
  block: Int32Array;
  pinned: Int32Array;
  numPages: number;
  hot: Int32Array;
}

/** Byte value whose repetition is the i32 -1 (empty LRU slot, never used). */
const MINUS_ONE_BYTE = 0xff;

/**
 * The HiSparse page tables of the running requests on the device, one row per request slot (as
 * vLLM's persistent input batch keeps per-request rows): host block, device block (-1 when
 * INACTIVE) and pin of every page, the hot blocks, and the resolver's LRU state and held-page
 * counts (hisparse_ops.ts ResolverState). Rows are updated from the plan's PageTableRows by
 * uploading only the entries that changed (the plan sends a request's whole row whenever it
 * changed); a request keeps its slot until it finishes or is preempted. When a request's hot
 * blocks change (a new hot buffer) its LRU state starts over, as LruHotBufferResolver.forget does.
 * All uploads are asynchronous on the backend's stream, before the step's forward.
 */
export class HiSparseSlotTables {
  readonly config: SlotTablesConfig;
  /** i32 [S, W]. */
  readonly hostBlockTable: Tensor;
  readonly blockTable: Tensor;
  readonly pinnedTable: Tensor;
  /** i32 [S, numHot]. */
  readonly hotBlocks: Tensor;
  /** The resolver's state (the tables above plus LRU, held pages, counters). */
  readonly state: ResolverState;
  private readonly slotByReq = new Map<RequestId, number>();
  private readonly freeSlots: number[];
  private readonly rows: SlotRows[];
  /** Set when a slot's held pages were reset since the last read (numSparsePages changes). */
  private heldDirty = false;
  private lastSparsePages = 0;

  /** @throws Error when the device tables cannot be allocated. */
  constructor(
    private readonly backend: CudaBackend,
    config: SlotTablesConfig,
  ) {
    this.config = config;
    const { numSlots: S, maxPages: W, numHot, numSparseLayers: L, numKvHeads: Hkv } = config;
    const alloc = (shape: number[], fill: -1 | 0) =>
      backend.allocateFilled(shape, "i32", fill === -1 ? MINUS_ONE_BYTE : 0);
    this.hostBlockTable = alloc([S, W], -1);
    this.blockTable = alloc([S, W], -1);
    this.pinnedTable = alloc([S, W], 0);
    this.hotBlocks = alloc([S, numHot], -1);
    this.state = {
      blockTable: this.blockTable,
      hostBlockTable: this.hostBlockTable,
      hotBlocks: this.hotBlocks,
      lruPage: alloc([S, L, Hkv, numHot], -1),
      lruLastUse: alloc([S, L, Hkv, numHot], -1),
      lruTick: alloc([S, L, Hkv], 0),
      heldCount: alloc([S, W], 0),
      heldPages: alloc([S], 0),
      counters: alloc([6], 0),
    };
    this.freeSlots = Array.from({ length: S }, (_, i) => S - 1 - i);
    this.rows = Array.from({ length: S }, () => ({
      host: new Int32Array(W).fill(-1),
      block: new Int32Array(W).fill(-1),
      pinned: new Int32Array(W),
      numPages: 0,
      hot: new Int32Array(0),
    }));
  }

  /** Device bytes of the tables for a configuration (for the memory plan). */
  static deviceBytes(c: SlotTablesConfig): number {
    const perSlot = 4 * c.maxPages + c.numHot + 2 * c.numSparseLayers * c.numKvHeads * c.numHot;
    return 4 * (c.numSlots * (perSlot + c.numSparseLayers * c.numKvHeads + 1) + 6);
  }

  /** The slot of a request, or undefined when it holds none. */
  slotOf(reqId: RequestId): number | undefined {
    return this.slotByReq.get(reqId);
  }

  /** Host copy of a slot's host-block row (entries past the request's pages are -1). */
  hostRow(slot: number): Int32Array {
    return this.rows[slot]!.host;
  }

  /** Number of requests holding a slot. */
  get numRequests(): number {
    return this.slotByReq.size;
  }

  /**
   * Applies one page-table row of the plan: gives the request a slot on first sight, uploads the
   * changed entries, and starts the LRU state over when the hot blocks changed.
   * @throws Error when every slot is taken or the row is longer than the tables.
   */
  applyRow(row: PageTableRow): void {
    const W = this.config.maxPages;
    const n = row.hostBlockIds.length;
    if (n > W || row.blockIds.length !== n)
      throw new Error(
        `the page table of request ${row.reqId} has ${n} pages, more than the ${W} a slot holds`,
      );
    let slot = this.slotByReq.get(row.reqId);
    if (slot === undefined) {
      slot = this.freeSlots.pop();
      if (slot === undefined) throw new Error(`no HiSparse request slot is free for request ${row.reqId}`);
      this.slotByReq.set(row.reqId, slot);
      this.resetLru(slot);
    }
    const cur = this.rows[slot]!;
    const pinned = new Int32Array(W);
    for (const p of row.pinnedPages) if (p < W) pinned[p] = 1;
    const upTo = Math.max(n, cur.numPages);
    this.syncRange(this.hostBlockTable, slot, cur.host, Int32Array.from(row.hostBlockIds), upTo, -1);
    this.syncRange(this.blockTable, slot, cur.block, Int32Array.from(row.blockIds), upTo, -1);
    this.syncRange(this.pinnedTable, slot, cur.pinned, pinned, W, 0);
    cur.numPages = n;
    const hot = Int32Array.from(row.hotBlockIds);
    if (!sameIds(hot, cur.hot)) {
      const numHot = this.config.numHot;
      if (hot.length !== 0 && hot.length !== numHot)
        throw new Error(`request ${row.reqId} has ${hot.length} hot blocks, expected ${numHot}`);
      const full = new Int32Array(numHot).fill(-1);
      full.set(hot);
      this.backend.writeRange(this.hotBlocks, slot * numHot, full);
      if (cur.hot.length > 0) this.resetLru(slot);
      cur.hot = hot;
    }
  }

  /** Frees the slot of a finished or preempted request (its LRU state is reset now). */
  release(reqId: RequestId): void {
    const slot = this.slotByReq.get(reqId);
    if (slot === undefined) return;
    this.slotByReq.delete(reqId);
    this.resetLru(slot);
    const cur = this.rows[slot]!;
    cur.hot = new Int32Array(0);
    this.freeSlots.push(slot);
  }

  /**
   * This step's resolver counters (hits, misses, errors), then zeroes them on the device.
   * Synchronous (reads device memory); call after the step's forward.
   */
  takeCounters(): { hits: number; misses: number; errors: number } {
    const c = this.backend.toHost(this.state.counters) as Int32Array;
    const u64 = (i: number) => (c[2 * i]! >>> 0) + (c[2 * i + 1]! >>> 0) * 2 ** 32;
    this.backend.fillRange(this.state.counters, 0, 6, 0);
    return { hits: u64(0), misses: u64(1), errors: u64(2) };
  }

  /**
   * INACTIVE pages held in some hot-buffer slot, over the live requests (SPARSE pages). Reads
   * device memory only when a resolve ran (`resolved`) or a slot was reset since the last read.
   */
  numSparsePages(resolved: boolean): number {
    if (!resolved && !this.heldDirty) return this.lastSparsePages;
    const held = this.backend.toHost(this.state.heldPages) as Int32Array;
    let n = 0;
    for (const slot of this.slotByReq.values()) n += held[slot]!;
    this.heldDirty = false;
    this.lastSparsePages = n;
    return n;
  }

  /** Frees the device tables. */
  dispose(): void {
    const s = this.state;
    for (const t of [
      this.hostBlockTable,
      this.blockTable,
      this.pinnedTable,
      this.hotBlocks,
      s.lruPage,
      s.lruLastUse,
      s.lruTick,
      s.heldCount,
      s.heldPages,
      s.counters,
    ])
      this.backend.free(t);
  }

  /** Uploads entries [first, last] of row `slot` that differ between `cur` and `next` (padded with `pad` past next.length). */
  private syncRange(
    t: Tensor,
    slot: number,
    cur: Int32Array,
    next: Int32Array,
    upTo: number,
    pad: number,
  ): void {
    let first = -1;
    let last = -1;
    for (let i = 0; i < upTo; i++) {
      const v = i < next.length ? next[i]! : pad;
      if (v !== cur[i]) {
        if (first < 0) first = i;
        last = i;
        cur[i] = v;
      }
    }
    if (first < 0) return;
    this.backend.writeRange(t, slot * this.config.maxPages + first, cur.slice(first, last + 1));
  }

  /** Empty LRU (page -1, last use -1), tick 0, no held page, for one slot. */
  private resetLru(slot: number): void {
    const { maxPages: W, numHot, numSparseLayers: L, numKvHeads: Hkv } = this.config;
    const b = this.backend;
    const s = this.state;
    b.fillRange(s.lruPage, slot * L * Hkv * numHot, L * Hkv * numHot, MINUS_ONE_BYTE);
    b.fillRange(s.lruLastUse, slot * L * Hkv * numHot, L * Hkv * numHot, MINUS_ONE_BYTE);
    b.fillRange(s.lruTick, slot * L * Hkv, L * Hkv, 0);
    b.fillRange(s.heldCount, slot * W, W, 0);
    b.fillRange(s.heldPages, slot, 1, 0);
    this.heldDirty = true;
  }
}

function sameIds(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
