/**
 * Scheduler: recompute preemption, resumption, and admission rejection. Block size 4.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { RequestStatus } from "../../../../src/core/request.js";
import {
  bids,
  cachedReqs,
  makeScheduler,
  newReqBlocks,
  req,
  rid,
  scheduled,
  step,
  tokens,
} from "../helpers.js";

test("preemption: the newest running request yields its blocks, then resumes and recomputes prompt + output", () => {
  // 4 blocks = 16 token slots.
  const s = makeScheduler({}, { numGpuBlocks: 4 });
  const a = req("A", tokens(100, 8), { maxTokens: 4 });
  const b = req("B", tokens(200, 7), { maxTokens: 8 });
  s.addRequest(a);
  s.addRequest(b);

  // Step 1: A gets [0, 1], B gets [2, 3]; the pool is full. Both sample a token.
  let { so, outs } = step(s, (id) => (id === "A" ? 50 : 60));
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1), B: bids(2, 3) });
  assert.equal(s.kvCacheManager.numFreeBlocks, 0);
  assert.deepEqual(b.outputTokenIds, [60]);

  // Step 2: A (oldest) needs a block for token 8, pool has 0 -> preempt the newest running
  // request, B: its blocks go back tail first, queue [3, 2]; A takes block 3.
  // Nothing is admitted from the waiting queue in a step that preempted.
  ({ so, outs } = step(s, () => 51));
  assert.deepEqual([...so.preemptedReqIds], ["B"]);
  assert.deepEqual(cachedReqs(so), { A: [false, bids(3), 8] });
  assert.deepEqual(scheduled(so), { A: 1 });
  assert.deepEqual(s.kvCacheManager.blockPool.freeBlockIds(), [2]);
  assert.equal(b.status, RequestStatus.PREEMPTED);
  assert.equal(b.numComputedTokens, 0);
  assert.equal(b.numPreemptions, 1);
  assert.deepEqual(b.outputTokenIds, [60]); // its generated token is kept
  assert.deepEqual(
    s.waitingRequests.map((r) => r.requestId),
    ["B"],
  );
  assert.equal(s.makeStats().numPreemptions, 1);

  // Step 3: A decodes in block 3. B needs 8 tokens = 2 blocks, 1 is free: B keeps waiting.
  ({ so, outs } = step(s, () => 52));
  assert.deepEqual(scheduled(so), { A: 1 });
  assert.deepEqual(so.preemptedReqIds, new Set());

  // Step 4: A's 4th output token finishes it; its blocks go back tail first: queue [2, 3, 1, 0].
  ({ so, outs } = step(s, () => 53));
  assert.equal(outs[0]!.finishReason, "length");
  assert.deepEqual(a.outputTokenIds, [50, 51, 52, 53]);
  assert.deepEqual(s.kvCacheManager.blockPool.freeBlockIds(), [2, 3, 1, 0]);

  // Step 5: B resumes as a cached request with its full new block list [2, 3] and recomputes
  // all 8 tokens: 7 prompt tokens and its 1 generated token.
  ({ so, outs } = step(s, () => 61));
  assert.deepEqual(so.scheduledNewReqs, []);
  assert.deepEqual(cachedReqs(so), { B: [true, bids(2, 3), 0] });
  assert.deepEqual(scheduled(so), { B: 8 });
  assert.deepEqual([...so.finishedReqIds], ["A"]);
  assert.deepEqual(outs[0]!.newTokenIds, [61]);
  assert.deepEqual(b.outputTokenIds, [60, 61]);
  assert.equal(b.status, RequestStatus.RUNNING);

  // Step 6: B decodes normally again; its token 8 starts a third block, 1 (queue was [1, 0]).
  ({ so } = step(s));
  assert.deepEqual(cachedReqs(so), { B: [false, bids(1), 8] });
});

test("preemption: a request can preempt itself (it is the newest) and then waits", () => {
  const s = makeScheduler({}, { numGpuBlocks: 4 });
  const a = req("A", tokens(100, 5), { maxTokens: 8 });
  const b = req("B", tokens(200, 8), { maxTokens: 8 });
  s.addRequest(a);
  s.addRequest(b);
  // Step 1: A [0, 1] (token 4 in block 1), B [2, 3].
  step(s);
  // Step 2: A's token 5 fits block 1. B's token 8 needs a block, pool has 0, and the newest
  // running request is B itself: B is preempted, its blocks [3, 2] return to the free queue.
  const { so } = step(s);
  assert.deepEqual(scheduled(so), { A: 1 });
  assert.deepEqual([...so.preemptedReqIds], ["B"]);
  assert.deepEqual(s.kvCacheManager.blockPool.freeBlockIds(), [3, 2]);
  assert.equal(s.numRunning, 1);
  // Step 3: B needs 9 tokens = 3 blocks, 2 free: it waits while A decodes.
  const { so: so3 } = step(s);
  assert.deepEqual(scheduled(so3), { A: 1 });
  assert.equal(b.status, RequestStatus.PREEMPTED);
});

test("preemption with prefix caching: the resumed request reuses its own full blocks that were not evicted", () => {
  const s = makeScheduler({}, { numGpuBlocks: 4, enablePrefixCaching: true });
  const a = req("A", tokens(100, 8), { maxTokens: 4 });
  const b = req("B", tokens(200, 7), { maxTokens: 8 });
  s.addRequest(a);
  s.addRequest(b);
  step(s); // A [0, 1], B [2, 3]; B's block 2 (tokens 0-3) is full and cached.
  step(s); // A takes block 3 from preempted B; block 2 stays free and cached.
  step(s);
  step(s); // A finishes: queue [2, 3, 1, 0].
  // Step 5: B hits its own block 2 (4 tokens) and recomputes only tokens 4-7 in a fresh block.
  // The fresh block is 3 (front of the queue once block 2 left it).
  const { so, outs } = step(s);
  assert.deepEqual(cachedReqs(so), { B: [true, bids(2, 3), 4] });
  assert.deepEqual(scheduled(so), { B: 4 });
  // numCachedTokens reports the first scheduling only (no hit then).
  assert.equal(outs[0]!.numCachedTokens, 0);
});

test("admission: a request that could never fit, or whose prompt exceeds maxModelLen, is ignored, not deadlocked", () => {
  // 4 blocks of 4 = 16 slots; maxModelLen 32.
  const s = makeScheduler({ maxModelLen: 32 }, { numGpuBlocks: 4 });
  // prompt 10 + 8 outputs: KV for 17 tokens (the last output's KV is never computed) = 5 blocks.
  const tooBig = req("X", tokens(100, 10), { maxTokens: 8 });
  // prompt 10 + 7 outputs: 16 tokens = 4 blocks: fits alone.
  const fits = req("Y", tokens(200, 10), { maxTokens: 7 });
  const tooLong = req("Z", tokens(300, 33), { maxTokens: 1 });
  assert.equal(
    s.admissionError(tooBig),
    "the request may need 17 tokens of KV cache (prompt plus max_tokens), more than the 16 the cache can hold",
  );
  assert.equal(
    s.admissionError(tooLong),
    "the prompt has 33 tokens, more than the maximum model length of 32",
  );
  assert.equal(s.admissionError(fits), null);
  s.addRequest(tooBig);
  s.addRequest(fits);
  s.addRequest(tooLong);
  assert.equal(tooBig.status, RequestStatus.FINISHED_IGNORED);
  assert.equal(tooLong.status, RequestStatus.FINISHED_IGNORED);
  assert.equal(fits.status, RequestStatus.WAITING);
  assert.equal(s.numWaiting, 1);

  // The next step reports both rejections (finish reason "length", no tokens) and runs Y.
  const { so, outs } = step(s);
  assert.deepEqual(new Set(so.finishedReqIds), new Set([rid("X"), rid("Z")]));
  assert.deepEqual(newReqBlocks(so), { Y: bids(0, 1, 2) });
  assert.deepEqual(
    outs.map((o) => [o.reqId, o.finishReason, o.newTokenIds.length, o.numPromptTokens]),
    [
      ["X", "length", 0, 10],
      ["Z", "length", 0, 33],
      ["Y", null, 1, 10],
    ],
  );
  // Y runs to completion alone in the 4 blocks.
  let steps = 1;
  while (s.hasUnfinishedRequests()) {
    step(s);
    steps++;
  }
  assert.equal(steps, 7);
  assert.equal(fits.status, RequestStatus.FINISHED_LENGTH_CAPPED);
  assert.equal(s.makeStats().numPreemptions, 0);
});

test("admission: maxModelLen caps the KV a request can need", () => {
  // prompt 10 with maxTokens 100 would need 109 slots, but it stops at 16 tokens: 15 slots, 4 blocks.
  const s = makeScheduler({ maxModelLen: 16 }, { numGpuBlocks: 4 });
  const r = req("R", tokens(100, 10), { maxTokens: 100 });
  s.addRequest(r);
  assert.equal(r.status, RequestStatus.WAITING);
  while (s.hasUnfinishedRequests()) step(s);
  assert.equal(r.numTokens, 16);
  assert.equal(r.status, RequestStatus.FINISHED_LENGTH_CAPPED);
});

test("admission: a rejected request alone keeps the engine stepping until it is reported", () => {
  const s = makeScheduler({}, { numGpuBlocks: 1 });
  s.addRequest(req("X", tokens(100, 10)));
  assert.equal(s.hasUnfinishedRequests(), true);
  const { so, outs } = step(s);
  assert.equal(so.totalNumScheduledTokens, 0);
  assert.deepEqual(
    outs.map((o) => o.reqId),
    ["X"],
  );
  assert.equal(s.hasUnfinishedRequests(), false);
  // Ids must be unique among live requests.
  s.addRequest(req("Y", tokens(1, 2), { maxTokens: 2 }));
  assert.throws(() => s.addRequest(req("Y", tokens(1, 2))), /request Y is already in the scheduler/);
});
