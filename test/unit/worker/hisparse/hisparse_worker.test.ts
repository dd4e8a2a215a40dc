/**
 * The CPU HiSparse worker's page tables, built from the plans' page-table deltas and read back
 * through what the step gives its attention backend (HISPARSE_STEP_META: the host slot mapping,
 * the dense layers' host tables, the SparseBatch). Block size 4; narrated step by step.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import {
  HISPARSE_STEP_META,
  type HiSparseStepMeta,
} from "../../../../src/attention/sparse/hisparse_attention.js";
import { LruHotBufferResolver } from "../../../../src/attention/sparse/hot_buffer.js";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { newExtensionData } from "../../../../src/core/extension_data.js";
import { HISPARSE_PLAN, type PageTableDelta } from "../../../../src/core/hisparse/plan.js";
import { asBlockId, asHostBlockId, asRequestId, type RequestId } from "../../../../src/core/ids.js";
import type { SchedulerOutput } from "../../../../src/core/sched/output.js";
import { HiSparseWorker } from "../../../../src/worker/hisparse/hisparse_worker.js";
import { CpuHostKvCache } from "../../../../src/worker/hisparse/host_kv_cache.js";
import { type PreparedInputs, stageAttentionMetadata } from "../../../../src/worker/input_batch.js";

const BS = 4;
const be = new CpuBackend({ numThreads: 1 });
after(() => be.dispose());

function makeWorker(): HiSparseWorker {
  const view = (t: Parameters<typeof be.hostView>[0]) => be.hostView(t) as Float32Array;
  const spec = { numSparseLayers: 1, numHostBlocks: 64, blockSize: BS, numKvHeads: 1, headDim: 8 };
  const tier = new CpuHostKvCache(spec, view);
  return new HiSparseWorker(be, BS, [], [], tier, new LruHotBufferResolver(tier, BS, 1, 1));
}

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

/** A decode step (one token per request at `positions`) with its plan. */
function decodeStep(
  worker: HiSparseWorker,
  step: number,
  deltas: PageTableDelta[],
  positions: Record<string, number>,
  sparse: string[],
  preempted: string[] = [],
): HiSparseStepMeta {
  const reqIds = Object.keys(positions).map(asRequestId);
  const R = reqIds.length;
  const so: SchedulerOutput = {
    scheduledNewReqs: [],
    scheduledCachedReqs: { reqIds: [], resumedFromPreemption: [], newBlockIds: [], numComputedTokens: [] },
    numScheduledTokens: new Map(reqIds.map((id) => [id, 1])),
    totalNumScheduledTokens: R,
    preemptedReqIds: new Set(preempted.map(asRequestId)),
    finishedReqIds: new Set<RequestId>(),
    extensions: newExtensionData().set(HISPARSE_PLAN, {
      step,
      pageTableDeltas: deltas,
      mirror: { blockIds: [], hostBlockIds: [] },
      sparseReqIds: sparse.map(asRequestId),
    }),
  };
  const pos = Int32Array.from(Object.values(positions));
  const inputs = {
    reqIds,
    inputIds: new Int32Array(R),
    positions: pos,
    slotMapping: new Int32Array(R),
    queryStartLoc: Int32Array.from({ length: R + 1 }, (_, i) => i),
    seqLens: pos.map((p) => p + 1),
    blockTables: new Int32Array(R),
    maxBlocksPerReq: 1,
    maxQueryLen: 1,
    maxSeqLen: Math.max(...pos) + 1,
    logitsIndices: new Int32Array(0),
    logitsReqIdx: new Int32Array(0),
  } satisfies PreparedInputs;
  worker.applySchedulerOutput(so);
  const out = newExtensionData();
  worker.prepareForward(so, inputs, stageAttentionMetadata(be, inputs), out);
  return out.get(HISPARSE_STEP_META)!;
}

describe("HiSparseWorker page tables from deltas", () => {
  it("appends pages, drops spilled pages' blocks, pins, sets hot blocks, and starts anew after a preemption", () => {
    const w = makeWorker();
    // Step 1: A's first delta: pages 0-2 (host 10-12, blocks 0-2); B's: pages 0-1 (host 20, 21;
    // blocks 3, 4), page 1 pinned. A decodes position 9 (page 2, offset 1: host slot 12 * 4 + 1),
    // B position 5 (page 1, offset 1: host slot 85). Nobody is sparse.
    let m = decodeStep(
      w,
      1,
      [delta("A", 0, [10, 11, 12], [0, 1, 2]), delta("B", 0, [20, 21], [3, 4], { pinned: [1] })],
      { A: 9, B: 5 },
      [],
    );
    assert.deepEqual(Array.from(m.hostSlotMapping), [49, 85]);
    assert.deepEqual(Array.from(m.denseMeta.host.blockTables), [10, 11, 12, 20, 21, 0], "host tables [2, 3]");
    assert.equal(m.batch.numSparse, 0);
    // Step 2: A appends page 3 (host 13, block 5), page 1 is spilled, hot blocks 6, 7; B pins page 0
    // (found after the page was sent). Both decode sparsely (A at 12, B at 6).
    m = decodeStep(
      w,
      2,
      [delta("A", 3, [13], [5], { spilled: [1], hot: [6, 7] }), delta("B", 2, [], [], { pinned: [0] })],
      { A: 12, B: 6 },
      ["A", "B"],
    );
    const b = m.batch;
    assert.deepEqual(Array.from(b.pageStart), [0, 4, 6]);
    assert.deepEqual(Array.from(b.hostBlockIds), [10, 11, 12, 13, 20, 21]);
    assert.deepEqual(Array.from(b.blockIds), [0, -1, 2, 5, 3, 4]);
    assert.deepEqual(Array.from(b.pinned), [0, 0, 0, 0, 1, 1]);
    assert.deepEqual(
      [Array.from(b.hotStart), Array.from(b.hotBlockIds)],
      [
        [0, 2, 2],
        [6, 7],
      ],
    );
    // A delta that does not start at the worker's page count is a scheduler bug.
    assert.throws(
      () => decodeStep(w, 3, [delta("A", 7, [14], [8])], { A: 13 }, []),
      /request A starts at page 7, the worker holds 4/,
    );
    // Step 3: B was preempted (its table is dropped) and resumed in the same plan: its delta starts
    // a new table at page 0 (host 30, block 8), without the old pins.
    m = decodeStep(w, 3, [delta("B", 0, [30], [8])], { B: 0 }, ["B"], ["B"]);
    assert.deepEqual(
      [Array.from(m.batch.hostBlockIds), Array.from(m.batch.blockIds), Array.from(m.batch.pinned)],
      [[30], [8], [0]],
    );
    assert.equal(w.numRequests, 2);
  });
});
