/**
 * The hot-buffer resolver, narrated: which selected pages resolve to their own block (ACTIVE),
 * to a hot-buffer slot (hit) or are copied from the host tier into the LRU victim (miss), with
 * exact slots, victims and copies.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type HostKvTier,
  HotBufferLru,
  LruHotBufferResolver,
} from "../../../../src/attention/sparse/hot_buffer.js";
import type { PageSelection } from "../../../../src/attention/sparse/selector.js";
import type { Tensor } from "../../../../src/backends/backend.js";
import { asRequestId } from "../../../../src/core/ids.js";
import { sparseBatch, type TestSparseRequest } from "./helpers.js";

describe("HotBufferLru", () => {
  it("hits are marked first; misses take the least recently used slot not used this round", () => {
    const lru = new HotBufferLru(3);
    // Round 1: pages 5 and 7 miss: empty slots 0 and 1.
    lru.beginRound();
    assert.deepEqual([lru.hit(5), lru.hit(7)], [-1, -1]);
    assert.deepEqual(
      [lru.insert(5), lru.insert(7)],
      [
        { slot: 0, evicted: -1 },
        { slot: 1, evicted: -1 },
      ],
    );
    // Round 2: 7 hits (slot 1); 9 misses: slot 2 is empty, so it goes there.
    lru.beginRound();
    assert.equal(lru.hit(7), 1);
    assert.deepEqual(lru.insert(9), { slot: 2, evicted: -1 });
    // Round 3: 9 hits; 4 misses: slot 0 (page 5, last used in round 1) is the LRU victim.
    lru.beginRound();
    assert.equal(lru.hit(9), 2);
    assert.deepEqual(lru.insert(4), { slot: 0, evicted: 5 });
    assert.deepEqual([...lru.slotPage], [4, 7, 9]);
    // Round 4: page 5 comes back. Slot 1 (page 7) was last used in round 2, slots 0 and 2 in
    // round 3: slot 1 is the victim.
    lru.beginRound();
    assert.deepEqual(lru.insert(5), { slot: 1, evicted: 7 });
    // Page 6: slots 0 and 2 tie (round 3): the lower one, 0, goes. Page 8: slot 2.
    assert.deepEqual(lru.insert(6), { slot: 0, evicted: 4 });
    assert.deepEqual(lru.insert(8), { slot: 2, evicted: 9 });
    // All three slots were used in round 4: a fourth page has no slot.
    assert.throws(() => lru.insert(3), /the hot buffer has 3 slots/);
  });
});

/** A host tier that records its copies: [layer, hostBlock, head, deviceBlock]. */
class RecordingTier implements HostKvTier {
  readonly sliceBytes = 64;
  readonly copies: number[][] = [];
  loadHeadSlice(layer: number, hostBlockId: number, g: number, _kv: Tensor, blockId: number): void {
    this.copies.push([layer, hostBlockId, g, blockId]);
  }
}

describe("LruHotBufferResolver", () => {
  const KV = {} as Tensor;
  // One request, 8 pages of 4 tokens (30 tokens: the tail page holds 2), host blocks 20-27.
  // Pages 0, 6 and 7 are ACTIVE in device blocks 40, 46, 47; pages 1-5 are INACTIVE. The hot
  // buffer has 2 blocks: 90 and 91. Two kv heads, one sparse layer.
  const req: TestSparseRequest = {
    id: "A",
    batchIdx: 0,
    tokenIdx: 0,
    numTokens: 30,
    hostBlockIds: [20, 21, 22, 23, 24, 25, 26, 27],
    blockIds: [40, -1, -1, -1, -1, -1, 46, 47],
    hotBlockIds: [90, 91],
  };
  const batch = sparseBatch([req]);
  const sel = (g0: number[], g1: number[]): PageSelection => ({
    start: Int32Array.from([0, g0.length, g0.length + g1.length]),
    pages: Int32Array.from([...g0, ...g1]),
  });

  it("step by step: ACTIVE pages resolve to their block, recalled pages to hot slots, LRU victims exact", () => {
    const tier = new RecordingTier();
    const r = new LruHotBufferResolver(tier, 4, 2, 1);
    // Step 1: head 0 selects pages 0, 2, 3, 7; head 1 pages 0, 5, 7. Misses: head 0 pages 2, 3
    // -> slots 0, 1 (blocks 90, 91); head 1 page 5 -> its own LRU's slot 0 (block 90).
    let res = r.resolve(0, sel([0, 2, 3, 7], [0, 5, 7]), batch, KV);
    assert.deepEqual([...res.blockIds], [40, 90, 91, 47, 40, 90, 47]);
    // seqLens: 3 full pages + the tail's 2 tokens = 14; 2 full + 2 = 10.
    assert.deepEqual([...res.seqLens], [14, 10]);
    assert.deepEqual(tier.copies, [
      [0, 22, 0, 90],
      [0, 23, 0, 91],
      [0, 25, 1, 90],
    ]);
    assert.deepEqual(r.takeCounters(), { hits: 0, misses: 3, hostToDeviceBytes: 192 });
    // SPARSE pages: 2, 3 and 5 are held in some slot.
    assert.equal(r.numSparsePages, 3);

    // Step 2: head 0 selects 0, 3, 4, 7: page 3 hits (slot 1); page 4 misses and takes slot 0
    // (page 2's, not used this step). Head 1 selects 0, 5, 7 again: page 5 hits.
    tier.copies.length = 0;
    res = r.resolve(0, sel([0, 3, 4, 7], [0, 5, 7]), batch, KV);
    assert.deepEqual([...res.blockIds], [40, 91, 90, 47, 40, 90, 47]);
    assert.deepEqual(tier.copies, [[0, 24, 0, 90]]);
    assert.deepEqual(r.takeCounters(), { hits: 2, misses: 1, hostToDeviceBytes: 64 });
    assert.equal(r.numSparsePages, 3); // pages 3, 4 (head 0) and 5 (head 1); 2 was evicted

    // Step 3: head 0 selects 0, 1, 2, 7: pages 1 and 2 miss. Both slots were last used in step
    // 2 (pages 4 and 3): the tie goes to the lower slot, so page 1 takes slot 0 (evicting 4) and
    // page 2 slot 1 (evicting 3).
    tier.copies.length = 0;
    res = r.resolve(0, sel([0, 1, 2, 7], [0, 5, 7]), batch, KV);
    assert.deepEqual(tier.copies, [
      [0, 21, 0, 90],
      [0, 22, 0, 91],
    ]);
    assert.deepEqual([...res.blockIds].slice(0, 4), [40, 90, 91, 47]);
    r.forget(asRequestId("A"));
    assert.equal(r.numSparsePages, 0);
  });

  it("a request without a hot buffer (every page resident: on, residency hybrid) resolves in place; an INACTIVE page is refused", () => {
    const tier = new RecordingTier();
    const r = new LruHotBufferResolver(tier, 4, 2, 1);
    const resident = sparseBatch([{ ...req, blockIds: [40, 41, 42, 43, 44, 45, 46, 47], hotBlockIds: [] }]);
    const res = r.resolve(0, sel([0, 3, 7], [0, 5, 6, 7]), resident, KV);
    assert.deepEqual([...res.blockIds], [40, 43, 47, 40, 45, 46, 47]);
    assert.deepEqual([...res.seqLens], [10, 14]);
    assert.deepEqual(
      [tier.copies, r.takeCounters(), r.numSparsePages],
      [[], { hits: 0, misses: 0, hostToDeviceBytes: 0 }, 0],
    );
    const spilled = sparseBatch([{ ...req, hotBlockIds: [] }]);
    assert.throws(
      () => r.resolve(0, sel([0, 2, 7], [0, 7]), spilled, KV),
      /request A selects INACTIVE page 2 without a hot buffer/,
    );
  });

  it("a selection without the tail page, or with more INACTIVE pages than slots, is refused", () => {
    const r = new LruHotBufferResolver(new RecordingTier(), 4, 2, 1);
    assert.throws(() => r.resolve(0, sel([0, 2], [0, 7]), batch, KV), /lacks its tail page/);
    assert.throws(() => r.resolve(0, sel([1, 2, 3, 7], [7]), batch, KV), /the hot buffer has 2 slots/);
  });
});
