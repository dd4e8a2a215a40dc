import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type BlockHash,
  extendBlockHashes,
  hashBlockTokens,
  NONE_HASH,
} from "../../../../src/core/kv/block_hash.js";

test("block hash: deterministic 16-hex-digit value, pinned", () => {
  const h = hashBlockTokens(NONE_HASH, [1, 2, 3, 4]);
  assert.match(h, /^[0-9a-f]{16}$/);
  assert.equal(h, hashBlockTokens(NONE_HASH, [1, 2, 3, 4]));
  // Pinned so that an accidental change of the function (which would silently change every
  // cache key) shows up here.
  assert.equal(h, "ba42f802315a0fdd");
  assert.equal(hashBlockTokens(h, [5, 6, 7, 8]), "a1124fa7bd07c462");
});

test("block hash: depends on the parent, the order and every token", () => {
  const base = hashBlockTokens(NONE_HASH, [1, 2, 3, 4]);
  const variants = [
    hashBlockTokens(base, [1, 2, 3, 4]), // other parent
    hashBlockTokens(NONE_HASH, [2, 1, 3, 4]), // swapped
    hashBlockTokens(NONE_HASH, [1, 2, 3, 5]), // last token
    hashBlockTokens(NONE_HASH, [1, 2, 3]), // shorter
    hashBlockTokens(NONE_HASH, [0x80000001, 2, 3, 4]), // high bit
  ];
  assert.equal(new Set([base, ...variants]).size, 6);
});

test("block hash: no collision among 50,000 blocks differing in one token or parent", () => {
  const seen = new Set<BlockHash>();
  let parent = NONE_HASH;
  for (let i = 1; i <= 25_000; i++) {
    seen.add(hashBlockTokens(NONE_HASH, [i, 0, 0, 0])); // i >= 1: [0, 0, 0, 0] starts the chain below
    parent = hashBlockTokens(parent, [0, 0, 0, 0]); // a chain of identical blocks
    seen.add(parent);
  }
  assert.equal(seen.size, 50_000);
  // Structured inputs: every pair of small token ids in the first two positions.
  const pairs = new Set<BlockHash>();
  for (let a = 0; a < 224; a++)
    for (let b = 0; b < 224; b++) pairs.add(hashBlockTokens(NONE_HASH, [a, b, 5, 5]));
  assert.equal(pairs.size, 224 * 224);
});

test("extendBlockHashes: full blocks only, chained, and incremental equals from scratch", () => {
  const toks = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19];
  const hashes = extendBlockHashes(toks, 4, []);
  // 10 tokens at block size 4: blocks [10..13] and [14..17]; [18, 19] is partial, no hash.
  assert.equal(hashes.length, 2);
  assert.equal(hashes[0], hashBlockTokens(NONE_HASH, [10, 11, 12, 13]));
  assert.equal(hashes[1], hashBlockTokens(hashes[0]!, [14, 15, 16, 17]));

  // Two more tokens fill the third block; extending keeps the first two and adds one.
  const grown = extendBlockHashes([...toks, 20, 21], 4, [...hashes]);
  assert.deepEqual(grown, extendBlockHashes([...toks, 20, 21], 4, []));
  assert.equal(grown[2], hashBlockTokens(hashes[1]!, [18, 19, 20, 21]));
});
