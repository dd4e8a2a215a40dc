/**
 * The CUDA worker's host-side bookkeeping on the fake addon (device memory is host memory there,
 * so the tables' contents are read back exactly): HiSparseSlotTables (slots, page-table deltas
 * uploaded entry by entry, LRU resets) and the step arrays of step_inputs.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import type { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import type { PageTableDelta } from "../../../../src/core/hisparse/plan.js";
import { asBlockId, asHostBlockId, asRequestId } from "../../../../src/core/ids.js";
import { HiSparseSlotTables } from "../../../../src/worker/hisparse/cuda/slot_tables.js";
import { buildStepArrays, denseHostTables } from "../../../../src/worker/hisparse/cuda/step_inputs.js";
import type { PreparedInputs } from "../../../../src/worker/input_batch.js";
import { createFakeAddon } from "../../backends/cuda/fake_addon.js";

const W = 6;
const NUM_HOT = 2;

function setup() {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 1 << 20, stagingBytes: 4096 });
  const tables = new HiSparseSlotTables(be, {
    numSlots: 3,
    maxPages: W,
    numHot: NUM_HOT,
    numSparseLayers: 2,
    numKvHeads: 1,
  });
  const read = (t: typeof tables.hostBlockTable) => Array.from(be.toHost(t) as Int32Array);
  // Bytes each delta moves into the page tables: host -> device copies and device memsets.
  const moved = { copied: 0, set: 0 };
  const pageTables = [tables.hostBlockTable, tables.blockTable, tables.pinnedTable, tables.hotBlocks].map(
    (t) => t as CudaTensor,
  );
  const intoTables = (dst: number) => pageTables.some((t) => dst >= t.ptr && dst < t.ptr + t.bytes);
  const { memcpyAsync, memsetAsync } = fake;
  fake.memcpyAsync = (dst, src, bytes, stream) => {
    if (intoTables(dst)) moved.copied += bytes;
    memcpyAsync(dst, src, bytes, stream);
  };
  fake.memsetAsync = (dst, value, bytes, stream) => {
    if (intoTables(dst)) moved.set += bytes;
    memsetAsync(dst, value, bytes, stream);
  };
  const take = () => {
    const m = { ...moved };
    moved.copied = 0;
    moved.set = 0;
    return m;
  };
  return { be, tables, read, take };
}

/** A delta appending pages (host blocks, device blocks) at `first`, with optional spills, pins and hot blocks. */
function delta(
  id: string,
  first: number,
  host: number[],
  blocks: number[],
  more: { spilled?: number[]; pinned?: number[]; hot?: number[] } = {},
): PageTableDelta {
  return {
    reqId: asRequestId(id),
    firstNewPage: first,
    newHostBlockIds: host.map(asHostBlockId),
    newBlockIds: blocks.map(asBlockId),
    spilledPages: more.spilled ?? [],
    newPinnedPages: more.pinned ?? [],
    newHotBlockIds: (more.hot ?? []).map(asBlockId),
  };
}

describe("HiSparseSlotTables (fake addon)", () => {
  it("gives slots on first sight, uploads only the delta's entries, and clears a released slot's rows", () => {
    const { be, tables, read, take } = setup();
    take(); // the tables' initial fills
    // Step 1: a's first delta: pages 0-2 (host 7, 8, 9; blocks 3, -1, 5), page 1 pinned; b's:
    // pages 0-1 (host 1, 2; blocks 10, 11). Slots by arrival: a 0, b 1 (each first sight also
    // resets the slot's LRU: memsets only).
    tables.applyDelta(delta("a", 0, [7, 8, 9], [3, -1, 5], { pinned: [1] }));
    tables.applyDelta(delta("b", 0, [1, 2], [10, 11]));
    assert.deepEqual([tables.slotOf(asRequestId("a")), tables.slotOf(asRequestId("b"))], [0, 1]);
    assert.deepEqual(read(tables.hostBlockTable).slice(0, 12), [7, 8, 9, -1, -1, -1, 1, 2, -1, -1, -1, -1]);
    assert.deepEqual(read(tables.blockTable).slice(0, 6), [3, -1, 5, -1, -1, -1]);
    assert.deepEqual(read(tables.pinnedTable).slice(0, 6), [0, 1, 0, 0, 0, 0]);
    take();
    // Step 2: a appends page 3 (host 4, block 6), spills page 2 and gets hot blocks 20, 21. Moved:
    // 4 + 4 bytes for page 3's two entries and 8 for the hot blocks (copies), 4 for page 2's -1
    // (a memset); nothing else of the row.
    tables.applyDelta(delta("a", 3, [4], [6], { spilled: [2], hot: [20, 21] }));
    assert.deepEqual(read(tables.hostBlockTable).slice(0, 6), [7, 8, 9, 4, -1, -1]);
    assert.deepEqual(read(tables.blockTable).slice(0, 6), [3, -1, -1, 6, -1, -1]);
    assert.deepEqual(read(tables.hotBlocks).slice(0, 2), [20, 21]);
    assert.deepEqual(
      Array.from(tables.hostRow(0)),
      [7, 8, 9, 4, -1, -1],
      "the host copy the step arrays read",
    );
    assert.deepEqual(take(), { copied: 16, set: 4 });
    // Step 3: a's pages 0 and 1 are spilled together: one memset of both entries.
    tables.applyDelta(delta("a", 4, [], [], { spilled: [0, 1] }));
    assert.deepEqual(read(tables.blockTable).slice(0, 6), [-1, -1, -1, 6, -1, -1]);
    assert.deepEqual(take(), { copied: 0, set: 8 });
    // a finishes: its slot's LRU is reset and its rows cleared; the slot goes to the next new request.
    const st = tables.state;
    be.fillRange(st.lruPage, 0, 4, 0); // pretend the resolver filled slot 0's LRU
    be.fillRange(st.lruTick, 0, 2, 0x01);
    tables.release(asRequestId("a"));
    assert.deepEqual(read(st.lruPage).slice(0, 4), [-1, -1, -1, -1]);
    assert.deepEqual(read(st.lruTick).slice(0, 2), [0, 0]);
    assert.deepEqual(
      [
        read(tables.hostBlockTable).slice(0, 6),
        read(tables.pinnedTable).slice(0, 6),
        read(tables.hotBlocks).slice(0, 2),
      ],
      [
        [-1, -1, -1, -1, -1, -1],
        [0, 0, 0, 0, 0, 0],
        [-1, -1],
      ],
      "the previous occupant's entries are cleared",
    );
    tables.applyDelta(delta("c", 0, [5], [12]));
    assert.equal(tables.slotOf(asRequestId("c")), 0);
    assert.deepEqual(read(tables.hostBlockTable).slice(0, 6), [5, -1, -1, -1, -1, -1]);
    assert.deepEqual(read(tables.blockTable).slice(0, 6), [12, -1, -1, -1, -1, -1]);
    assert.equal(tables.numRequests, 2);
  });

  it("a new hot buffer starts the request's LRU over; wrong starts, too many pages or slots are refused", () => {
    const { be, tables, read } = setup();
    tables.applyDelta(delta("a", 0, [1], [2], { hot: [30, 31] }));
    be.fillRange(tables.state.lruLastUse, 0, 4, 0);
    tables.applyDelta(delta("a", 1, [], [], { hot: [30, 31] })); // unchanged: kept
    assert.deepEqual(read(tables.state.lruLastUse).slice(0, 4), [0, 0, 0, 0]);
    tables.applyDelta(delta("a", 1, [], [], { hot: [40, 41] })); // new hot blocks: reset
    assert.deepEqual(read(tables.state.lruLastUse).slice(0, 4), [-1, -1, -1, -1]);
    assert.throws(
      () => tables.applyDelta(delta("a", 5, [9], [9])),
      /request a starts at page 5, its slot holds 1/,
    );
    assert.throws(
      () => tables.applyDelta(delta("a", 1, [2, 3, 4, 5, 6, 7], [2, 3, 4, 5, 6, 7])),
      /7 pages, more than the 6/,
    );
    tables.applyDelta(delta("b", 0, [1], [2]));
    tables.applyDelta(delta("c", 0, [1], [2]));
    assert.throws(() => tables.applyDelta(delta("d", 0, [1], [2])), /no HiSparse request slot is free/);
  });

  it("counters are read as u64 and zeroed; SPARSE pages are summed over live slots", () => {
    const { be, tables } = setup();
    tables.applyDelta(delta("a", 0, [1], [2], { hot: [30, 31] }));
    tables.applyDelta(delta("b", 0, [3], [4], { hot: [32, 33] }));
    be.writeRange(tables.state.counters, 0, Int32Array.from([5, 0, -1, 0, 0, 0])); // misses = 2^32 - 1
    assert.deepEqual(tables.takeCounters(), { hits: 5, misses: 2 ** 32 - 1, errors: 0 });
    assert.deepEqual(tables.takeCounters(), { hits: 0, misses: 0, errors: 0 });
    be.writeRange(tables.state.heldPages, 0, Int32Array.from([3, 4, 9]));
    assert.equal(tables.numSparsePages(true), 7, "slot 2 holds no live request");
    assert.equal(tables.numSparsePages(false), 7, "cached without a resolve");
  });
});

describe("HiSparseSlotTables with a DSA row LRU (lruShape)", () => {
  it("[slots, indexers, hot rows] LRU, [slots, indexers] ticks, the bytes the plan reserves; a reset clears one slot's lanes", () => {
    const be = new CudaBackend({ addon: createFakeAddon(), workspaceBytes: 1 << 20, stagingBytes: 4096 });
    // 3 slots, 6 pages, 2 hot blocks of 4 tokens = 8 hot rows, 2 indexers.
    const config = {
      numSlots: 3,
      maxPages: W,
      numHot: NUM_HOT,
      numSparseLayers: 4,
      numKvHeads: 1,
      lruShape: [2, 8],
    };
    const tables = new HiSparseSlotTables(be, config);
    assert.deepEqual(tables.state.lruPage.shape, [3, 2, 8]);
    assert.deepEqual(tables.state.lruTick.shape, [3, 2]);
    assert.equal(tables.rowState.lruPos, tables.state.lruPage, "the row resolver reads the same tensors");
    // Per slot: 4 tables of 6 pages, 2 hot blocks, 2 x 16 LRU entries, 2 ticks, 1 held count; 6 counters.
    assert.equal(HiSparseSlotTables.deviceBytes(config), 4 * (3 * (4 * 6 + 2 + 32 + 2 + 1) + 6));
    tables.applyDelta(delta("a", 0, [1], [2], { hot: [30, 31] }));
    const slot = tables.slotOf(asRequestId("a"))!;
    be.fillRange(tables.state.lruPage, 0, 48, 0);
    tables.release(asRequestId("a"));
    const lru = Array.from(be.toHost(tables.state.lruPage) as Int32Array);
    assert.deepEqual(
      lru.slice(slot * 16, slot * 16 + 16),
      new Array(16).fill(-1),
      "the released slot's lanes",
    );
    assert.equal(lru.filter((x) => x === 0).length, 32, "the other slots' lanes untouched");
    be.dispose();
  });
});

describe("HiSparse step arrays", () => {
  const inputs = {
    reqIds: ["a", "b", "c"].map(asRequestId),
    inputIds: new Int32Array(6),
    positions: Int32Array.from([9, 4, 5, 6, 7, 17]),
    queryStartLoc: Int32Array.from([0, 1, 5, 6]),
    seqLens: Int32Array.from([10, 8, 18]),
  } as unknown as PreparedInputs;
  const slots = new Map([
    ["a", 2],
    ["b", 0],
    ["c", 1],
  ]);
  const hostRows = [
    Int32Array.from([40, 41, 42]),
    Int32Array.from([50, 51, 52, 53, 54]),
    Int32Array.from([60, 61, 62]),
  ];

  it("request slots, sparse flags, host slots per token, token rows and masked lengths (bs 4), padded", () => {
    const a = buildStepArrays(
      inputs,
      [asRequestId("a"), asRequestId("c")],
      4,
      (id) => slots.get(id),
      (s) => hostRows[s]!,
      4,
      8,
    );
    assert.deepEqual(Array.from(a.reqSlot), [2, 0, 1, -1]);
    assert.deepEqual(Array.from(a.rowFlags), [1, 0, 1, 0]);
    // a: pos 9 -> page 2 (host 62) offset 1; b: 4..7 -> page 1 (host 41); c: 17 -> page 4 (host 54) offset 1.
    assert.deepEqual(Array.from(a.hostSlotMapping), [249, 164, 165, 166, 167, 217, -1, -1]);
    assert.deepEqual(Array.from(a.tokenRow), [0, 4, 5, -1]);
    assert.deepEqual(Array.from(a.maskedSeqLens), [0, 8, 0, 0]);
    assert.equal(a.numSparse, 2);
    assert.throws(
      () =>
        buildStepArrays(
          inputs,
          [asRequestId("b")],
          4,
          (id) => slots.get(id),
          (s) => hostRows[s]!,
          3,
          6,
        ),
      /sparse request b schedules 4 tokens, not 1/,
    );
    assert.throws(
      () =>
        buildStepArrays(
          inputs,
          [],
          4,
          () => undefined,
          (s) => hostRows[s]!,
          3,
          6,
        ),
      /has no hisparse page table/,
    );
    const dense = denseHostTables(
      a.reqSlot,
      4,
      3,
      (r) => [3, 2, 5][r] ?? 0,
      (s) => hostRows[s]!,
    );
    assert.deepEqual(Array.from(dense), [60, 61, 62, 40, 41, 0, 50, 51, 52, 0, 0, 0]);
  });
});
