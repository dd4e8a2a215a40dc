import assert from "node:assert/strict";
import { test } from "node:test";
import { hashBlockTokens, NONE_HASH } from "../../../../src/core/kv/block_hash.js";
import { BlockPool } from "../../../../src/core/kv/block_pool.js";

const H = (n: number) => hashBlockTokens(NONE_HASH, [n, n, n, n]);
const ids = (blocks: readonly { blockId: number }[]) => blocks.map((b) => b.blockId);

test("pool: new blocks come from the front with ref count 1; usage counts blocks in use", () => {
  const pool = new BlockPool(8, true);
  assert.equal(pool.numFreeBlocks, 8);
  assert.equal(pool.usage, 0);
  const got = pool.getNewBlocks(3);
  assert.deepEqual(ids(got), [0, 1, 2]);
  assert.deepEqual(
    got.map((b) => b.refCnt),
    [1, 1, 1],
  );
  assert.equal(pool.numFreeBlocks, 5);
  assert.equal(pool.usage, 3 / 8);
  assert.deepEqual(pool.freeBlockIds(), [3, 4, 5, 6, 7]);
});

test("pool: freeBlocks drops refs in order; only blocks at 0 join the queue, in that order", () => {
  const pool = new BlockPool(4, true);
  const got = pool.getNewBlocks(3);
  const [b0, b1, b2] = [got[0]!, got[1]!, got[2]!];
  pool.touch([b1]); // block 1 shared by a second request: ref 2
  assert.equal(pool.blocks[1]!.refCnt, 2);
  // Free [2, 1, 0] (a request's blocks, tail first): 2 and 0 reach 0, 1 stays at 1.
  pool.freeBlocks([b2, b1, b0]);
  assert.deepEqual(pool.freeBlockIds(), [3, 2, 0]);
  assert.equal(pool.blocks[1]!.refCnt, 1);
  pool.freeBlocks([b1]);
  assert.deepEqual(pool.freeBlockIds(), [3, 2, 0, 1]);
  assert.throws(() => pool.freeBlocks([b1]), /block 1 is freed twice/);
  assert.throws(() => pool.getNewBlocks(5), /cannot get 5 blocks, only 4 are free/);
  assert.deepEqual(pool.freeBlockIds(), [3, 2, 0, 1]);
});

test("pool: cached blocks are found by hash, revived by touch, and evicted by reuse", () => {
  const pool = new BlockPool(4, true);
  const got = pool.getNewBlocks(2);
  const [b0, b1] = [got[0]!, got[1]!];
  pool.cacheFullBlocks([b0, b1], [H(0), H(1)]);
  assert.equal(pool.getCachedBlock(H(0))?.blockId, 0);
  assert.equal(pool.getCachedBlock(H(1))?.blockId, 1);
  assert.equal(pool.getCachedBlock(H(2)), null);

  // Both freed: still cached (evictable). Queue: [2, 3, 1, 0].
  pool.freeBlocks([b1, b0]);
  assert.deepEqual(pool.freeBlockIds(), [2, 3, 1, 0]);
  assert.equal(pool.getCachedBlock(H(0))?.blockId, 0);

  // Prefix hit on block 0: touch takes it out of the queue with ref 1, hash kept.
  pool.touch([pool.getCachedBlock(H(0))!]);
  assert.deepEqual(pool.freeBlockIds(), [2, 3, 1]);
  assert.equal(pool.blocks[0]!.refCnt, 1);

  // Three new blocks: 2, 3, then 1, whose cache entry is evicted.
  assert.deepEqual(ids(pool.getNewBlocks(3)), [2, 3, 1]);
  assert.equal(pool.getCachedBlock(H(1)), null);
  assert.equal(pool.blocks[1]!.blockHash, null);
  assert.equal(pool.getCachedBlock(H(0))?.blockId, 0);
  assert.equal(pool.numCachedHashes, 1);
});

test("pool: two blocks with one hash are both kept; evicting one leaves the other", () => {
  const pool = new BlockPool(3, true);
  const got = pool.getNewBlocks(2);
  const [b0, b1] = [got[0]!, got[1]!];
  pool.cacheFullBlocks([b0], [H(7)]);
  pool.cacheFullBlocks([b1], [H(7)]);
  assert.equal(pool.numCachedHashes, 1);
  assert.equal(pool.getCachedBlock(H(7))?.blockId, 0);
  pool.freeBlocks([b0]);
  // Queue [2, 0]: taking two blocks evicts block 0's entry; block 1 still answers H(7).
  assert.deepEqual(ids(pool.getNewBlocks(2)), [2, 0]);
  assert.equal(pool.getCachedBlock(H(7))?.blockId, 1);
  assert.throws(() => pool.cacheFullBlocks([b1], [H(8)]), /block 1 is already cached/);
});

test("pool: with caching off nothing is registered; resetPrefixCache needs every block free", () => {
  const off = new BlockPool(2, false);
  const a = off.getNewBlocks(1)[0]!;
  off.cacheFullBlocks([a], [H(1)]);
  assert.equal(off.getCachedBlock(H(1)), null);

  const on = new BlockPool(2, true);
  const b = on.getNewBlocks(1)[0]!;
  on.cacheFullBlocks([b], [H(1)]);
  assert.equal(on.resetPrefixCache(), false);
  assert.equal(on.getCachedBlock(H(1))?.blockId, 0);
  on.freeBlocks([b]);
  assert.equal(on.resetPrefixCache(), true);
  assert.equal(on.getCachedBlock(H(1)), null);
  assert.equal(on.blocks[0]!.blockHash, null);
  assert.throws(() => new BlockPool(0, true), /at least one block, got 0/);
});
