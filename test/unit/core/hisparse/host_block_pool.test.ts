/** HostBlockPool: FIFO reuse of host blocks, plan-then-apply allocation, double-free detection. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { HostBlockPool } from "../../../../src/core/hisparse/host_block_pool.js";
import { asHostBlockId, type HostBlockId } from "../../../../src/core/ids.js";

const h = (...ids: number[]): HostBlockId[] => ids.map(asHostBlockId);

test("host blocks are handed out lowest id first and reused in the order they were freed", () => {
  const pool = new HostBlockPool(5);
  assert.deepEqual(pool.allocate(3), h(0, 1, 2));
  assert.deepEqual(pool.allocate(1), h(3));
  pool.free(h(2, 0));
  // Free queue: 4 (never used), then 2 and 0 in the order freed.
  assert.deepEqual(pool.freeBlockIds(), h(4, 2, 0));
  assert.deepEqual(pool.allocate(2), h(4, 2));
  assert.equal(pool.numUsedBlocks, 4);
  assert.equal(pool.usage, 0.8);
});

test("an allocation larger than the free count fails with no change", () => {
  const pool = new HostBlockPool(3);
  pool.allocate(2);
  assert.equal(pool.allocate(2), null);
  assert.equal(pool.numFreeBlocks, 1);
  assert.deepEqual(pool.allocate(1), h(2));
});

test("freeing a block twice, or one never allocated, throws and changes nothing", () => {
  const pool = new HostBlockPool(4);
  pool.allocate(2);
  assert.throws(() => pool.free(h(1, 1)), /host block 1 is not allocated/);
  assert.throws(() => pool.free(h(0, 3)), /host block 3 is not allocated/);
  assert.equal(pool.numFreeBlocks, 2);
  pool.free(h(1, 0));
  assert.equal(pool.numFreeBlocks, 4);
  assert.throws(() => new HostBlockPool(0), /at least one block/);
});
