/**
 * Stop conditions (vLLM check_stop) and requests finished from outside (aborts, stop strings).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { newExtensionData } from "../../../../src/core/extension_data.js";
import { RequestStatus } from "../../../../src/core/request.js";
import { appendOutputTokens, checkStop } from "../../../../src/core/sched/stop.js";
import { EOS, fakeRunnerOutput, makeScheduler, req, rid, scheduled, step, tokens } from "../helpers.js";

test("checkStop: EOS stops (reason null) and is kept in the output", () => {
  const r = req("A", tokens(100, 4), { maxTokens: 8 });
  assert.deepEqual(appendOutputTokens(r, [5, EOS, 9], 1024), [5, EOS]);
  assert.deepEqual(r.outputTokenIds, [5, EOS]); // the token after EOS is dropped
  assert.equal(r.status, RequestStatus.FINISHED_STOPPED);
  assert.equal(r.stopReason, null);
});

test("checkStop: EOS and stop tokens do not count before minTokens; ignoreEos skips EOS", () => {
  const r = req("A", tokens(100, 4), { maxTokens: 8, minTokens: 2, stopTokenIds: [9] });
  assert.deepEqual(appendOutputTokens(r, [EOS], 1024), [EOS]);
  assert.equal(r.status, RequestStatus.WAITING); // 1 output < minTokens 2: not finished
  assert.deepEqual(appendOutputTokens(r, [9], 1024), [9]);
  assert.equal(r.status, RequestStatus.FINISHED_STOPPED); // 2 outputs: stop token 9 counts
  assert.equal(r.stopReason, 9);

  const ign = req("B", tokens(100, 4), { maxTokens: 3, ignoreEos: true });
  assert.deepEqual(appendOutputTokens(ign, [EOS, EOS, EOS, EOS], 1024), [EOS, EOS, EOS]);
  assert.equal(ign.status, RequestStatus.FINISHED_LENGTH_CAPPED);
});

test("checkStop: maxModelLen caps numTokens; a stop token on the last position reports stop", () => {
  const r = req("A", tokens(100, 6), { maxTokens: 16 });
  assert.deepEqual(appendOutputTokens(r, [5, 5, 5], 8), [5, 5]);
  assert.equal(r.numTokens, 8);
  assert.equal(r.status, RequestStatus.FINISHED_LENGTH_CAPPED);

  const full = req("F", tokens(100, 8), { maxTokens: 16 });
  // A prompt of exactly maxModelLen still yields one token (its KV is never needed).
  assert.deepEqual(appendOutputTokens(full, [5, 5], 8), [5]);
  assert.equal(checkStop(full, 8), true);

  const last = req("L", tokens(100, 4), { maxTokens: 1, stopTokenIds: [9] });
  appendOutputTokens(last, [9], 1024);
  assert.equal(last.status, RequestStatus.FINISHED_STOPPED);
  assert.equal(last.stopReason, 9);
});

test("scheduler: EOS from the worker finishes the request, frees its blocks, reports finish reason stop", () => {
  const s = makeScheduler();
  const a = req("A", tokens(100, 5), { maxTokens: 8 });
  s.addRequest(a);
  step(s); // blocks [0, 1]
  const { outs } = step(s, () => EOS);
  assert.deepEqual(
    outs.map((o) => [o.reqId, o.newTokenIds, o.finishReason, o.stopReason, o.numOutputTokens]),
    [["A", [EOS], "stop", null, 2]],
  );
  assert.equal(s.kvCacheManager.numFreeBlocks, 16);
  assert.equal(s.numRunning, 0);
});

test("scheduler: a prompt as long as maxModelLen produces one token and stops", () => {
  const s = makeScheduler({ maxModelLen: 8 });
  s.addRequest(req("A", tokens(100, 8), { maxTokens: 4 }));
  const { so, outs } = step(s);
  assert.deepEqual(scheduled(so), { A: 8 });
  assert.equal(outs[0]!.finishReason, "length");
  assert.equal(outs[0]!.numOutputTokens, 1);
});

test("aborts: running, waiting and preempted requests leave their queues and free their blocks", () => {
  const s = makeScheduler({ maxNumSeqs: 1 });
  const a = req("A", tokens(100, 6));
  const b = req("B", tokens(200, 6));
  s.addRequest(a);
  s.addRequest(b);
  step(s); // A runs with blocks [0, 1]; B waits (maxNumSeqs 1)
  assert.deepEqual(s.kvCacheManager.getBlockIds(rid("A")), [0, 1]);

  s.finishRequests([rid("A"), rid("B"), rid("nope")], RequestStatus.FINISHED_ABORTED);
  assert.equal(a.status, RequestStatus.FINISHED_ABORTED);
  assert.equal(b.status, RequestStatus.FINISHED_ABORTED);
  assert.equal(s.numRunning + s.numWaiting, 0);
  assert.equal(s.hasUnfinishedRequests(), false);
  // Tail first: A's [0, 1] return as 1, 0 after the never-used blocks.
  assert.deepEqual(s.kvCacheManager.blockPool.freeBlockIds().slice(-2), [1, 0]);
  // Aborting twice is a no-op; the next output tells the worker once.
  s.finishRequests(rid("A"), RequestStatus.FINISHED_ABORTED);
  const so = s.schedule();
  assert.deepEqual([...so.finishedReqIds], ["A", "B"]);
  assert.equal(so.totalNumScheduledTokens, 0);
  assert.throws(
    () => s.finishRequests(rid("A"), RequestStatus.RUNNING),
    /needs a finished status, got running/,
  );
});

test("aborts: a request aborted between schedule() and updateFromOutput() gets no output", () => {
  const s = makeScheduler();
  s.addRequest(req("A", tokens(100, 6)));
  s.addRequest(req("B", tokens(200, 6)));
  const so = s.schedule();
  const mro = fakeRunnerOutput(s, so);
  // A stop string found by the output processor finishes B from outside.
  s.finishRequests(rid("B"), RequestStatus.FINISHED_STOPPED);
  const outs = s.updateFromOutput(so, mro);
  assert.deepEqual(
    outs.map((o) => o.reqId),
    ["A"],
  );
  assert.deepEqual(
    s.runningRequests.map((r) => r.requestId),
    ["A"],
  );
});

test("updateFromOutput: a token for a request still in its prefill is a worker bug", () => {
  const s = makeScheduler({ maxNumBatchedTokens: 4 });
  s.addRequest(req("A", tokens(100, 6)));
  const so = s.schedule(); // 4 of 6 prompt tokens
  const bad = {
    reqIds: [rid("A")],
    sampledTokenIds: [[5]],
    logprobs: [null],
    extensions: newExtensionData(),
  };
  assert.throws(
    () => s.updateFromOutput(so, bad),
    /returned a token for request A before its prefill completed/,
  );
});

test("updateFromOutput: log-probabilities follow their tokens and are cut where the request stops", () => {
  const s = makeScheduler();
  s.addRequest(req("A", tokens(100, 4), { maxTokens: 8, logprobs: 1 }));
  const so = s.schedule();
  const lp = (t: number) => ({ sampledLogprob: -0.5, sampledRank: 1, topTokenIds: [t], topLogprobs: [-0.5] });
  // Two tokens in one step (as with speculative decoding); the first is EOS, so the second and
  // its log-probability are dropped.
  const outs = s.updateFromOutput(so, {
    reqIds: [rid("A")],
    sampledTokenIds: [[EOS, 5]],
    logprobs: [[lp(EOS), lp(5)]],
    extensions: newExtensionData(),
  });
  assert.deepEqual(outs[0]!.newTokenIds, [EOS]);
  assert.deepEqual(outs[0]!.newLogprobs, [lp(EOS)]);
  assert.equal(outs[0]!.finishReason, "stop");
});
