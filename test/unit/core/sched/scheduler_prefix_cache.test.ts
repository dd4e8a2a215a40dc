/**
 * Scheduler with prefix caching: hits on admission, hits on blocks filled in the same step,
 * the stats, and numCachedTokens in outputs. Block size 4.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { bids, makeScheduler, newReqBlocks, req, scheduled, step, tokens } from "../helpers.js";

test("prefix cache: a later request reuses the shared full blocks and computes only the rest", () => {
  const s = makeScheduler({}, { enablePrefixCaching: true });
  s.addRequest(req("A", tokens(100, 10), { maxTokens: 8 }));
  // Step 1: A [0, 1, 2]; blocks 0 (tokens 100-103) and 1 (104-107) are full and cached.
  let { so } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1, 2) });

  // B shares A's first 8 tokens. Step 2: A decodes; B hits [0, 1] and computes its 4 other
  // tokens into a fresh block 3.
  s.addRequest(req("B", [...tokens(100, 8), 900, 901, 902, 903], { maxTokens: 8 }));
  const r2 = step(s);
  so = r2.so;
  const outs = r2.outs;
  assert.deepEqual(newReqBlocks(so), { B: bids(0, 1, 3) });
  assert.equal(so.scheduledNewReqs[0]!.numComputedTokens, 8);
  assert.deepEqual(scheduled(so), { A: 1, B: 4 });
  assert.equal(outs.find((o) => o.reqId === "B")!.numCachedTokens, 8);
  assert.equal(outs.find((o) => o.reqId === "B")!.numHostCachedTokens, 0, "one tier: no host hits");
  assert.equal(s.kvCacheManager.blockPool.blocks[0]!.refCnt, 2);

  // Stats count scheduled requests' tokens: A looked up 10 (0 hits), B 12 (8 hits).
  const st = s.makeStats();
  assert.equal(st.prefixCacheQueries, 22);
  assert.equal(st.prefixCacheHits, 8);
  assert.equal(st.kvCacheUsage, 4 / 16);
  assert.equal(st.numRunningReqs, 2);
  assert.equal(st.numWaitingReqs, 0);
});

test("prefix cache: a request admitted in the same step hits blocks that are being filled in that step", () => {
  // The worker writes a step's KV before attention reads it, so B may use A's blocks at once.
  const s = makeScheduler({}, { enablePrefixCaching: true });
  s.addRequest(req("A", tokens(100, 9), { maxTokens: 4 }));
  s.addRequest(req("B", tokens(100, 9), { maxTokens: 4 }));
  const { so } = step(s);
  // A: [0, 1, 2]; B: hits [0, 1] (at most floor(8 / 4) = 2 blocks), fresh block 3 for token 8.
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1, 2), B: bids(0, 1, 3) });
  assert.deepEqual(scheduled(so), { A: 9, B: 1 });
});

test("prefix cache off: identical prompts share nothing and stats stay at zero", () => {
  const s = makeScheduler();
  s.addRequest(req("A", tokens(100, 8)));
  s.addRequest(req("B", tokens(100, 8)));
  const { so } = step(s);
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1), B: bids(2, 3) });
  assert.equal(s.makeStats().prefixCacheQueries, 0);
});
