/**
 * The CUDA worker's host-side bookkeeping on the fake addon (device memory is host memory there,
 * so the tables' contents are read back exactly): HiSparseSlotTables (slots, changed-entry
 * uploads, LRU resets) and the step arrays of step_inputs.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import type { PageTableRow } from "../../../../src/core/hisparse/plan.js";
import { asBlockId, asHostBlockId, asRequestId } from "../../../../src/core/ids.js";
import { HiSparseSlotTables } from "../../../../src/worker/hisparse/cuda/slot_tables.js";
import { buildStepArrays, denseHostTables } from "../../../../src/worker/hisparse/cuda/step_inputs.js";
import type { PreparedInputs } from "../../../../src/worker/input_batch.js";
import { createFakeAddon } from "../../backends/cuda/fake_addon.js";

const W = 6;
const NUM_HOT = 2;

function setup() {
  const be = new CudaBackend({ addon: createFakeAddon(), workspaceBytes: 1 << 20, stagingBytes: 4096 });
  const tables = new HiSparseSlotTables(be, {
    numSlots: 3,
    maxPages: W,
    numHot: NUM_HOT,
    numSparseLayers: 2,
    numKvHeads: 1,
  });
  const read = (t: typeof tables.hostBlockTable) => Array.from(be.toHost(t) as Int32Array);
  return { be, tables, read };
}

function row(
  id: string,
  host: number[],
  blocks: number[],
  pinned: number[] = [],
  hot: number[] = [],
): PageTableRow {
  return {
    reqId: asRequestId(id),
    hostBlockIds: host.map(asHostBlockId),
    blockIds: blocks.map(asBlockId),
    pinnedPages: pinned,
    hotBlockIds: hot.map(asBlockId),
  };
}

describe("HiSparseSlotTables (fake addon)", () => {
  it("gives slots on first sight, writes the rows, pads with -1, and reuses a released slot", () => {
    const { be, tables, read } = setup();
    tables.applyRow(row("a", [7, 8, 9], [3, -1, 5], [1]));
    tables.applyRow(row("b", [1, 2], [10, 11]));
    assert.deepEqual([tables.slotOf(asRequestId("a")), tables.slotOf(asRequestId("b"))], [0, 1]);
    assert.deepEqual(read(tables.hostBlockTable).slice(0, 12), [7, 8, 9, -1, -1, -1, 1, 2, -1, -1, -1, -1]);
    assert.deepEqual(read(tables.blockTable).slice(0, 6), [3, -1, 5, -1, -1, -1]);
    assert.deepEqual(read(tables.pinnedTable).slice(0, 6), [0, 1, 0, 0, 0, 0]);
    // Step 2: a grows by one page and its page 2 is spilled; only changed entries move.
    tables.applyRow(row("a", [7, 8, 9, 4], [3, -1, -1, 6], [1], [20, 21]));
    assert.deepEqual(read(tables.blockTable).slice(0, 6), [3, -1, -1, 6, -1, -1]);
    assert.deepEqual(read(tables.hotBlocks).slice(0, 2), [20, 21]);
    // a finishes: its slot is reset (LRU empty) and goes to the next new request.
    const s = tables.state;
    be.fillRange(s.lruPage, 0, 4, 0); // pretend the resolver filled slot 0's LRU
    be.fillRange(s.lruTick, 0, 2, 0x01);
    tables.release(asRequestId("a"));
    assert.deepEqual(read(s.lruPage).slice(0, 4), [-1, -1, -1, -1]);
    assert.deepEqual(read(s.lruTick).slice(0, 2), [0, 0]);
    tables.applyRow(row("c", [5], [12]));
    assert.equal(tables.slotOf(asRequestId("c")), 0);
    assert.deepEqual(
      read(tables.hostBlockTable).slice(0, 6),
      [5, -1, -1, -1, -1, -1],
      "the previous occupant's entries are cleared",
    );
    assert.equal(tables.numRequests, 2);
  });

  it("a new hot buffer starts the request's LRU over; too many slots or pages are refused", () => {
    const { be, tables, read } = setup();
    tables.applyRow(row("a", [1], [2], [], [30, 31]));
    be.fillRange(tables.state.lruLastUse, 0, 4, 0);
    tables.applyRow(row("a", [1], [2], [], [30, 31])); // unchanged: kept
    assert.deepEqual(read(tables.state.lruLastUse).slice(0, 4), [0, 0, 0, 0]);
    tables.applyRow(row("a", [1], [2], [], [40, 41])); // new hot blocks: reset
    assert.deepEqual(read(tables.state.lruLastUse).slice(0, 4), [-1, -1, -1, -1]);
    assert.throws(
      () => tables.applyRow(row("x", [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7])),
      /7 pages, more than the 6/,
    );
    tables.applyRow(row("b", [1], [2]));
    tables.applyRow(row("c", [1], [2]));
    assert.throws(() => tables.applyRow(row("d", [1], [2])), /no HiSparse request slot is free/);
  });

  it("counters are read as u64 and zeroed; SPARSE pages are summed over live slots", () => {
    const { be, tables } = setup();
    tables.applyRow(row("a", [1], [2], [], [30, 31]));
    tables.applyRow(row("b", [3], [4], [], [32, 33]));
    be.writeRange(tables.state.counters, 0, Int32Array.from([5, 0, -1, 0, 0, 0])); // misses = 2^32 - 1
    assert.deepEqual(tables.takeCounters(), { hits: 5, misses: 2 ** 32 - 1, errors: 0 });
    assert.deepEqual(tables.takeCounters(), { hits: 0, misses: 0, errors: 0 });
    be.writeRange(tables.state.heldPages, 0, Int32Array.from([3, 4, 9]));
    assert.equal(tables.numSparsePages(true), 7, "slot 2 holds no live request");
    assert.equal(tables.numSparsePages(false), 7, "cached without a resolve");
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
