import { sameIds } from "../../../attention/sparse/hot_buffer.js";
import type { Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import type { ResolverState } from "../../../backends/cuda/hisparse_ops.js";
import type { RowHotState } from "../../../backends/cuda/hisparse_rows_ops.js";
import type { PageTableDelta } from "../../../core/hisparse/plan.js";
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
  /**
   * Per slot, the shape of the resolver's LRU (positions and last uses; its tick drops the last
   * dim). Default Quest's [numSparseLayers, numKvHeads, numHot] (hot pages per layer and kv
   * head); DSA's [numSources, numHot * blockSize] (hot rows per indexer, hisparse_rows_ops.ts).
   */
  lruShape?: readonly number[];
}

/** The per-slot LRU shape of a configuration (SlotTablesConfig.lruShape or Quest's). */
export function lruShapeOf(c: SlotTablesConfig): readonly number[] {
  return c.lruShape ?? [c.numSparseLayers, c.numKvHeads, c.numHot];
}

const product = (xs: readonly number[]): number => xs.reduce((a, x) => a * x, 1);

/** What the host knows of one slot: its host-block row (read by the step arrays), its page count, its hot blocks. */
interface SlotRow {
  /** [W] host block of each page, -1 past the request's pages. */
  host: Int32Array;
  /** [W] device block of each page, -1 when INACTIVE or past the request's pages. */
  device: Int32Array;
  numPages: number;
  hot: Int32Array;
}

/** Byte value whose repetition is the i32 -1 (empty LRU slot, never used). */
const MINUS_ONE_BYTE = 0xff;

/**
 * The HiSparse page tables of the running requests on the device, one row per request slot (as
 * vLLM's persistent input batch keeps per-request rows): host block, device block (-1 when
 * INACTIVE) and pin of every page, the hot blocks, and the resolver's LRU state and held-page
 * counts (hisparse_ops.ts ResolverState). The plan's PageTableDeltas are uploaded as they come:
 * appended pages as one range per table, spilled pages' -1 and pins as runs of consecutive
 * pages, the hot blocks once; nothing is diffed. A request keeps its slot until it finishes or
 * is preempted (its rows are cleared then, on the device). When a request's hot blocks change
 * (a new hot buffer) its LRU state starts over, as LruHotBufferResolver.forget does. All uploads
 * are asynchronous on the backend's stream, before the step's forward.
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
  private readonly rows: SlotRow[];
  /** Set when a slot's held pages were reset since the last read (numSparsePages changes). */
  private heldDirty = false;
  private lastSparsePages = 0;

  /** @throws Error when the device tables cannot be allocated. */
  constructor(
    private readonly backend: CudaBackend,
    config: SlotTablesConfig,
  ) {
    this.config = config;
    const { numSlots: S, maxPages: W, numHot } = config;
    const lru = lruShapeOf(config);
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
      lruPage: alloc([S, ...lru], -1),
      lruLastUse: alloc([S, ...lru], -1),
      lruTick: alloc([S, ...lru.slice(0, -1)], 0),
      heldCount: alloc([S, W], 0),
      heldPages: alloc([S], 0),
      counters: alloc([6], 0),
    };
    this.freeSlots = Array.from({ length: S }, (_, i) => S - 1 - i);
    this.rows = Array.from({ length: S }, () => ({
      host: new Int32Array(W).fill(-1),
      device: new Int32Array(W).fill(-1),
      numPages: 0,
      hot: new Int32Array(0),
    }));
  }

  /** Device bytes of the tables for a configuration (for the memory plan). */
  static deviceBytes(c: SlotTablesConfig): number {
    const lru = lruShapeOf(c);
    const perSlot = 4 * c.maxPages + c.numHot + 2 * product(lru);
    return 4 * (c.numSlots * (perSlot + product(lru.slice(0, -1)) + 1) + 6);
  }

  /** The same tables as the DSA row resolver reads them (lruShape [numSources, hot rows]). */
  get rowState(): RowHotState {
    const s = this.state;
    return {
      blockTable: s.blockTable,
      hostBlockTable: s.hostBlockTable,
      hotBlocks: s.hotBlocks,
      lruPos: s.lruPage,
      lruLastUse: s.lruLastUse,
      lruTick: s.lruTick,
      heldCount: s.heldCount,
      heldPages: s.heldPages,
      counters: s.counters,
    };
  }

  /** The slot of a request, or undefined when it holds none. */
  slotOf(reqId: RequestId): number | undefined {
    return this.slotByReq.get(reqId);
  }

  /** Host copy of a slot's host-block row (entries past the request's pages are -1). */
  hostRow(slot: number): Int32Array {
    return this.rows[slot]!.host;
  }

  /** Host copy of a slot's device-block row (-1 for INACTIVE pages and past the request's pages). */
  deviceRow(slot: number): Int32Array {
    return this.rows[slot]!.device;
  }

  /** Number of requests holding a slot. */
  get numRequests(): number {
    return this.slotByReq.size;
  }

  /**
   * Applies one page-table delta of the plan: gives the request a slot on first sight
   * (firstNewPage 0), uploads the appended pages, the spilled pages' -1, the pins and new hot
   * blocks, and starts the LRU state over when the hot blocks changed.
   * @throws Error when every slot is taken, the delta does not start at the slot's page count,
   *   or the table would outgrow the slot's width.
   */
  applyDelta(d: PageTableDelta): void {
    const W = this.config.maxPages;
    const slot = this.slotFor(d);
    const cur = this.rows[slot]!;
    if (d.firstNewPage !== cur.numPages)
      throw new Error(
        `the page-table delta of request ${d.reqId} starts at page ${d.firstNewPage}, its slot holds ${cur.numPages}`,
      );
    const n = d.newHostBlockIds.length;
    if (cur.numPages + n > W || d.newBlockIds.length !== n)
      throw new Error(
        `the page table of request ${d.reqId} has ${cur.numPages + n} pages, more than the ${W} a slot holds`,
      );
    const b = this.backend;
    const at = slot * W + cur.numPages;
    if (n > 0) {
      const host = Int32Array.from(d.newHostBlockIds);
      cur.host.set(host, cur.numPages);
      cur.device.set(d.newBlockIds, cur.numPages);
      b.writeRange(this.hostBlockTable, at, host);
      b.writeRange(this.blockTable, at, Int32Array.from(d.newBlockIds));
      cur.numPages += n;
    }
    for (const [p, len] of runs(d.spilledPages)) {
      this.fillRow(this.blockTable, slot, p, len, -1);
      cur.device.fill(-1, p, p + len);
    }
    for (const [p, len] of runs(d.newPinnedPages)) this.fillRow(this.pinnedTable, slot, p, len, 1);
    if (d.newHotBlockIds.length > 0) this.setHot(slot, d);
  }

  /** The request's slot, a free one on first sight. @throws Error when none is free. */
  private slotFor(d: PageTableDelta): number {
    const known = this.slotByReq.get(d.reqId);
    if (known !== undefined) return known;
    const slot = this.freeSlots.pop();
    if (slot === undefined) throw new Error(`no HiSparse request slot is free for request ${d.reqId}`);
    this.slotByReq.set(d.reqId, slot);
    this.resetLru(slot);
    return slot;
  }

  /** Uploads new hot blocks; the LRU starts over when the request had others. @throws Error for a wrong count. */
  private setHot(slot: number, d: PageTableDelta): void {
    const numHot = this.config.numHot;
    const hot = Int32Array.from(d.newHotBlockIds);
    const cur = this.rows[slot]!;
    if (sameIds(hot, cur.hot)) return;
    if (hot.length !== numHot)
      throw new Error(`request ${d.reqId} has ${hot.length} hot blocks, expected ${numHot}`);
    this.backend.writeRange(this.hotBlocks, slot * numHot, hot);
    if (cur.hot.length > 0) this.resetLru(slot);
    cur.hot = hot;
  }

  /** Sets entries [page, page + len) of row `slot` of an i32 table to `value` (-1, 0 or 1). */
  private fillRow(t: Tensor, slot: number, page: number, len: number, value: -1 | 0 | 1): void {
    const W = this.config.maxPages;
    if (page < 0 || page + len > W)
      throw new Error(`page ${page + len - 1} is outside a table of ${W} pages`);
    if (value === 1) this.backend.writeRange(t, slot * W + page, new Int32Array(len).fill(1));
    else this.backend.fillRange(t, slot * W + page, len, value === -1 ? MINUS_ONE_BYTE : 0);
  }

  /**
   * Frees the slot of a finished or preempted request: its LRU state is reset and its rows are
   * cleared on the device (host blocks and device blocks -1, pins 0, hot blocks -1), so the next
   * occupant starts from empty rows.
   */
  release(reqId: RequestId): void {
    const slot = this.slotByReq.get(reqId);
    if (slot === undefined) return;
    this.slotByReq.delete(reqId);
    this.resetLru(slot);
    const cur = this.rows[slot]!;
    const { maxPages: W, numHot } = this.config;
    this.fillRow(this.hostBlockTable, slot, 0, cur.numPages, -1);
    this.fillRow(this.blockTable, slot, 0, cur.numPages, -1);
    this.fillRow(this.pinnedTable, slot, 0, W, 0);
    this.backend.fillRange(this.hotBlocks, slot * numHot, numHot, MINUS_ONE_BYTE);
    cur.host.fill(-1, 0, cur.numPages);
    cur.device.fill(-1, 0, cur.numPages);
    cur.numPages = 0;
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

  /** Empty LRU (page or position -1, last use -1), tick 0, no held page, for one slot. */
  private resetLru(slot: number): void {
    const W = this.config.maxPages;
    const lru = lruShapeOf(this.config);
    const [n, ticks] = [product(lru), product(lru.slice(0, -1))];
    const b = this.backend;
    const s = this.state;
    b.fillRange(s.lruPage, slot * n, n, MINUS_ONE_BYTE);
    b.fillRange(s.lruLastUse, slot * n, n, MINUS_ONE_BYTE);
    b.fillRange(s.lruTick, slot * ticks, ticks, 0);
    b.fillRange(s.heldCount, slot * W, W, 0);
    b.fillRange(s.heldPages, slot, 1, 0);
    this.heldDirty = true;
  }
}

/** Runs of consecutive page indices of an ascending (or spill-ordered) list: [first page, length]. */
function runs(pages: readonly number[]): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (const p of pages) {
    const last = out.at(-1);
    if (last !== undefined && last[0] + last[1] === p) last[1]++;
    else out.push([p, 1]);
  }
  return out;
}
