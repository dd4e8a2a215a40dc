import assert from "node:assert/strict";
import { test } from "node:test";
import { asBlockId } from "../../../../src/core/ids.js";
import { FreeBlockQueue, KVCacheBlock } from "../../../../src/core/kv/kv_cache_block.js";

const makeBlocks = (n: number) => Array.from({ length: n }, (_, i) => new KVCacheBlock(asBlockId(i)));
const ids = (q: FreeBlockQueue) => q.getAllFreeBlocks().map((b) => b.blockId);

test("free queue: popleft, remove from the middle, append at the back", () => {
  const blocks = makeBlocks(5);
  const q = new FreeBlockQueue(blocks);
  assert.deepEqual(ids(q), [0, 1, 2, 3, 4]);
  assert.equal(q.numFreeBlocks, 5);

  // popleft takes the least recently freed block: 0.
  assert.equal(q.popleft().blockId, 0);
  assert.deepEqual(ids(q), [1, 2, 3, 4]);
  // A prefix-cache hit on free block 3 takes it out of the middle.
  q.remove(blocks[3]!);
  assert.deepEqual(ids(q), [1, 2, 4]);
  assert.equal(blocks[3]!.prevFreeBlock, null);
  assert.equal(blocks[3]!.nextFreeBlock, null);
  // Freed blocks go to the back: evicted last.
  q.append(blocks[0]!);
  q.appendN([blocks[3]!]);
  assert.deepEqual(ids(q), [1, 2, 4, 0, 3]);
  assert.equal(q.numFreeBlocks, 5);
  assert.deepEqual(
    q.popleftN(3).map((b) => b.blockId),
    [1, 2, 4],
  );
  assert.deepEqual(ids(q), [0, 3]);
});

test("free queue: remove the only block, then the queue is empty and popleft throws", () => {
  const blocks = makeBlocks(1);
  const q = new FreeBlockQueue(blocks);
  q.remove(blocks[0]!);
  assert.equal(q.numFreeBlocks, 0);
  assert.deepEqual(ids(q), []);
  assert.throws(() => q.popleft(), /no free blocks/);
  q.append(blocks[0]!);
  assert.deepEqual(ids(q), [0]);
});

test("free queue: misuse throws and leaves the queue unchanged", () => {
  const blocks = makeBlocks(3);
  const q = new FreeBlockQueue(blocks);
  assert.throws(() => q.append(blocks[1]!), /already in the free block queue/);
  assert.throws(() => q.popleftN(4), /cannot pop 4 blocks from a free queue holding 3/);
  assert.deepEqual(ids(q), [0, 1, 2]);
  const taken = q.popleft();
  assert.throws(() => q.remove(taken), /block 0 is not in the free block queue/);
  assert.deepEqual(ids(q), [1, 2]);
});
