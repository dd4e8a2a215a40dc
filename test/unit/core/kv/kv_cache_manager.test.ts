import assert from "node:assert/strict";
import { test } from "node:test";
import { BlockPool } from "../../../../src/core/kv/block_pool.js";
import { KVCacheManager } from "../../../../src/core/kv/kv_cache_manager.js";
import { req, tokens } from "../helpers.js";

/** Block size 4 throughout. */
const manager = (numBlocks: number, caching = true) =>
  new KVCacheManager(new BlockPool(numBlocks, caching), 4);

test("manager: a prompt gets ceil(n / blockSize) blocks, then one more block each blockSize decodes", () => {
  const kv = manager(10);
  const a = req("A", tokens(100, 10));
  // Prefill of 10 tokens: blocks [0, 1, 2] (tokens 0-3, 4-7, 8-9).
  assert.deepEqual(kv.allocateSlots(a, 10), [0, 1, 2]);
  a.numComputedTokens = 10;
  assert.deepEqual(kv.getBlockIds(a.requestId), [0, 1, 2]);
  // Blocks 0 and 1 are full and registered; block 2 (2 of 4 tokens) is not.
  assert.notEqual(kv.blockPool.blocks[0]!.blockHash, null);
  assert.notEqual(kv.blockPool.blocks[1]!.blockHash, null);
  assert.equal(kv.blockPool.blocks[2]!.blockHash, null);

  // Decode token 10 and 11 fit in block 2: nothing new.
  a.appendOutputTokenIds([5]);
  assert.deepEqual(kv.allocateSlots(a, 1), []);
  a.numComputedTokens = 11;
  a.appendOutputTokenIds([6]);
  assert.deepEqual(kv.allocateSlots(a, 1), []);
  a.numComputedTokens = 12;
  // Block 2 is now full (tokens 8-11 scheduled), so it was registered.
  assert.equal(kv.blockPool.blocks[2]!.blockHash, kv.blockHashesOf(a)[2]);
  // Token 12 needs block 3.
  a.appendOutputTokenIds([7]);
  assert.deepEqual(kv.allocateSlots(a, 1), [3]);
  assert.deepEqual(kv.getBlockIds(a.requestId), [0, 1, 2, 3]);
  assert.equal(kv.numFreeBlocks, 6);
  assert.equal(kv.usage, 0.4);
});

test("manager: a failed allocation changes nothing (plan, then apply)", () => {
  const kv = manager(4);
  const a = req("A", tokens(100, 12));
  assert.deepEqual(kv.allocateSlots(a, 12), [0, 1, 2]);
  const b = req("B", tokens(200, 5));
  // B needs 2 blocks, the pool has 1 (block 3).
  assert.equal(kv.canAllocate(b, 5), false);
  assert.equal(kv.numBlocksToAllocate(b, 5), 2);
  assert.equal(kv.allocateSlots(b, 5), null);
  assert.deepEqual(kv.getBlockIds(b.requestId), []);
  assert.deepEqual(kv.blockPool.freeBlockIds(), [3]);
  assert.equal(kv.blockPool.blocks[3]!.refCnt, 0);
  // 4 tokens fit in one block.
  assert.equal(kv.canAllocate(b, 4), true);
  assert.deepEqual(kv.allocateSlots(b, 4), [3]);
});

test("manager: prefix hits stop at the first miss and always leave the last token to compute", () => {
  const kv = manager(10);
  const a = req("A", tokens(100, 12));
  kv.allocateSlots(a, 12); // blocks [0, 1, 2], all three full and cached
  a.numComputedTokens = 12;

  // B shares A's first 8 tokens, then differs: hits blocks [0, 1].
  const b = req("B", [...tokens(100, 8), 999, 998, 997]);
  const hitsB = kv.getComputedBlocks(b);
  assert.deepEqual(
    hitsB.blocks.map((x) => x.blockId),
    [0, 1],
  );
  assert.equal(hitsB.numComputedTokens, 8);

  // C is exactly A's 12-token prompt: at most floor(11 / 4) = 2 blocks may hit, so that token 11
  // is computed and yields logits.
  const c = req("C", tokens(100, 12));
  assert.equal(kv.getComputedBlocks(c).numComputedTokens, 8);

  // B allocates with its hits: blocks 0 and 1 now have two owners; one fresh block for tokens 8-10.
  assert.deepEqual(kv.allocateSlots(b, 3, hitsB.blocks), [3]);
  assert.deepEqual(kv.getBlockIds(b.requestId), [0, 1, 3]);
  assert.deepEqual(
    kv.blockPool.blocks.slice(0, 4).map((x) => x.refCnt),
    [2, 2, 1, 1],
  );
  // Freeing A (tail first) returns only block 2; blocks 0 and 1 are still B's.
  kv.free(a);
  assert.deepEqual(kv.blockPool.freeBlockIds(), [4, 5, 6, 7, 8, 9, 2]);
  assert.deepEqual(
    kv.blockPool.blocks.slice(0, 3).map((x) => x.refCnt),
    [1, 1, 0],
  );
});

test("manager: freed blocks are evicted tail first, so a later request still hits the head", () => {
  const kv = manager(4);
  const a = req("A", tokens(100, 12));
  kv.allocateSlots(a, 12); // [0, 1, 2], cached
  kv.free(a);
  // Tail first: queue [3, 2, 1, 0].
  assert.deepEqual(kv.blockPool.freeBlockIds(), [3, 2, 1, 0]);

  // An unrelated 8-token request takes blocks 3 and 2; block 2's cache entry is evicted.
  const x = req("X", tokens(500, 8));
  assert.deepEqual(kv.allocateSlots(x, 8), [3, 2]);
  assert.deepEqual(kv.blockPool.freeBlockIds(), [1, 0]);

  // A's prompt again (with one more token): blocks 0 and 1 still hit, block 2 was evicted.
  const d = req("D", tokens(100, 13));
  const hits = kv.getComputedBlocks(d);
  assert.deepEqual(
    hits.blocks.map((b) => b.blockId),
    [0, 1],
  );
  // D needs its 2 hits (both in the free queue) plus 2 fresh blocks: 4 > 2 free, so it fails
  // and the hits stay free and cached.
  assert.equal(kv.numBlocksToAllocate(d, 5, hits.blocks), 2);
  assert.equal(kv.canAllocate(d, 5, hits.blocks), false);
  assert.equal(kv.allocateSlots(d, 5, hits.blocks), null);
  assert.deepEqual(kv.blockPool.freeBlockIds(), [1, 0]);
  assert.equal(kv.getComputedBlocks(d).numComputedTokens, 8);

  // Once X is freed, D fits: hits [0, 1] + fresh [2, 3] (X's tail block 2 was appended first).
  kv.free(x);
  assert.deepEqual(kv.blockPool.freeBlockIds(), [1, 0, 2, 3]);
  assert.deepEqual(kv.allocateSlots(d, 5, hits.blocks), [2, 3]);
  assert.deepEqual(kv.getBlockIds(d.requestId), [0, 1, 2, 3]);
});

test("manager: caching off means no hits and no hashes registered", () => {
  const kv = manager(8, false);
  const a = req("A", tokens(100, 8));
  kv.allocateSlots(a, 8);
  assert.equal(kv.blockPool.blocks[0]!.blockHash, null);
  assert.deepEqual(kv.getComputedBlocks(req("B", tokens(100, 9))), { blocks: [], numComputedTokens: 0 });
});

test("manager: misuse throws", () => {
  const kv = manager(8);
  const a = req("A", tokens(100, 8));
  assert.throws(() => kv.allocateSlots(a, 0), /numNewTokens must be a positive integer, got 0/);
  kv.allocateSlots(a, 8);
  const hits = kv.getComputedBlocks(req("B", tokens(100, 9))).blocks;
  assert.throws(() => kv.allocateSlots(a, 1, hits), /already holds blocks/);
  assert.throws(() => new KVCacheManager(new BlockPool(2, true), 0), /block size must be a positive integer/);
});
