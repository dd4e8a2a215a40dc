/**
 * Streaming prefill (HybridPolicyConfig.spillsPrefill, DSA models): when the worker's attention
 * reads a prefilling request's host-resident pages from the host tier, a request longer than the
 * device pool prefills by spilling its own mirrored pages. Narrated with exact ids (block size 4;
 * sink = page 0; window = the tail page; hot buffer = 2 blocks; chunks of 8 tokens = 2 pages;
 * device pool 10 blocks, host pool 32).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { PageState } from "../../../../src/core/hisparse/residency.js";
import { asRequestId } from "../../../../src/core/ids.js";
import { req, tokens } from "../helpers.js";
import { deltas, hisparseScheduler, hsStep, pageStates } from "./helpers.js";

const { ACTIVE: A_, INACTIVE: I_ } = PageState;
const CHUNK = { maxNumBatchedTokens: 8 };

test("streaming prefill: a 48-token request prefills through a 10-block pool by spilling its own mirrored pages", () => {
  const { s, hs } = hisparseScheduler({}, 10, 32, CHUNK, { prefillReadsHostTier: true, ...CHUNK });
  // The pool holds what a streaming prefill keeps (sink 1 + window 1 + 2 chunks of 3 pages + hot 2
  // = 10 blocks), so the host pool alone bounds a request: 32 blocks.
  assert.equal(hs.policy.streamingPrefillBlocks(), 10);
  assert.equal(s.maxBlocksPerRequest, 32);
  s.addRequest(req("A", tokens(100, 48), { maxTokens: 4 }));

  // Steps 1-5: chunks of 8 tokens take pages 0-9 = device blocks 0-9 = host blocks 0-9; each
  // chunk's full pages are mirrored in its step. The pool is now full.
  for (let k = 0; k < 5; k++) {
    const { so, plan } = hsStep(s);
    assert.deepEqual([...so.numScheduledTokens.values()], [8]);
    assert.deepEqual(deltas(plan), {
      A: {
        pages: [
          [2 * k, 2 * k, 2 * k],
          [2 * k + 1, 2 * k + 1, 2 * k + 1],
        ],
      },
    });
    assert.deepEqual(plan.sparseReqIds, []);
  }

  // Step 6: tokens 40-47 need pages 10 and 11, and the pool has no free block. The policy spills
  // A's own pages 1-8 (mirrored; page 0 is the sink, page 9 the window of the 40 tokens
  // computed): blocks 1-8 are freed, pages 10 and 11 take blocks 1 and 2, and A's hot buffer
  // (it now holds INACTIVE pages) takes blocks 3 and 4. A still prefills: it is not a sparse
  // decode (the worker reads its pages 1-8 from the host tier).
  let { plan } = hsStep(s);
  assert.deepEqual(deltas(plan), {
    A: {
      pages: [
        [10, 10, 1],
        [11, 11, 2],
      ],
      spilled: [1, 2, 3, 4, 5, 6, 7, 8],
      hot: [3, 4],
    },
  });
  assert.deepEqual(plan.sparseReqIds, []);
  assert.deepEqual(pageStates(hs, "A"), [A_, I_, I_, I_, I_, I_, I_, I_, I_, A_, A_, A_]);
  assert.equal(hs.stats().spilledPagesTotal, 8);

  // Step 7: the prompt is computed; A's first output token opens page 12 (block 5) and A decodes
  // sparsely from now on.
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), { A: { pages: [[12, 12, 5]] } });
  assert.deepEqual(plan.sparseReqIds, [asRequestId("A")]);
  // Nothing was preempted on the way.
  assert.equal(s.makeStats().numPreemptions, 0);
});

test("without a worker that reads host pages in prefill, a prefill keeps every page: the same request is refused", () => {
  const { s } = hisparseScheduler({}, 10, 32, CHUNK);
  // A prefill attends over every page on the device: the pool (10 blocks = 40 tokens) bounds a request.
  assert.equal(s.maxBlocksPerRequest, 10);
  assert.match(s.admissionError(req("A", tokens(100, 48), { maxTokens: 4 })) ?? "", /48|blocks|tokens/);
});

test("streaming prefill admission: a second long request starts beside the first once that one's pages spilled, and neither is preempted", () => {
  const { s, hs } = hisparseScheduler({}, 16, 64, CHUNK, { prefillReadsHostTier: true, ...CHUNK });
  s.addRequest(req("A", tokens(100, 80), { maxTokens: 8 }));
  s.addRequest(req("B", tokens(300, 80), { maxTokens: 8 }));
  const B = asRequestId("B");
  const admitted: boolean[] = [];
  const bTokens: number[] = [];
  const states: string[][] = [];
  const code = (id: string) =>
    pageStates(hs, id)
      .map((x) => (x === A_ ? "A" : "I"))
      .join("");
  for (let i = 0; i < 40 && s.getRequest(B) !== undefined; i++) {
    admitted.push(hs.policy.admitsPrefill(s.getRequest(B)!, s));
    const { so } = hsStep(s);
    bTokens.push(so.numScheduledTokens.get(B) ?? 0);
    states.push([code("A"), code("B")]);
  }
  // Steps 1-8: A's chunks fill the pool. From step 3 on B is not admitted: it would need 10
  // blocks (a streaming prefill's most) beside what A keeps (its resident pages, none spillable
  // at a gain yet, and its next chunk's 3).
  assert.deepEqual(admitted.slice(2, 9), [false, false, false, false, false, false, false]);
  // Step 9: A's next chunk finds the pool full and spills A's own pages 1-14.
  assert.deepEqual(states[8]![0], `A${"I".repeat(14)}AAA`);
  // Step 11: A decodes (1 token) and B's prefill starts beside it (7 tokens of the budget).
  assert.equal(
    bTokens.findIndex((n) => n > 0),
    10,
  );
  // Step 15: B's chunk spills the decoding A's pages 15-19; step 17: B spills its own pages 1-9.
  assert.deepEqual(states[14]![0], `A${"I".repeat(20)}A`);
  assert.deepEqual(states[16]![1], `A${"I".repeat(9)}AAA`);
  // Both finish, and nothing was preempted: every shortage was met by a spill.
  assert.equal(s.getRequest(B), undefined);
  assert.equal(s.makeStats().numPreemptions, 0);
});
