/**
 * Scheduler: prefill, decode, continuous batching, maxNumSeqs, the token budget and chunked
 * prefill. Block size 4 and 16 blocks unless stated; caching off (no accidental prefix hits).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { RequestStatus } from "../../../../src/core/request.js";
import {
  bids,
  cachedReqs,
  DEFAULT_SAMPLED,
  makeScheduler,
  newReqBlocks,
  req,
  rid,
  scheduled,
  step,
  tokens,
} from "../helpers.js";

test("one request: prefill, two decodes, finished at maxTokens and reported to the worker", () => {
  const s = makeScheduler();
  const a = req("A", tokens(100, 6), { maxTokens: 3 });
  s.addRequest(a);
  assert.equal(s.numWaiting, 1);

  // Step 1: A's 6-token prompt needs blocks [0, 1]; the worker samples token 7.
  let { so, outs } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1) });
  assert.equal(so.scheduledNewReqs[0]!.numComputedTokens, 0);
  assert.deepEqual(scheduled(so), { A: 6 });
  assert.equal(so.totalNumScheduledTokens, 6);
  assert.equal(a.numComputedTokens, 6);
  assert.deepEqual(outs, [
    {
      reqId: "A",
      newTokenIds: [DEFAULT_SAMPLED],
      newLogprobs: null,
      finishReason: null,
      stopReason: null,
      numPromptTokens: 6,
      numOutputTokens: 1,
      numCachedTokens: 0,
      numHostCachedTokens: 0,
    },
  ]);

  // Step 2: decode token 6 (block 1, slot 2): a cached request with no new block.
  ({ so, outs } = step(s));
  assert.deepEqual(so.scheduledNewReqs, []);
  assert.deepEqual(cachedReqs(so), { A: [false, [], 6] });
  assert.deepEqual(scheduled(so), { A: 1 });

  // Step 3: decode token 7 (block 1, slot 3); the third output token hits maxTokens.
  ({ so, outs } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, [], 7] });
  assert.equal(outs[0]!.finishReason, "length");
  assert.equal(outs[0]!.numOutputTokens, 3);
  assert.equal(a.status, RequestStatus.FINISHED_LENGTH_CAPPED);
  assert.deepEqual(a.outputTokenIds, [7, 7, 7]);
  assert.equal(s.numRunning, 0);
  assert.equal(s.kvCacheManager.numFreeBlocks, 16);
  assert.equal(s.hasUnfinishedRequests(), false);
  assert.equal(s.hasFinishedRequests(), true);

  // Step 4: nothing to run; the worker learns that A finished.
  ({ so } = step(s));
  assert.equal(so.totalNumScheduledTokens, 0);
  assert.deepEqual([...so.finishedReqIds], ["A"]);
  assert.equal(s.hasFinishedRequests(), false);
  assert.equal(s.getRequest(rid("A")), undefined);
});

test("continuous batching: B joins while A decodes; running requests are served first", () => {
  const s = makeScheduler();
  s.addRequest(req("A", tokens(100, 8), { maxTokens: 10 }));
  // Step 1: A's prompt fills blocks [0, 1] exactly.
  let { so } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1) });

  // B arrives. Step 2: A's token 8 needs a third block (2); then B's 6-token prompt gets [3, 4].
  s.addRequest(req("B", tokens(200, 6), { maxTokens: 10 }));
  ({ so } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, bids(2), 8] });
  assert.deepEqual(newReqBlocks(so), { B: bids(3, 4) });
  assert.deepEqual(scheduled(so), { A: 1, B: 6 });
  assert.deepEqual([...so.numScheduledTokens.keys()], ["A", "B"]);

  // Step 3: both decode, no new blocks.
  ({ so } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, [], 9], B: [false, [], 6] });
  assert.deepEqual(scheduled(so), { A: 1, B: 1 });
  assert.deepEqual(s.kvCacheManager.getBlockIds(rid("A")), [0, 1, 2]);
  assert.deepEqual(s.kvCacheManager.getBlockIds(rid("B")), [3, 4]);
});

test("maxNumSeqs: the third request waits until a running one finishes", () => {
  const s = makeScheduler({ maxNumSeqs: 2 });
  s.addRequest(req("A", tokens(100, 4), { maxTokens: 1 }));
  s.addRequest(req("B", tokens(200, 4), { maxTokens: 5 }));
  s.addRequest(req("C", tokens(300, 4), { maxTokens: 5 }));

  // Step 1: A and B run (blocks [0], [1]); C waits. A's single token finishes it.
  let { so, outs } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(0), B: bids(1) });
  assert.equal(s.numWaiting, 1);
  assert.equal(outs.find((o) => o.reqId === "A")!.finishReason, "length");

  // Step 2: A's block 0 went back to the queue's back; C (after B's decode: block 2) gets block 3.
  ({ so } = step(s));
  assert.deepEqual(cachedReqs(so), { B: [false, bids(2), 4] });
  assert.deepEqual(newReqBlocks(so), { C: bids(3) });
  assert.deepEqual([...so.finishedReqIds], ["A"]);
  assert.equal(s.numRunning, 2);
  assert.equal(s.numWaiting, 0);
});

test("token budget + chunked prefill: a long prompt is split across steps and samples only at the end", () => {
  const s = makeScheduler({ maxNumBatchedTokens: 8 });
  const a = req("A", tokens(100, 20), { maxTokens: 4 });
  s.addRequest(a);

  // Step 1: first chunk, tokens 0-7, blocks [0, 1]; no token sampled, no output.
  let { so, outs } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1) });
  assert.deepEqual(scheduled(so), { A: 8 });
  assert.deepEqual(outs, []);
  assert.equal(a.numComputedTokens, 8);
  assert.equal(a.numOutputTokens, 0);

  // Step 2: tokens 8-15, blocks [2, 3], still no output.
  ({ so, outs } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, bids(2, 3), 8] });
  assert.deepEqual(outs, []);

  // B arrives. Step 3: A's last 4 prompt tokens (block 4) and B's first 4 tokens (block 5).
  s.addRequest(req("B", tokens(200, 10), { maxTokens: 4 }));
  ({ so, outs } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, bids(4), 16] });
  assert.deepEqual(newReqBlocks(so), { B: bids(5) });
  assert.deepEqual(scheduled(so), { A: 4, B: 4 });
  // A's prefill is complete: its first token. B is mid-prefill: nothing.
  assert.deepEqual(
    outs.map((o) => [o.reqId, o.newTokenIds]),
    [["A", [7]]],
  );

  // Step 4: A decodes token 20 (block 6); B gets the remaining 7 of the budget: tokens 4-9 are
  // only 6, so B finishes its prefill (blocks 7, 8) and samples.
  ({ so, outs } = step(s));
  assert.deepEqual(cachedReqs(so), { A: [false, bids(6), 20], B: [false, bids(7, 8), 4] });
  assert.deepEqual(scheduled(so), { A: 1, B: 6 });
  assert.deepEqual(
    outs.map((o) => o.reqId),
    ["A", "B"],
  );
});

test("chunked prefill off: a prompt that does not fit the rest of the budget waits, and so does the queue behind it", () => {
  const s = makeScheduler({ enableChunkedPrefill: false, maxNumBatchedTokens: 16, maxModelLen: 16 });
  s.addRequest(req("A", tokens(100, 10), { maxTokens: 4 }));
  s.addRequest(req("B", tokens(200, 8), { maxTokens: 4 }));
  s.addRequest(req("C", tokens(300, 2), { maxTokens: 4 }));

  // Step 1: A takes 10 of 16; B's 8 do not fit the 6 left, so B waits and C (which would fit)
  // waits behind it (FCFS).
  let { so } = step(s);
  assert.deepEqual(scheduled(so), { A: 10 });
  assert.deepEqual(
    s.waitingRequests.map((r) => r.requestId),
    ["B", "C"],
  );

  // Step 2: A decodes 1; B's 8 and C's 2 fit in the 15 left.
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 1, B: 8, C: 2 });
  assert.deepEqual(newReqBlocks(so), { B: bids(3, 4), C: bids(5) });
});
