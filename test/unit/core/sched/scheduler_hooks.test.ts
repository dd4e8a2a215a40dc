/**
 * The optional-feature hooks: a KV pressure handler consulted before preemption (HiSparse-style
 * "make room by moving pages elsewhere"), and extensions riding on each step.
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { extensionKey, newExtensionData } from "../../../../src/core/extension_data.js";
import type { RequestId } from "../../../../src/core/ids.js";
import { BlockPool } from "../../../../src/core/kv/block_pool.js";
import type { KVCacheBlock } from "../../../../src/core/kv/kv_cache_block.js";
import { KVCacheManager } from "../../../../src/core/kv/kv_cache_manager.js";
import { type Request, RequestStatus } from "../../../../src/core/request.js";
import type {
  FreeReason,
  KVPressureContext,
  KVPressureHandler,
  SchedulerExtension,
  SchedulerView,
} from "../../../../src/core/sched/extensions.js";
import type { ModelRunnerOutput, SchedulerOutput } from "../../../../src/core/sched/output.js";
import {
  bids,
  cachedReqs,
  fakeRunnerOutput,
  makeScheduler,
  newReqBlocks,
  req,
  scheduled,
  step,
  tokens,
} from "../helpers.js";

/**
 * Fake handler: holds some blocks of the pool (standing in for pages of other requests that could
 * be spilled to host memory) and gives one back per call while it has any.
 */
class FakeSpiller implements KVPressureHandler {
  readonly calls: Array<
    Pick<KVPressureContext, "phase" | "numNewTokens" | "numBlocksNeeded" | "numFreeBlocks"> & {
      reqId: RequestId;
      scheduled: RequestId[];
    }
  > = [];
  constructor(
    private readonly pool: BlockPool,
    private readonly held: KVCacheBlock[],
    private readonly maxBlocks?: number,
  ) {}
  relieveKVPressure(ctx: KVPressureContext): boolean {
    this.calls.push({
      phase: ctx.phase,
      reqId: ctx.request.requestId,
      numNewTokens: ctx.numNewTokens,
      numBlocksNeeded: ctx.numBlocksNeeded,
      numFreeBlocks: ctx.numFreeBlocks,
      scheduled: [...ctx.scheduledReqIds],
    });
    const b = this.held.pop();
    if (b === undefined) return false;
    this.pool.freeBlocks([b]);
    return true;
  }
  maxBlocksPerRequest(numGpuBlocks: number): number {
    return this.maxBlocks ?? numGpuBlocks;
  }
}

/** A 4-block pool (block size 4) whose blocks 0 and 1 are held by the fake spiller. */
function setup(maxBlocks?: number) {
  const pool = new BlockPool(4, false);
  const kv = new KVCacheManager(pool, 4);
  const handler = new FakeSpiller(pool, pool.getNewBlocks(2), maxBlocks);
  const s = makeScheduler({}, { numGpuBlocks: 4 }, { kvCacheManager: kv, kvPressureHandler: handler });
  return { pool, s, handler };
}

test("pressure handler: spills make room for running requests instead of preempting", () => {
  const { s, handler } = setup();
  s.addRequest(req("A", tokens(100, 4), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 4), { maxTokens: 8 }));
  // Step 1: A gets block 2, B block 3: the pool is full (0 and 1 are the handler's).
  let { so } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(2), B: bids(3) });
  assert.equal(handler.calls.length, 0);

  // Step 2: A's token 4 needs a block, pool has 0 -> the handler frees block 1 -> A gets it.
  // B's token 4 needs a block -> the handler frees block 0 -> B gets it. Nobody is preempted.
  ({ so } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, bids(1), 4], B: [false, bids(0), 4] });
  assert.deepEqual(so.preemptedReqIds, new Set());
  assert.deepEqual(handler.calls, [
    { phase: "running", reqId: "A", numNewTokens: 1, numBlocksNeeded: 1, numFreeBlocks: 0, scheduled: [] },
    { phase: "running", reqId: "B", numNewTokens: 1, numBlocksNeeded: 1, numFreeBlocks: 0, scheduled: ["A"] },
  ]);

  // Steps 3-5: decodes within blocks 1 and 0. Step 6: A's token 8 needs a block again; the
  // handler has nothing left (returns false) -> preempt the newest, B.
  step(s);
  step(s);
  step(s);
  ({ so } = step(s));
  assert.deepEqual([...so.preemptedReqIds], ["B"]);
  assert.equal(handler.calls.length, 3);
  assert.equal(handler.calls[2]!.reqId, "A");
  assert.equal(s.makeStats().numPreemptions, 1);
});

test("pressure handler: consulted for a waiting request before it is left waiting", () => {
  const { s, handler } = setup();
  s.addRequest(req("A", tokens(100, 7), { maxTokens: 4 }));
  // A's 7 tokens need 2 blocks, 2 are free: no pressure. Its decodes fit block 3 (slot 3).
  let { so } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(2, 3) });
  // C needs 1 block, 0 free -> the handler frees block 1 in the waiting phase -> C is admitted.
  s.addRequest(req("C", tokens(300, 3), { maxTokens: 4 }));
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 1, C: 3 });
  assert.deepEqual(cachedReqs(so), { A: [false, [], 7] });
  assert.deepEqual(newReqBlocks(so), { C: bids(1) });
  assert.deepEqual(handler.calls, [
    { phase: "waiting", reqId: "C", numNewTokens: 3, numBlocksNeeded: 1, numFreeBlocks: 0, scheduled: ["A"] },
  ]);
});

test("pressure handler: claiming relief without freeing a block falls back to preemption", () => {
  const pool = new BlockPool(2, false);
  const kv = new KVCacheManager(pool, 4);
  let calls = 0;
  const liar: KVPressureHandler = {
    relieveKVPressure: () => {
      calls++;
      return true;
    },
  };
  const s = makeScheduler({}, { numGpuBlocks: 2 }, { kvCacheManager: kv, kvPressureHandler: liar });
  const a = req("A", tokens(100, 4), { maxTokens: 4 });
  const b = req("B", tokens(200, 4), { maxTokens: 4 });
  s.addRequest(a);
  s.addRequest(b);
  step(s); // A [0], B [1]
  const { so } = step(s); // A needs a block: one (useless) call, then B is preempted.
  assert.equal(calls, 1);
  assert.deepEqual([...so.preemptedReqIds], ["B"]);
  assert.deepEqual(cachedReqs(so), { A: [false, bids(1), 4] });
  assert.equal(b.status, RequestStatus.PREEMPTED);
});

test("pressure handler: maxBlocksPerRequest raises the admission limit", () => {
  // 4-block pool: a 20-token prompt (5 blocks) would be ignored without the handler's limit.
  const { s } = setup(64);
  const r = req("R", tokens(100, 20), { maxTokens: 1 });
  s.addRequest(r);
  assert.equal(r.status, RequestStatus.WAITING);
});

/** The fake feature's entries: what it sends per step, and what its worker half answers. */
const FAKE_PLAN = extensionKey<{ total: number; computed: Array<[string, number]> }>("fake");
const FAKE_RESULT = extensionKey<{ hits: number }>("fake");

test("extensions: per-step data out, worker data back, and freed-request notices with block ids", () => {
  const seen: Array<{ hits: number } | undefined> = [];
  const freed: Array<[string, FreeReason, number[]]> = [];
  const ext: SchedulerExtension = {
    name: "fake",
    onScheduled(output: SchedulerOutput, view: SchedulerView) {
      // numComputedTokens has not advanced yet when the hook runs.
      const computed = view.runningRequests.map((r: Request): [string, number] => [
        r.requestId,
        r.numComputedTokens,
      ]);
      output.extensions.set(FAKE_PLAN, { total: output.totalNumScheduledTokens, computed });
    },
    onModelRunnerOutput(mro: ModelRunnerOutput) {
      seen.push(mro.extensions.get(FAKE_RESULT));
    },
    onRequestFreed(r: Request, reason: FreeReason, view: SchedulerView) {
      freed.push([r.requestId, reason, view.kvCacheManager.getBlockIds(r.requestId)]);
    },
  };
  const s = makeScheduler({}, { numGpuBlocks: 3 }, { extensions: [ext] });
  s.addRequest(req("A", tokens(100, 3), { maxTokens: 2 }));
  s.addRequest(req("B", tokens(200, 8), { maxTokens: 4 }));

  // Step 1: A [0] (its decode fits slot 3), B [1, 2]; the worker answers with data under "fake".
  const so = s.schedule();
  assert.deepEqual(so.extensions.get(FAKE_PLAN), {
    total: 11,
    computed: [
      ["A", 0],
      ["B", 0],
    ],
  });
  s.updateFromOutput(
    so,
    fakeRunnerOutput(s, so, undefined, newExtensionData().set(FAKE_RESULT, { hits: 3 })),
  );
  assert.deepEqual(seen, [{ hits: 3 }]);

  // Step 2: B's token 8 needs a block, none free -> B (newest) preempts itself: notice first,
  // while B still holds [1, 2]. A's second token finishes it: notice with its block [0].
  step(s);
  assert.deepEqual(seen, [{ hits: 3 }, undefined]);
  assert.deepEqual(freed, [
    ["B", "preempted", [1, 2]],
    ["A", "finished", [0]],
  ]);
});
