/**
 * KVCacheManager.releaseBlocks: releasing single pages of a running request (HiSparse spills):
 * the list keeps its length with NULL_BLOCK_ID holes, blocks return to the pool in the order
 * given, and a bad plan changes nothing.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { BlockPool } from "../../../../src/core/kv/block_pool.js";
import { KVCacheManager, NULL_BLOCK_ID } from "../../../../src/core/kv/kv_cache_manager.js";
import { bids, req, rid, tokens } from "../helpers.js";

test("released pages become NULL_BLOCK_ID holes; their blocks are reused first-released first", () => {
  const kv = new KVCacheManager(new BlockPool(8, false), 4);
  const a = req("A", tokens(100, 20));
  assert.deepEqual(kv.allocateSlots(a, 20), bids(0, 1, 2, 3, 4));
  assert.deepEqual(kv.releaseBlocks(rid("A"), [3, 1]), bids(3, 1));
  assert.deepEqual(kv.getBlockIds(rid("A")), bids(0, NULL_BLOCK_ID, 2, NULL_BLOCK_ID, 4));
  assert.deepEqual(kv.blockPool.freeBlockIds(), bids(5, 6, 7, 3, 1));
  // The request still counts 5 pages: its token 20 needs a 6th page, block 5.
  a.numComputedTokens = 20;
  a.appendOutputTokenIds([7]);
  assert.deepEqual(kv.allocateSlots(a, 1), bids(5));
  // free() returns the held blocks only (tail first) and skips the holes.
  kv.free(a);
  assert.deepEqual(kv.blockPool.freeBlockIds(), bids(6, 7, 3, 1, 5, 4, 2, 0));
});

test("a bad release plan throws and changes nothing", () => {
  const kv = new KVCacheManager(new BlockPool(8, false), 4);
  kv.allocateSlots(req("A", tokens(100, 12)), 12);
  assert.throws(() => kv.releaseBlocks(rid("A"), [1, 3]), /has no page 3/);
  assert.throws(() => kv.releaseBlocks(rid("A"), [1, 1]), /released twice/);
  assert.deepEqual(kv.getBlockIds(rid("A")), bids(0, 1, 2));
  kv.releaseBlocks(rid("A"), [1]);
  assert.throws(() => kv.releaseBlocks(rid("A"), [1]), /released twice/);
  assert.throws(() => kv.releaseBlocks(rid("B"), [0]), /holds no blocks/);
  const cached = new KVCacheManager(new BlockPool(8, true), 4);
  cached.allocateSlots(req("C", tokens(100, 12)), 12);
  assert.throws(() => cached.releaseBlocks(rid("C"), [0]), /not supported with prefix caching/);
});
