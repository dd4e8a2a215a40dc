/**
 * The DSA side of HiSparse, narrated: the `dsa` selector reads the sparse requests' rows of the
 * indexer's top-k; the row resolver maps each selected token position to its own device slot
 * (ACTIVE page), a hot row (hit) or a hot row filled from the host tier (miss, LRU victim), with
 * exact slots and copies; layers sharing an indexer reuse one resolution and each copies it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DsaSelector,
  type HostRowTier,
  LruHotRowResolver,
  NO_ENTRY,
  type RowSelection,
  SelectionOverlap,
} from "../../../../src/attention/sparse/dsa.js";
import type { Tensor } from "../../../../src/backends/backend.js";
import { asRequestId } from "../../../../src/core/ids.js";
import { sparseBatch, type TestSparseRequest } from "./helpers.js";

/** A host tier that records its copy passes: [layer, src slots, dst slots]. */
class RecordingRowTier implements HostRowTier {
  readonly rowBytes = 8;
  readonly passes: Array<[number, number[], number[]]> = [];
  loadRows(layer: number, src: Int32Array, dst: Int32Array, _cache: Tensor): void {
    this.passes.push([layer, [...src], [...dst]]);
  }
}

const CACHE = {} as Tensor;
const BS = 4;

/**
 * Request A: 14 tokens = pages 0..3 (host blocks 10..13); pages 0 and 1 INACTIVE, page 2 in
 * device block 5, the tail page 3 in device block 6; hot blocks 20 and 21 (8 hot rows).
 */
const A: TestSparseRequest = {
  id: "A",
  batchIdx: 0,
  tokenIdx: 0,
  numTokens: 14,
  hostBlockIds: [10, 11, 12, 13],
  blockIds: [-1, -1, 5, 6],
  hotBlockIds: [20, 21],
};

const sel = (K: number, rows: number[][]): RowSelection => ({
  K,
  positions: Int32Array.from(rows.flatMap((r) => [...r, ...new Array(K - r.length).fill(NO_ENTRY)])),
});

describe("DsaSelector", () => {
  it("reads each sparse request's query row of the top-k, [S, K]", () => {
    // Top-k of a 3-token step, K = 3: token 2 is request A's decode token.
    const topk = { shape: [3, 3] } as unknown as Tensor;
    const data = Int32Array.from([0, -1, -1, 0, 1, -1, 1, 4, 13]);
    const s = new DsaSelector(() => data);
    const out = s.select(0, topk, sparseBatch([{ ...A, tokenIdx: 2 }]));
    assert.deepEqual([out.K, [...out.positions]], [3, [1, 4, 13]]);
  });
});

describe("SelectionOverlap (benchmarks only)", () => {
  const id = asRequestId("A");
  it("the first selection is the model's; later ones keep about p of the previous rows, ascending, no repeats", () => {
    const o = new SelectionOverlap(0.87, 5);
    const K = 64;
    const n = 4096;
    const first = Int32Array.from({ length: K }, (_, j) => j * 7);
    const row = first.slice();
    o.apply(id, 0, row, n);
    assert.deepEqual([...row], [...first]);
    let kept = 0;
    let prev = row.slice();
    for (let step = 0; step < 50; step++) {
      const r = Int32Array.from({ length: K }, (_, j) => j); // the model's picks are ignored
      o.apply(id, 0, r, n);
      const s = new Set(prev);
      kept += [...r].filter((p) => s.has(p)).length;
      for (let j = 1; j < K; j++) assert.ok(r[j]! > r[j - 1]!, "ascending, distinct");
      prev = r.slice();
    }
    const rate = kept / (50 * K);
    assert.ok(rate > 0.82 && rate < 0.92, `kept ${rate}`);
    // Short contexts: min(K, n) entries, NO_ENTRY after them; another indexer has its own state.
    const short = Int32Array.from({ length: 8 }, (_, j) => (j < 5 ? j : NO_ENTRY));
    o.apply(id, 1, short, 5);
    o.apply(id, 1, short, 5);
    assert.deepEqual([...short], [0, 1, 2, 3, 4, -1, -1, -1]);
    assert.throws(() => new SelectionOverlap(1.5), /must be in \[0, 1\]/);
  });
});

describe("LruHotRowResolver", () => {
  it("own slots for ACTIVE pages, hits, misses into LRU victims; counters per layer pass", () => {
    const tier = new RecordingRowTier();
    const r = new LruHotRowResolver(tier, BS);
    const batch = sparseBatch([A]);
    // Step 1: positions 1, 2 (page 0, INACTIVE), 5 (page 1, INACTIVE), 9 (page 2 -> block 5,
    // offset 1), 13 (tail, block 6 offset 1), one empty entry. The three misses take empty hot
    // rows 0, 1, 2: block 20 offsets 0..2, from host slots 10*4+1, 10*4+2, 11*4+1.
    const s1 = r.resolve(0, sel(6, [[1, 2, 5, 9, 13]]), batch);
    assert.deepEqual([...s1.slots], [80, 81, 82, 21, 25, NO_ENTRY]);
    assert.deepEqual([[...s1.copySrc], [...s1.copyDst], s1.hits], [[41, 42, 45], [80, 81, 82], 0]);
    r.apply(0, s1, CACHE);
    assert.deepEqual(tier.passes, [[0, [41, 42, 45], [80, 81, 82]]]);
    assert.deepEqual(r.takeCounters(), { hits: 0, misses: 3, hostToDeviceBytes: 24 });
    // Pages 0 and 1 each have a row in the hot buffer (SPARSE).
    assert.equal(r.numSparsePages, 2);
    // Step 2: 2 and 5 hit (rows 1 and 2); 0 and 3 miss: empty rows 3 and 4 (block 20 offset 3,
    // block 21 offset 0).
    const s2 = r.resolve(0, sel(6, [[0, 2, 3, 5, 13]]), batch);
    assert.deepEqual([...s2.slots], [83, 81, 84, 82, 25, NO_ENTRY]);
    assert.deepEqual([[...s2.copySrc], [...s2.copyDst], s2.hits], [[40, 43], [83, 84], 2]);
  });

  it("a full hot buffer evicts the least recently used row, never one used in the same step", () => {
    const tier = new RecordingRowTier();
    const r = new LruHotRowResolver(tier, BS);
    // One hot block: 4 hot rows. Step 1 fills them with 0, 1, 2, 3 (rows 0..3 of block 20).
    const batch = sparseBatch([{ ...A, hotBlockIds: [20] }]);
    r.resolve(0, sel(4, [[0, 1, 2, 3]]), batch);
    // Step 2 uses 2 and 3 (hits) and 4 (miss): rows 0 and 1 were last used in step 1; the
    // lower, row 0 (position 0), is the victim.
    const s2 = r.resolve(0, sel(4, [[2, 3, 4]]), batch);
    assert.deepEqual([...s2.slots], [82, 83, 80, NO_ENTRY]);
    assert.deepEqual([[...s2.copySrc], [...s2.copyDst]], [[44], [80]]);
    // Step 3 brings position 0 back: row 1 (position 1, step 1) is the LRU victim.
    const s3 = r.resolve(0, sel(4, [[0, 4]]), batch);
    assert.deepEqual([[...s3.copySrc], [...s3.copyDst], s3.hits], [[40], [81], 1]);
    // Page 0 still has rows 0 (row 1) and 2, 3; page 1 has 4: both SPARSE.
    assert.equal(r.numSparsePages, 2);
    // Five INACTIVE positions do not fit four hot rows.
    assert.throws(() => r.resolve(0, sel(5, [[0, 1, 2, 3, 4]]), batch), /the hot buffer has 4 slots/);
  });

  it("one LRU per indexer: another full layer's selection has its own state; a shared layer copies the same plan", () => {
    const tier = new RecordingRowTier();
    const r = new LruHotRowResolver(tier, BS);
    const batch = sparseBatch([A]);
    const f0 = r.resolve(0, sel(2, [[1, 13]]), batch);
    // Indexer 2 (another full layer) selecting position 1 misses too: its LRU is empty.
    const f2 = r.resolve(2, sel(2, [[1, 13]]), batch);
    assert.deepEqual([[...f0.copySrc], [...f2.copySrc]], [[41], [41]]);
    assert.deepEqual([...f0.slots], [...f2.slots]);
    // Layer 0 and its shared layer 1 apply f0, each into its own cache: two passes, 2 misses.
    r.apply(0, f0, CACHE);
    r.apply(1, f0, CACHE);
    assert.deepEqual(
      tier.passes.map((p) => p[0]),
      [0, 1],
    );
    assert.equal(r.takeCounters().misses, 2);
  });

  it("errors: a position past the context; an INACTIVE row without a hot buffer; new hot blocks reset the state", () => {
    const r = new LruHotRowResolver(new RecordingRowTier(), BS);
    assert.throws(() => r.resolve(0, sel(1, [[14]]), sparseBatch([A])), /selects position 14 of a 14-token/);
    assert.throws(
      () => r.resolve(0, sel(1, [[1]]), sparseBatch([{ ...A, hotBlockIds: [] }])),
      /INACTIVE position 1 without a hot buffer/,
    );
    r.resolve(0, sel(1, [[1]]), sparseBatch([A]));
    assert.equal(r.numSparsePages, 1);
    // The request got other hot blocks (after a preemption): its old rows are gone, 1 misses again.
    const again = r.resolve(0, sel(1, [[1]]), sparseBatch([{ ...A, hotBlockIds: [30, 31] }]));
    assert.deepEqual([...again.copyDst], [120]);
    r.forget(asRequestId("A"));
    assert.equal(r.numSparsePages, 0);
  });
});
