/**
 * Hybrid HiSparse for DSA models (DESIGN.md §4, §7; issue 15), token granular: the `dsa`
 * selector (the model's lightning indexer already chose each query's top-k token positions;
 * no page digests are kept), the host tier of latent rows as the resolver sees it, and the CPU
 * oracle of the row resolver (one LRU of hot rows per request and indexer, misses copied from the
 * host tier). The CUDA twin replaces the copies with a gather kernel (16-byte loads from pinned
 * host memory) inside the decode graph.
 */
import type { Tensor } from "../../backends/backend.js";
import type { RequestId } from "../../core/ids.js";
import type { HotBufferCounters } from "./hot_buffer.js";
import { HotBufferLru, holdPage, releasePage, sameIds } from "./hot_buffer.js";
import type { SparseBatch } from "./selector.js";

/** "No entry" in a top-k row (Backend.mla.topkIndices pads with it). */
export const NO_ENTRY = -1;

/**
 * The token rows each sparse request attends to in one step: entry j of request s at s * K + j,
 * the indexer's order (ascending positions, NO_ENTRY after the last).
 */
export interface RowSelection {
  /** Entries per request (index_topk). */
  K: number;
  /** i32 [S * K] token positions or NO_ENTRY. */
  positions: Int32Array;
}

/**
 * Benchmark-only selection overlap (issue 15): dummy-weight indexers change their picks every
 * step, unlike trained ones, so a benchmark can set the step-to-step overlap instead: each row of
 * a request's previous selection (per indexer) is kept with probability `p`, the rest of the
 * min(K, context) entries are drawn uniformly from the context (no repeats), ascending. p = 0:
 * random picks; the paper's LRU miss rates at a 2x and 4x buffer correspond to p = 0.87 and 0.93.
 * The first selection of a request is the model's. Outputs change: never on a serving path.
 */
export class SelectionOverlap {
  private readonly prev = new Map<string, Int32Array>();
  private state: number;

  /** @throws Error when p is not in [0, 1]. */
  constructor(
    readonly p: number,
    seed = 1,
  ) {
    if (!(p >= 0 && p <= 1)) throw new Error(`selection overlap p must be in [0, 1], got ${p}`);
    this.state = seed >>> 0 || 1;
  }

  /** Replaces `row` (K entries, the model's selection of a request with `n` tokens) in place. */
  apply(reqId: RequestId, source: number, row: Int32Array, n: number): void {
    const key = `${reqId}:${source}`;
    const prev = this.prev.get(key);
    if (prev !== undefined) {
      const want = Math.min(row.length, n);
      const chosen = new Set<number>();
      for (const pos of prev) if (pos !== NO_ENTRY && pos < n && this.uniform() < this.p) chosen.add(pos);
      while (chosen.size < want) chosen.add(Math.floor(this.uniform() * n));
      const sorted = [...chosen].sort((a, b) => a - b);
      row.fill(NO_ENTRY);
      row.set(sorted.slice(0, row.length));
    }
    this.prev.set(key, row.slice());
  }

  /** Drops a request's previous selections. */
  forget(reqId: RequestId): void {
    for (const key of [...this.prev.keys()]) if (key.startsWith(`${reqId}:`)) this.prev.delete(key);
  }

  /** Uniform in [0, 1) (xorshift32: deterministic for a seed). */
  private uniform(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state / 2 ** 32;
  }
}

/**
 * The `dsa` selector: a DSA layer's selection is its indexer's top-k (a "shared" layer's is its
 * full layer's, the same tensor), so selecting is reading each sparse request's query row of the
 * top-k tensor. There are no digests to update: the indexer keys are their own KV group.
 */
export class DsaSelector {
  /**
   * @param view host view of an i32 tensor (Backend.hostView).
   * @param overlap benchmarks only: rewrites the selections ({@link SelectionOverlap}).
   */
  constructor(
    private readonly view: (t: Tensor) => Int32Array,
    private readonly overlap: SelectionOverlap | null = null,
  ) {}

  /**
   * @param source the indexer (its full layer) whose top-k this is.
   * @param topkIndices i32 [T, K] the layer's top-k (Backend.mla.topkIndices).
   * @throws Error when a sparse request's token row is outside the tensor.
   */
  select(source: number, topkIndices: Tensor, batch: SparseBatch): RowSelection {
    const K = topkIndices.shape[1]!;
    const T = topkIndices.shape[0]!;
    const x = this.view(topkIndices);
    const positions = new Int32Array(batch.numSparse * K);
    for (let s = 0; s < batch.numSparse; s++) {
      const t = batch.tokenIdx[s]!;
      if (t < 0 || t >= T) throw new Error(`sparse row ${s} reads token ${t} of a ${T}-token top-k`);
      positions.set(x.subarray(t * K, (t + 1) * K), s * K);
      this.overlap?.apply(
        batch.reqIds[s]!,
        source,
        positions.subarray(s * K, (s + 1) * K),
        batch.numTokens[s]!,
      );
    }
    return { K, positions };
  }

  /** Drops a request's state (the overlap's previous selections). */
  forget(reqId: RequestId): void {
    this.overlap?.forget(reqId);
  }
}

/** The host tier of latent rows (worker/hisparse/host_row_cache.ts on the CPU). */
export interface HostRowTier {
  /** Bytes one row copy moves (one token of one layer). */
  readonly rowBytes: number;
  /**
   * Copies rows of sparse layer `sparseLayer` from the host tier into `latentCache`
   * ([numBlocks, blockSize, C + R]): host slot src[i] (hostBlock * blockSize + offset) to device
   * slot dst[i] (block * blockSize + offset), for every i.
   */
  loadRows(sparseLayer: number, src: Int32Array, dst: Int32Array, latentCache: Tensor): void;
}

/**
 * Where each selected entry's latent row is this step, for every layer that shares one indexer
 * (one plan, a copy pass per layer): device slot (block * blockSize + offset) of entry j of
 * request s at s * K + j, NO_ENTRY for no entry; and the misses to copy from the host tier.
 */
export interface RowResolution {
  K: number;
  /** i32 [S * K] device slot of each entry. */
  slots: Int32Array;
  /** Host slots of the rows to copy (misses), and their hot-row device slots. */
  copySrc: Int32Array;
  copyDst: Int32Array;
  /** Entries found in the hot buffer. */
  hits: number;
}

/** Hot-buffer state of one request. */
interface RequestHotRows {
  hotBlockIds: Int32Array;
  /** Per indexer (its full layer): an LRU over the request's hot rows keyed by token position. */
  lrus: Map<number, HotBufferLru>;
  /** Page -> number of (indexer, hot row) slots holding one of its rows. */
  heldPages: Map<number, number>;
}

/**
 * The row resolver on the CPU (the oracle of the CUDA twin). Per sparse request, entry by
 * entry: a position whose page is ACTIVE reads its own device slot (the newest rows: the tail
 * page is always ACTIVE); else the request's hot buffer (hot row h = hot block h / blockSize,
 * offset h % blockSize) holds it -> hit; else miss: the LRU victim row (rows used in this step
 * are never victims: hits are marked first, HotBufferLru's two phases) receives the row from the
 * host tier. The LRU is per (request, indexer): layers sharing an indexer select the same rows,
 * so they share one resolution and each copies the misses into its own cache.
 */
export class LruHotRowResolver {
  private readonly reqs = new Map<RequestId, RequestHotRows>();
  private counters: HotBufferCounters = { hits: 0, misses: 0, hostToDeviceBytes: 0 };
  private numHeld = 0;

  constructor(
    private readonly tier: HostRowTier,
    private readonly blockSize: number,
  ) {}

  /** INACTIVE pages with a row in some hot slot (SPARSE), over all requests. */
  get numSparsePages(): number {
    return this.numHeld;
  }

  /**
   * The resolution of `selection` for indexer `source` (the full layer whose top-k it is).
   * Changes the LRU state; copies nothing ({@link apply} does, per layer).
   * @throws Error when an entry is outside its request's context, or a request selects an
   *   INACTIVE row without a hot buffer or more INACTIVE rows than its hot buffer holds.
   */
  resolve(source: number, selection: RowSelection, batch: SparseBatch): RowResolution {
    const { K, positions } = selection;
    const bs = this.blockSize;
    const slots = new Int32Array(positions.length).fill(NO_ENTRY);
    const copySrc: number[] = [];
    const copyDst: number[] = [];
    let hits = 0;
    for (let s = 0; s < batch.numSparse; s++) {
      const buf = this.bufferOf(batch, s);
      const p0 = batch.pageStart[s]!;
      const n = batch.numTokens[s]!;
      let lru: HotBufferLru | undefined;
      if (buf !== null) {
        lru = buf.lrus.get(source) ?? new HotBufferLru(buf.hotBlockIds.length * bs);
        buf.lrus.set(source, lru);
        lru.beginRound();
      }
      const misses: number[] = [];
      for (let j = s * K; j < (s + 1) * K; j++) {
        const pos = positions[j]!;
        if (pos === NO_ENTRY) continue;
        if (pos < 0 || pos >= n)
          throw new Error(`request ${batch.reqIds[s]} selects position ${pos} of a ${n}-token context`);
        const own = batch.blockIds[p0 + Math.floor(pos / bs)]!;
        if (own >= 0) slots[j] = own * bs + (pos % bs);
        else if (buf === null || lru === undefined)
          throw new Error(`request ${batch.reqIds[s]} selects INACTIVE position ${pos} without a hot buffer`);
        else {
          const h = lru.hit(pos);
          if (h < 0) misses.push(j);
          else {
            slots[j] = this.hotSlot(buf, h);
            hits++;
          }
        }
      }
      for (const j of misses) {
        const pos = positions[j]!;
        const { slot, evicted } = lru!.insert(pos);
        this.release(buf!, evicted);
        this.hold(buf!, Math.floor(pos / bs));
        slots[j] = this.hotSlot(buf!, slot);
        copySrc.push(batch.hostBlockIds[p0 + Math.floor(pos / bs)]! * bs + (pos % bs));
        copyDst.push(slots[j]!);
      }
    }
    return { K, slots, copySrc: Int32Array.from(copySrc), copyDst: Int32Array.from(copyDst), hits };
  }

  /** One layer's copy pass of a resolution: its misses land in `latentCache`; counters per layer. */
  apply(sparseLayer: number, res: RowResolution, latentCache: Tensor): void {
    if (res.copySrc.length > 0) this.tier.loadRows(sparseLayer, res.copySrc, res.copyDst, latentCache);
    this.counters.hits += res.hits;
    this.counters.misses += res.copySrc.length;
    this.counters.hostToDeviceBytes += res.copySrc.length * this.tier.rowBytes;
  }

  /** Drops a request's hot-buffer state (finished, preempted, or given new hot blocks). */
  forget(reqId: RequestId): void {
    const buf = this.reqs.get(reqId);
    if (buf === undefined) return;
    this.numHeld -= buf.heldPages.size;
    this.reqs.delete(reqId);
  }

  /** Counters since the last call: (layer, row) hits and misses, bytes copied. */
  takeCounters(): HotBufferCounters {
    const c = this.counters;
    this.counters = { hits: 0, misses: 0, hostToDeviceBytes: 0 };
    return c;
  }

  /** Device slot of hot row h. */
  private hotSlot(buf: RequestHotRows, h: number): number {
    const bs = this.blockSize;
    return buf.hotBlockIds[Math.floor(h / bs)]! * bs + (h % bs);
  }

  /** The request's state, created (or reset when its hot blocks changed); null without hot blocks. */
  private bufferOf(batch: SparseBatch, s: number): RequestHotRows | null {
    const reqId = batch.reqIds[s]!;
    const hot = batch.hotBlockIds.subarray(batch.hotStart[s]!, batch.hotStart[s + 1]!);
    const cur = this.reqs.get(reqId);
    if (cur !== undefined && sameIds(cur.hotBlockIds, hot)) return cur;
    this.forget(reqId);
    if (hot.length === 0) return null;
    const buf: RequestHotRows = { hotBlockIds: hot.slice(), lrus: new Map(), heldPages: new Map() };
    this.reqs.set(reqId, buf);
    return buf;
  }

  private hold(buf: RequestHotRows, page: number): void {
    if (holdPage(buf.heldPages, page)) this.numHeld++;
  }

  /** Releases the page of an evicted position (NO_ENTRY: the slot was empty). */
  private release(buf: RequestHotRows, evictedPos: number): void {
    if (evictedPos === NO_ENTRY) return;
    if (releasePage(buf.heldPages, Math.floor(evictedPos / this.blockSize))) this.numHeld--;
  }
}
