/**
 * Prefix caching over both HiSparse tiers, narrated step by step with exact device blocks, host
 * blocks and ref counts (block size 4; sink = page 0; window = the tail page; hot buffer = 2
 * blocks). Pages are identified by their host block: a hit on a page whose device copy is gone
 * takes the host block alone and a fresh device block, loaded from the host tier before the
 * forward (the plan's `load`); shared pages are ref counted in both pools; a spill drops one
 * holder's device reference and copies nothing; finished requests' pages stay cached until a
 * later allocation evicts them, least recently freed first.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import { createHiSparseScheduling } from "../../../../src/core/hisparse/hisparse_scheduling.js";
import { asHostBlockId } from "../../../../src/core/ids.js";
import { RequestStatus } from "../../../../src/core/request.js";
import { makeScheduler, req, rid, tokens } from "../helpers.js";
import { BS, deltas, hsStep, mirrors } from "./helpers.js";

/** A scheduler with HiSparse and prefix caching over pools of the given sizes. */
function cachedHiSparse(config: Partial<HiSparseConfig>, numGpuBlocks: number, numHostBlocks: number) {
  const cfg = resolveHiSparseConfig({
    mode: "auto",
    topk: 8,
    deviceBufferTokens: 8,
    sinkTokens: 4,
    windowTokens: 4,
    minSparseTokens: 16,
    ...config,
  });
  const hs = createHiSparseScheduling(cfg, {
    blockSize: BS,
    numGpuBlocks,
    numHostBlocks,
    enablePrefixCaching: true,
  });
  const s = makeScheduler(
    {},
    { blockSize: BS, numGpuBlocks, enablePrefixCaching: true },
    hs.schedulerOptions,
  );
  return { s, hs, kv: hs.kvCacheManager };
}

const hostRefs = (kv: { hostBlockPool: { refCount(id: never): number } }, ids: number[]) =>
  ids.map((h) => kv.hostBlockPool.refCount(asHostBlockId(h) as never));

test("a hit on a host-only page: the host block is shared, a fresh device block is loaded from it, only new tokens are prefilled", () => {
  const { s, hs, kv } = cachedHiSparse({}, 8, 16);
  const doc = tokens(100, 12);

  // Step 1: A (12 tokens, 1 output) fills pages 0-2 = device 0-2 = host 0-2, mirrored 0->0,
  // 1->1, 2->2, registered in the cache; it finishes. Its blocks are freed tail first: device
  // free queue [3 4 5 6 7 | 2 1 0], host [3 .. 15 | 2 1 0].
  s.addRequest(req("A", doc, { maxTokens: 1 }));
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
    [2, 2],
  ]);
  assert.deepEqual(kv.blockPool.freeBlockIds(), [3, 4, 5, 6, 7, 2, 1, 0]);

  // Step 2: C (24 unrelated tokens) takes device blocks 3-7 and 2: block 2 was A's page 2, so
  // that page's device copy is evicted; its host block 2 keeps the page (its mirror completed).
  s.addRequest(req("C", tokens(500, 24), { maxTokens: 1 }));
  ({ plan } = hsStep(s));
  assert.deepEqual(
    deltas(plan).C!.pages!.map(([, , b]) => b),
    [3, 4, 5, 6, 7, 2],
  );
  assert.deepEqual(kv.locateCachedPrefix(doc), { numDevicePages: 2, numHostPages: 1 });

  // Step 3: B = the document + 3 tokens. Hits: page 0 -> device 0, page 1 -> device 1 (read in
  // place), page 2 -> host block 2 only: a fresh device block (2, the front of the queue: C's
  // last page, freed first) is loaded from host block 2 before the forward. Page 3 is new
  // (device 7, host 9). B computes its 3 new tokens only.
  s.addRequest(req("B", [...doc, 900, 901, 902], { maxTokens: 4 }));
  const stepB = hsStep(s);
  plan = stepB.plan;
  assert.equal(plan.pageTableDeltas.length, 1);
  // B's output reports its 12 cached prompt tokens, 4 of them (page 2) from the host tier.
  const outB = stepB.outs.find((o) => o.reqId === rid("B"))!;
  assert.deepEqual([outB.numCachedTokens, outB.numHostCachedTokens], [12, 4]);
  assert.deepEqual(deltas(plan), {
    B: {
      pages: [
        [0, 0, 0],
        [1, 1, 1],
        [2, 2, 2],
        [3, 9, 7],
      ],
    },
  });
  assert.deepEqual(plan.load, { blockIds: [2], hostBlockIds: [2] });
  assert.deepEqual(mirrors(plan), []);
  const b = s.getRequest(rid("B"))!;
  assert.equal(b.numComputedTokens, 15);
  assert.deepEqual(s.makeStats().prefixCacheHits, 12);
  assert.deepEqual(s.makeStats().prefixCacheHostHits, 4);
  assert.equal(hs.stats().loadedPagesTotal, 1);
  // The loaded block is the page's device copy again: the whole document is on the device.
  assert.deepEqual(kv.locateCachedPrefix(doc), { numDevicePages: 3, numHostPages: 0 });
  assert.deepEqual(hostRefs(kv, [0, 1, 2, 9]), [1, 1, 1, 1]);
});

test("shared pages: one host block and one device block per page, ref counted; a spill drops one holder's device reference and copies nothing; freed when the last holder ends, evicted later", () => {
  const { s, hs, kv } = cachedHiSparse({ mode: "on", residency: "host", minSparseTokens: 0 }, 16, 12);
  const doc = tokens(100, 12);

  // Step 1: A (12 tokens) fills pages 0-2 = device 0-2 = host 0-2 (mirrored 0->0, 1->1, 2->2).
  s.addRequest(req("A", doc, { maxTokens: 8 }));
  let { plan } = hsStep(s);
  assert.deepEqual(mirrors(plan), [
    [0, 0],
    [1, 1],
    [2, 2],
  ]);

  // Step 2: A (running, served first) decodes its first output token into its page 3 = device 3,
  // host 3. B = the document + 3 tokens shares A's pages 0-2 (device 0-2 and host 0-2, each now
  // held twice); its page 3 is device 4, host 4. Nothing is loaded or mirrored again. Being in
  // `on` mode and decoding, A goes host-resident: it spills its spillable pages 1 and 2 (page 0
  // is the sink, page 3 its window) and takes its hot buffer (device 5, 6). Pages 1 and 2 are
  // shared with B: A only drops its device reference (B still reads blocks 1 and 2).
  s.addRequest(req("B", [...doc, 900, 901, 902], { maxTokens: 8 }));
  ({ plan } = hsStep(s));
  const d = deltas(plan);
  assert.deepEqual(d.B, {
    pages: [
      [0, 0, 0],
      [1, 1, 1],
      [2, 2, 2],
      [3, 4, 4],
    ],
  });
  assert.deepEqual(d.A, { pages: [[3, 3, 3]], spilled: [1, 2], hot: [5, 6] });
  assert.deepEqual(plan.load, { blockIds: [], hostBlockIds: [] });
  assert.deepEqual(mirrors(plan), []);
  assert.deepEqual(hostRefs(kv, [0, 1, 2, 3, 4]), [2, 2, 2, 1, 1]);
  assert.deepEqual(
    [0, 1, 2].map((i) => kv.blockPool.blocks[i]!.refCnt),
    [2, 1, 1],
  );
  assert.equal(hs.stats().spilledPagesTotal, 2);

  // Step 3: B decodes (its token 15 fills its page 3: mirror 4->4) and goes host-resident too:
  // its pages 1 and 2 are spilled, the last references of blocks 1 and 2, which return to the
  // free queue still holding the pages (evictable device copies); B's hot buffer is device 7, 8.
  ({ plan } = hsStep(s));
  assert.deepEqual(deltas(plan), { B: { spilled: [1, 2], hot: [7, 8] } });
  assert.deepEqual(mirrors(plan), [[4, 4]]);
  assert.deepEqual(
    [0, 1, 2].map((i) => kv.blockPool.blocks[i]!.refCnt),
    [2, 0, 0],
  );
  assert.deepEqual(hostRefs(kv, [0, 1, 2]), [2, 2, 2]);
  assert.deepEqual(kv.locateCachedPrefix(doc), { numDevicePages: 3, numHostPages: 0 });

  // A ends, then B: each host block is freed when its last holder ends (host 0-2 stay in use
  // while B holds them), and the pages stay cached.
  s.finishRequests(rid("A"), RequestStatus.FINISHED_ABORTED);
  assert.deepEqual(hostRefs(kv, [0, 1, 2]), [1, 1, 1]);
  s.finishRequests(rid("B"), RequestStatus.FINISHED_ABORTED);
  assert.deepEqual(hostRefs(kv, [0, 1, 2]), [0, 0, 0]);
  assert.equal(kv.hostBlockPool.numUsedBlocks, 0);
  assert.deepEqual(kv.locateCachedPrefix(doc), { numDevicePages: 3, numHostPages: 0 });
  hsStep(s); // the finished ids reach the worker
  // Host free queue: never used 5-11, then A's page 3 (host 3: freed when A ended; its pages 0-2
  // were still B's), then B's pages tail first: 4, 2, 1, 0.
  assert.deepEqual(kv.hostBlockPool.freeBlockIds(), [5, 6, 7, 8, 9, 10, 11, 3, 4, 2, 1, 0]);

  // E (28 unrelated tokens = 7 pages) needs 7 host blocks: the 7 never used (5-11) come first,
  // so the document survives; F (4 more pages) evicts the least recently freed: host 3, 4, then
  // 2 and 1 (the document's pages 2 and 1; their device copies, blocks 1 and 2, were evicted by
  // F's device allocation just before). Page 0 (host 0, device 0) is still cached.
  s.addRequest(req("E", tokens(600, 28), { maxTokens: 1 }));
  ({ plan } = hsStep(s));
  assert.deepEqual(
    deltas(plan).E!.pages!.map(([, h]) => h),
    [5, 6, 7, 8, 9, 10, 11],
  );
  assert.deepEqual(kv.locateCachedPrefix(doc), { numDevicePages: 3, numHostPages: 0 });
  s.addRequest(req("F", tokens(700, 16), { maxTokens: 1 }));
  ({ plan } = hsStep(s));
  assert.deepEqual(
    deltas(plan).F!.pages!.map(([, h]) => h),
    [3, 4, 2, 1],
  );
  assert.deepEqual(kv.locateCachedPrefix(doc), { numDevicePages: 1, numHostPages: 0 });
});
