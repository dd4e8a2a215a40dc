/**
 * Hybrid HiSparse residency, narrated step by step with exact block ids, host block ids and page
 * states (block size 4; sink = page 0; window = the tail page; hot buffer = 2 blocks). Each plan
 * carries page-table deltas: the pages appended as [page, host block, device block], the earlier
 * pages spilled and pinned, the hot blocks given (helpers.ts deltas).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { PageState } from "../../../../src/core/hisparse/residency.js";
import { asRequestId } from "../../../../src/core/ids.js";
import { RequestStatus } from "../../../../src/core/request.js";
import { fakeRunnerOutput, req, tokens } from "../helpers.js";
import { deltas, hisparseScheduler, hsStep, mirrors, pageStates } from "./helpers.js";

const { ACTIVE: A_, INACTIVE: I_ } = PageState;

test("eager mirror: a page is copied to its host block in the step that fills it", () => {
  const { s, hs } = hisparseScheduler({}, 10, 32);
  s.addRequest(req("A", tokens(100, 10), { maxTokens: 8 }));

  // Step 1: A's 10-token prefill takes pages 0-2 = device blocks 0-2 = host blocks 0-2 (A's
  // first delta: its whole table). Pages 0 and 1 are full: mirror 0->0, 1->1. Page 2 holds 2
  // tokens: not yet.
  let { plan } = hsStep(s);
  assert.deepEqual(deltas(plan), {
    A: {
      pages: [
        [0, 0, 0],
        [1, 1, 1],
        [2, 2, 2],
      ],
    },
  });
  assert.deepEqual(mirrors(plan), [
    [0, 0],
    [1, 1],
  ]);
  assert.deepEqual(plan.sparseReqIds, []);

  // Step 2: token 10 goes to page 2, offset 2: no delta, nothing to mirror.
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), {});
  assert.deepEqual(mirrors(plan), []);

  // Step 3: token 11 fills page 2: mirror 2->2. Step 4: token 12 opens page 3 = block 3 = host 3:
  // the delta carries page 3 alone.
  ({ plan } = hsStep(s));
  assert.deepEqual(mirrors(plan), [[2, 2]]);
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), { A: { pages: [[3, 3, 3]] } });
  assert.deepEqual(hs.stats().mirroredPagesTotal, 3);
  // With no pressure nothing is spilled: every page is ACTIVE.
  assert.equal(hs.stats().spilledPagesTotal, 0);
  assert.equal(hs.stats().numActivePages, 4);
});

test("auto: a failed allocation spills the best victim's pages (never sink, window, tail or pinned) instead of preempting", () => {
  // Token 105 is whitelisted: it is A's token 5, so A's page 1 is pinned.
  const { s, hs } = hisparseScheduler({ whitelistTokenIds: [105] }, 10, 32);
  s.addRequest(req("A", tokens(100, 24), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 12), { maxTokens: 8 }));

  // Step 1: A's prefill takes pages 0-5 (blocks 0-5, host 0-5), page 1 pinned; B's pages 0-2
  // (blocks 6-8, host 6-8). All full pages are mirrored; block 9 stays free.
  let { plan } = hsStep(s);
  assert.deepEqual(deltas(plan), {
    A: {
      pages: [
        [0, 0, 0],
        [1, 1, 1],
        [2, 2, 2],
        [3, 3, 3],
        [4, 4, 4],
        [5, 5, 5],
      ],
      pinned: [1],
    },
    B: {
      pages: [
        [0, 6, 6],
        [1, 7, 7],
        [2, 8, 8],
      ],
    },
  });
  assert.deepEqual(mirrors(plan).length, 9);

  // Step 2: A's token 24 opens page 6 -> block 9, host 9. B's token 12 opens page 3: no block is
  // free. Victims (decode phase): A has pages 2-5 spillable (0 is a sink, 1 pinned, 6 the tail):
  // 4 pages - 2 hot blocks = gain 2; B has pages 1-2 (page 3 is its window): gain 0. A spills
  // pages 2-5 (blocks 2, 3, 4, 5 return to the pool in that order); A runs in this step, so it
  // takes its hot buffer at once: blocks 2 and 3. B gets block 4 (host 10). Nobody is preempted.
  // A's delta: page 6 (host 9, block 9), pages 2-5 spilled (their device block becomes -1), hot
  // blocks 2, 3; B's: page 3 (host 10, block 4).
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), {
    A: { pages: [[6, 9, 9]], spilled: [2, 3, 4, 5], hot: [2, 3] },
    B: { pages: [[3, 10, 4]] },
  });
  assert.deepEqual(plan.sparseReqIds, ["A"]);
  assert.deepEqual(s.kvCacheManager.blockPool.freeBlockIds(), [5]);
  assert.equal(s.makeStats().numPreemptions, 0);
  const st = hs.stats();
  assert.deepEqual(
    [st.spilledPagesTotal, st.numActivePages, st.numInactivePages, st.numSparseRequests],
    [4, 3 + 4, 4, 1],
  );
  assert.deepEqual(pageStates(hs, "A"), [A_, A_, I_, I_, I_, I_, A_]);
  assert.deepEqual(pageStates(hs, "B"), [A_, A_, A_, A_]);

  // Step 3: the worker recalled A's pages 2 and 5 into its hot buffer (it reports 2 SPARSE
  // pages): of A's 4 INACTIVE pages, 2 are SPARSE now. No table changes: no delta.
  ({ plan } = hsStep(s, { numSparsePages: 2, hits: 4, misses: 8, hostToDeviceBytes: 8 * 64 }));
  assert.deepEqual(deltas(plan), {});
  const st3 = hs.stats();
  assert.deepEqual(
    [st3.numActivePages, st3.numSparsePages, st3.numInactivePages, st3.hitsTotal, st3.missesTotal],
    [7, 2, 2, 4, 8],
  );
});

test("auto: a victim that does not run yet takes its hot buffer with its own next allocation", () => {
  const { s } = hisparseScheduler({}, 9, 32);
  s.addRequest(req("A", tokens(100, 12), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 20), { maxTokens: 8 }));
  // Step 1: A pages 0-2 (blocks 0-2), B pages 0-4 (blocks 3-7); block 8 free.
  hsStep(s);
  // Step 2: A (oldest, served first) opens page 3: block 8. B opens page 5: none free. Victims:
  // B has pages 1-4 spillable (its window is page 5; gain 4 - 2 = 2), A pages 1-2 (gain 0): B
  // spills pages 1-4 (blocks 4-7 freed). B is the requester itself and not scheduled yet: its retried
  // allocation takes its new page (block 4, host 9) and its hot buffer (blocks 5, 6) together.
  // A's page 3 is host 8, block 8.
  const { plan } = hsStep(s);
  assert.deepEqual(deltas(plan), {
    A: { pages: [[3, 8, 8]] },
    B: { pages: [[5, 9, 4]], spilled: [1, 2, 3, 4], hot: [5, 6] },
  });
  assert.deepEqual(s.kvCacheManager.blockPool.freeBlockIds(), [7]);
  assert.deepEqual(plan.sparseReqIds, ["B"]);
  assert.equal(s.makeStats().numPreemptions, 0);
});

test("auto: until the worker confirms a page's mirror, the page is not spilled: the newest request is preempted", () => {
  const { s, hs } = hisparseScheduler({}, 6, 32);
  s.addRequest(req("A", tokens(100, 12), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 12), { maxTokens: 8 }));
  // Step 1: A blocks 0-2, B blocks 3-5; the pool is full. The worker's answer carries no
  // "hisparse" result, so the mirrors of pages 0-2 of each request are not confirmed.
  const so = s.schedule();
  s.updateFromOutput(so, fakeRunnerOutput(s, so));
  // Step 2: A's token 12 opens page 3, no block is free. A's and B's pages 1-2 would be
  // spillable but their mirrors are unconfirmed: the policy frees nothing, B is preempted.
  const { so: so2 } = hsStep(s);
  assert.deepEqual([...so2.preemptedReqIds], ["B"]);
  assert.equal(hs.stats().spilledPagesTotal, 0);
});

test("auto: a victim whose pages do not outnumber its hot buffer is never spilled: the newest request is preempted", () => {
  const { s, hs } = hisparseScheduler({}, 6, 32);
  s.addRequest(req("A", tokens(100, 12), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 12), { maxTokens: 8 }));
  // Step 1: A blocks 0-2, B blocks 3-5 (mirrors confirmed).
  hsStep(s);
  // Step 2: A opens page 3, none free. A and B both have pages 1-2 spillable, 2 pages for a
  // 2-block hot buffer: a spill would free nothing, so there is no victim. B, the newest, is
  // preempted (blocks 3-5 and host blocks 5, 4, 3 return, tail first) and A's page 3 gets block 5
  // and host block 6. B, freed, sends no delta.
  const { so, plan } = hsStep(s);
  assert.deepEqual([...so.preemptedReqIds], ["B"]);
  assert.equal(hs.stats().spilledPagesTotal, 0);
  assert.deepEqual(deltas(plan), { A: { pages: [[3, 6, 5]] } });
  assert.deepEqual(plan.sparseReqIds, []);
});

test("host pool exhausted: spilling cannot make host room, so the newest request is preempted", () => {
  const { s, hs } = hisparseScheduler({}, 20, 8);
  const a = req("A", tokens(100, 16), { maxTokens: 8 });
  const b = req("B", tokens(200, 16), { maxTokens: 8 });
  s.addRequest(a);
  s.addRequest(b);
  // Step 1: A pages 0-3 = host 0-3, B pages 0-3 = host 4-7: the host pool is full.
  hsStep(s);
  assert.equal(hs.stats().hostPoolUsedBlocks, 8);
  // Step 2: A's token 16 opens page 4: device blocks are free, host blocks are not. The policy
  // does not spill (a spill keeps the host block); B, the newest, is preempted: its 4 host
  // blocks return (tail first: 7, 6, 5, 4) and A's new page takes host block 7.
  const { so, plan } = hsStep(s);
  assert.deepEqual([...so.preemptedReqIds], ["B"]);
  assert.equal(b.status, RequestStatus.PREEMPTED);
  assert.equal(hs.stats().spilledPagesTotal, 0);
  assert.deepEqual(deltas(plan), { A: { pages: [[4, 7, 8]] } }, "A's page 4: host 7, block 8");
  assert.deepEqual(hs.kvCacheManager.hostBlockPool.freeBlockIds(), [6, 5, 4]);
});

test("admission: a request that cannot fit the device pool densely or the host tier is rejected with a sentence", () => {
  // Device pool 10 blocks (40 tokens), host pool 32: prompt 30 + 20 outputs needs 49 tokens.
  let { s } = hisparseScheduler({}, 10, 32);
  const big = req("X", tokens(100, 30), { maxTokens: 20 });
  assert.equal(
    s.admissionError(big),
    "the request may need 49 tokens of KV cache (prompt plus max_tokens), more than the 40 the cache can hold",
  );
  // Device pool 20 blocks, host tier 8 blocks (32 tokens): 40 tokens do not fit the host tier.
  ({ s } = hisparseScheduler({}, 20, 8));
  const long = req("Y", tokens(100, 30), { maxTokens: 11 });
  assert.match(s.admissionError(long)!, /40 tokens of KV cache .* more than the 32 the cache can hold/);
  s.addRequest(long);
  assert.equal(long.status, RequestStatus.FINISHED_IGNORED);
});

test("on: a request longer than min_sparse_tokens goes host-resident at its first decode; a short one stays dense", () => {
  const { s, hs } = hisparseScheduler({ mode: "on", minSparseTokens: 16 }, 32, 64);
  assert.equal(hs.policy.config.residency, "host"); // the default for on
  s.addRequest(req("A", tokens(100, 24), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 8), { maxTokens: 8 }));
  // Step 1: prefill (dense, every page ACTIVE): A blocks 0-5, B blocks 6-7.
  let { plan } = hsStep(s);
  assert.deepEqual(plan.sparseReqIds, []);
  // Step 2: A (25 tokens > 16) opens page 6 (block 8), then spills pages 1-5 (blocks 1-5 freed)
  // and takes its hot buffer from the front of the free queue: blocks 10 and 11 (the freed ones
  // are queued behind 9-31). B (9 tokens) stays dense: its page 2 gets block 9 (host 9).
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), {
    A: { pages: [[6, 8, 8]], spilled: [1, 2, 3, 4, 5], hot: [10, 11] },
    B: { pages: [[2, 9, 9]] },
  });
  assert.deepEqual(plan.sparseReqIds, ["A"]);
  // Later steps: each page that leaves A's window is spilled once mirrored.
  for (let i = 0; i < 4; i++) ({ plan } = hsStep(s));
  assert.equal(hs.stats().spilledPagesTotal, 5 + 1);
});

test("finished requests return every device, hot and host block", () => {
  const { s, hs } = hisparseScheduler({ mode: "on", minSparseTokens: 8 }, 16, 32);
  s.addRequest(req("A", tokens(100, 20), { maxTokens: 6 }));
  s.addRequest(req("B", tokens(200, 14), { maxTokens: 9 }));
  let steps = 0;
  while (s.hasUnfinishedRequests() && steps++ < 50) hsStep(s);
  hsStep(s); // delivers the finished ids
  assert.equal(s.kvCacheManager.numFreeBlocks, 16);
  assert.equal(hs.kvCacheManager.hostBlockPool.numFreeBlocks, 32);
  assert.ok(hs.stats().spilledPagesTotal > 0);
});

test("on, residency hybrid: a long request attends sparsely with its pages resident and no hot buffer until pressure spills it", () => {
  const { s, hs } = hisparseScheduler({ mode: "on", residency: "hybrid", minSparseTokens: 16 }, 10, 32);
  s.addRequest(req("A", tokens(100, 24), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(200, 8), { maxTokens: 8 }));
  // Step 1: prefill (dense): A blocks 0-5, B blocks 6-7.
  let { plan } = hsStep(s);
  assert.deepEqual(plan.sparseReqIds, []);
  // Step 2: A (25 tokens > 16) decodes sparsely but keeps every page on the device and takes no
  // hot buffer: page 6 -> block 8. B (9 tokens) stays dense: page 2 -> block 9. The pool is full.
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), { A: { pages: [[6, 8, 8]] }, B: { pages: [[2, 9, 9]] } });
  assert.deepEqual(plan.sparseReqIds, ["A"]);
  // Steps 3-5 fill the open pages: nothing moves, A keeps decoding sparsely.
  for (let i = 0; i < 3; i++) {
    ({ plan } = hsStep(s));
    assert.deepEqual([deltas(plan), plan.sparseReqIds], [{}, ["A"]]);
  }
  assert.deepEqual([hs.stats().spilledPagesTotal, hs.stats().sparseDecodesTotal], [0, 4]);
  assert.deepEqual(pageStates(hs, "A"), [A_, A_, A_, A_, A_, A_, A_]);
  // Step 6: A's token 28 opens page 7 and the pool is empty: pressure. A spills pages 1-6 (gain
  // 6 - 2 hot blocks; page 0 is a sink, page 7 the window: blocks 1-5 and 8 return to the pool in
  // that order); A's retried allocation takes block 1 for page 7, then its hot buffer (blocks 2,
  // 3); B's page 3 gets block 4. Nobody is preempted. A's page 7 is host 10, B's page 3 host 11.
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), {
    A: { pages: [[7, 10, 1]], spilled: [1, 2, 3, 4, 5, 6], hot: [2, 3] },
    B: { pages: [[3, 11, 4]] },
  });
  assert.deepEqual(plan.sparseReqIds, ["A"]);
  assert.deepEqual([hs.stats().spilledPagesTotal, s.makeStats().numPreemptions], [6, 0]);
  assert.deepEqual(pageStates(hs, "A"), [A_, I_, I_, I_, I_, I_, I_, A_]);
});

test("on, residency hybrid: dense up to min_sparse_tokens tokens and for a prompt's last chunk of one token", () => {
  const cfg = { mode: "on", residency: "hybrid", minSparseTokens: 16 } as const;
  // B: a 15-token prompt. Its first decode step computes token 15 with 16 tokens: dense; the next
  // one has 17 > 16 tokens: sparse.
  const b = hisparseScheduler(cfg, 32, 64);
  b.s.addRequest(req("B", tokens(200, 15), { maxTokens: 4 }));
  const plansB = [hsStep(b.s), hsStep(b.s), hsStep(b.s)].map(({ plan }) => plan.sparseReqIds);
  assert.deepEqual(plansB, [[], [], ["B"]]);
  // A: a 17-token prompt with a 16-token budget per step: the prompt's last chunk is one token
  // (token 16, in its decode phase by token count) and stays dense; its first output is decoded
  // sparsely.
  const a = hisparseScheduler(cfg, 32, 64, { maxNumBatchedTokens: 16 });
  a.s.addRequest(req("A", tokens(100, 17), { maxTokens: 4 }));
  const plansA = [hsStep(a.s), hsStep(a.s), hsStep(a.s)].map(({ so, plan }) => [
    so.numScheduledTokens.get(asRequestId("A")),
    plan.sparseReqIds,
  ]);
  assert.deepEqual(plansA, [
    [16, []],
    [1, []],
    [1, ["A"]],
  ]);
  assert.equal(a.hs.stats().sparseDecodesTotal, 1);
});

test("pressure is relieved all or nothing: a spill that cannot admit the waiting request is not made", () => {
  const { s, hs } = hisparseScheduler({ mode: "on", residency: "hybrid", minSparseTokens: 8 }, 6, 32);
  s.addRequest(req("A", tokens(100, 16), { maxTokens: 8 }));
  hsStep(s); // A's prefill: blocks 0-3
  hsStep(s); // A's token 16 opens page 4: block 4; block 5 stays free
  // B needs 3 blocks, 1 is free: deficit 2. A (running in this step) could spill pages 1-3 but
  // would take its 2-block hot buffer at once: 1 block gained now, short of 2. Nothing moves: B
  // waits and A keeps every page on the device.
  s.addRequest(req("B", tokens(200, 12), { maxTokens: 4 }));
  const { plan } = hsStep(s);
  assert.deepEqual(plan.sparseReqIds, ["A"]);
  assert.deepEqual([hs.stats().spilledPagesTotal, s.makeStats().numWaitingReqs], [0, 1]);
  assert.deepEqual(pageStates(hs, "A"), [A_, A_, A_, A_, A_]);
});

test("a prompt's one-token last chunk is no spill victim (auto) and goes host-resident only at its first output (on, host)", () => {
  for (const cfg of [{ mode: "auto" }, { mode: "on", minSparseTokens: 16 }] as const) {
    // A: a 21-token prompt, 20 tokens per step: step 2 computes its last prompt token alone.
    // C arrives then and needs 3 blocks of the 8 (A holds 5 pages + its next one): pressure.
    const { s, hs } = hisparseScheduler(cfg, 8, 64, { maxNumBatchedTokens: 20 });
    s.addRequest(req("A", tokens(100, 21), { maxTokens: 4 }));
    hsStep(s);
    s.addRequest(req("C", tokens(300, 12), { maxTokens: 4 }));
    const { so, plan } = hsStep(s);
    assert.equal(so.numScheduledTokens.get(asRequestId("A")), 1, JSON.stringify(cfg));
    assert.deepEqual([plan.sparseReqIds, hs.stats().spilledPagesTotal], [[], 0], JSON.stringify(cfg));
    assert.deepEqual(pageStates(hs, "A"), [A_, A_, A_, A_, A_, A_], JSON.stringify(cfg));
  }
});

test("page-table deltas: a pin found later names its page alone; a request resumed after preemption sends its table anew from page 0", () => {
  // Token 7 is whitelisted: every output token (the fake worker samples 7) pins its page.
  const pins = hisparseScheduler({ whitelistTokenIds: [7] }, 10, 32);
  pins.s.addRequest(req("A", tokens(100, 6), { maxTokens: 8 }));
  // Step 1: A's 6-token prefill: pages 0-1 (host 0-1, blocks 0-1), nothing whitelisted yet.
  // Step 2: token 6 (a 7) lands in page 1, sent already: the delta pins page 1 and nothing else.
  // Step 3: token 7 (a 7) is in page 1 too: pinned already, no delta. Step 4: token 8 opens page
  // 2 (host 2, block 2) and pins it: one delta carries both.
  const pinDeltas = [1, 2, 3, 4].map(() => deltas(hsStep(pins.s).plan));
  assert.deepEqual(pinDeltas, [
    {
      A: {
        pages: [
          [0, 0, 0],
          [1, 1, 1],
        ],
      },
    },
    { A: { pinned: [1] } },
    {},
    { A: { pages: [[2, 2, 2]], pinned: [2] } },
  ]);

  const { s } = hisparseScheduler({}, 6, 32);
  s.addRequest(req("A", tokens(100, 12), { maxTokens: 3 }));
  s.addRequest(req("B", tokens(200, 12), { maxTokens: 3 }));
  // Step 1 (mirrors left unconfirmed): A blocks 0-2 = host 0-2, B blocks 3-5 = host 3-5.
  const so1 = s.schedule();
  s.updateFromOutput(so1, fakeRunnerOutput(s, so1));
  // Step 2: A opens page 3 with no block free and nothing spillable: B is preempted (blocks 5,
  // 4, 3 and host blocks 5, 4, 3 return, tail first); A's page 3 takes block 5 and host block 6.
  let step = hsStep(s);
  assert.deepEqual([[...step.so.preemptedReqIds], deltas(step.plan)], [["B"], { A: { pages: [[3, 6, 5]] } }]);
  // Step 3: A decodes its third token: no delta. Step 4: A has finished (blocks 5, 2, 1, 0
  // return); B resumes, recomputing 13 tokens: its first delta since the preemption starts at
  // page 0 (the worker dropped B's table when it was preempted): pages 0-3 = host 7-10 (FIFO
  // reuse), blocks 4, 3, 5, 2 (the free queue's order).
  assert.deepEqual(deltas(hsStep(s).plan), {});
  step = hsStep(s);
  assert.deepEqual([...step.so.finishedReqIds], ["A"]);
  assert.deepEqual(deltas(step.plan), {
    B: {
      pages: [
        [0, 7, 4],
        [1, 8, 3],
        [2, 9, 5],
        [3, 10, 2],
      ],
    },
  });
  assert.equal(step.plan.pageTableDeltas[0]!.firstNewPage, 0);
});

test("admission: a second prefill waits while the first would leave the pool too little for all its pages; it starts once the first decodes", () => {
  // 10 blocks; a decoding request keeps at least sink 1 + window 1 + hot 2 + 1 = 5. Chunks of 8.
  const { s, hs } = hisparseScheduler({}, 10, 64, { maxNumBatchedTokens: 16, longPrefillTokenThreshold: 8 });
  s.addRequest(req("A", tokens(100, 24), { maxTokens: 8 })); // 6 pages
  s.addRequest(req("B", tokens(200, 20), { maxTokens: 4 })); // 5 pages
  // Steps 1-3: A prefills 8 tokens each; B would fit the budget, but A's 6 pages beside B's 5
  // exceed the pool: B waits (without the check it would start and run the pool dry mid-prefill).
  for (let i = 0; i < 3; i++) {
    const { so } = hsStep(s);
    assert.deepEqual([...so.numScheduledTokens.keys()], ["A"], `step ${i + 1}`);
  }
  // Step 4: A decodes (25 tokens, 7 pages, at least 5 kept): 5 + 5 = 10 fit, B starts.
  const { so } = hsStep(s);
  assert.deepEqual(
    [...so.numScheduledTokens.entries()],
    [
      ["A", 1],
      ["B", 8],
    ],
  );
  for (let i = 0; i < 100 && s.hasUnfinishedRequests(); i++) hsStep(s);
  assert.equal(s.hasUnfinishedRequests(), false);
  // B's later chunks spill A's middle pages instead of preempting anyone.
  assert.equal(s.makeStats().numPreemptions, 0);
  assert.ok(hs.stats().spilledPagesTotal > 0);
});
