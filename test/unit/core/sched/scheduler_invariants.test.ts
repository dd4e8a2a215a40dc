/**
 * A seeded random workload (small pool, chunked prefill, shared prefixes, preemptions, aborts)
 * with the scheduler's invariants checked after every step. Deterministic: a fixed-seed PRNG.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { Request } from "../../../../src/core/request.js";
import { RequestStatus } from "../../../../src/core/request.js";
import type { Scheduler } from "../../../../src/core/sched/scheduler.js";
import { EOS, fakeRunnerOutput, makeScheduler, req, rid } from "../helpers.js";

/** mulberry32 PRNG (Tommy Ettinger, public domain): uniform in [0, 1). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const BLOCK_SIZE = 4;
const NUM_BLOCKS = 12;
const BUDGET = 10;
const MAX_SEQS = 4;

function checkInvariants(s: Scheduler, all: Request[]): void {
  const kv = s.kvCacheManager;
  const pool = kv.blockPool;
  // Each block's ref count equals the number of running requests holding it; free <=> ref 0.
  const holders = new Array<number>(NUM_BLOCKS).fill(0);
  for (const r of s.runningRequests) {
    const blocks = kv.getBlockIds(r.requestId);
    // After schedule() a running request holds exactly the blocks its computed tokens need.
    assert.equal(blocks.length, Math.ceil(r.numComputedTokens / BLOCK_SIZE), `blocks of ${r.requestId}`);
    for (const b of blocks) holders[b]!++;
  }
  assert.deepEqual(
    pool.blocks.map((b) => b.refCnt),
    holders,
  );
  const free = new Set(pool.freeBlockIds());
  for (const b of pool.blocks) assert.equal(free.has(b.blockId), b.refCnt === 0);
  // Waiting requests hold nothing and restart from zero.
  for (const r of s.waitingRequests) {
    assert.equal(kv.getBlockIds(r.requestId).length, 0);
    assert.equal(r.numComputedTokens, 0);
  }
  // Running requests stay in arrival order, within maxNumSeqs.
  const order = s.runningRequests.map((r) => all.indexOf(r));
  assert.deepEqual(
    order,
    [...order].sort((x, y) => x - y),
  );
  assert.ok(s.numRunning <= MAX_SEQS);
}

test("random workload: invariants hold every step and every request finishes", () => {
  const rand = prng(12345);
  const s = makeScheduler(
    { maxNumSeqs: MAX_SEQS, maxNumBatchedTokens: BUDGET, maxModelLen: 40 },
    { blockSize: BLOCK_SIZE, numGpuBlocks: NUM_BLOCKS, enablePrefixCaching: true },
  );
  const all: Request[] = [];
  const shared = [11, 12, 13, 14, 15, 16, 17, 18];
  let nextId = 0;
  let steps = 0;
  let preemptions = 0;
  while (steps < 2000 && (nextId < 60 || s.hasUnfinishedRequests())) {
    // Arrivals: up to 2 per step; half share an 8-token prefix.
    for (let k = 0; k < 2 && nextId < 60; k++) {
      if (rand() < 0.5) continue;
      const len = 1 + Math.floor(rand() * 14);
      const own = Array.from({ length: len }, () => 20 + Math.floor(rand() * 50));
      const r = req(`R${nextId++}`, rand() < 0.5 ? [...shared, ...own] : own, {
        maxTokens: 1 + Math.floor(rand() * 20),
      });
      all.push(r);
      s.addRequest(r);
    }
    const so = s.schedule();
    steps++;
    assert.ok(so.totalNumScheduledTokens <= BUDGET);
    preemptions += so.preemptedReqIds.size;
    checkInvariants(s, all);
    // Occasionally abort a random live request between schedule and update.
    if (rand() < 0.05 && s.runningRequests.length > 0) {
      const victim = s.runningRequests[Math.floor(rand() * s.runningRequests.length)]!;
      s.finishRequests(victim.requestId, RequestStatus.FINISHED_ABORTED);
    }
    s.updateFromOutput(
      so,
      fakeRunnerOutput(s, so, () => (rand() < 0.05 ? EOS : 30)),
    );
  }
  s.schedule(); // deliver the last finished ids
  assert.equal(nextId, 60);
  assert.equal(s.hasUnfinishedRequests(), false);
  for (const r of all) assert.equal(r.isFinished, true, `${r.requestId} is ${r.status}`);
  for (const r of all) assert.ok(r.numTokens <= 40);
  assert.equal(s.kvCacheManager.numFreeBlocks, NUM_BLOCKS);
  assert.equal(s.getRequest(rid("R0")), undefined);
  // The workload is meant to exercise preemption and prefix hits.
  assert.ok(preemptions > 0, "expected some preemptions");
  assert.equal(s.makeStats().numPreemptions, preemptions);
  assert.ok(s.makeStats().prefixCacheHits > 0, "expected some prefix-cache hits");
});
