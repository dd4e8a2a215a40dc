/**
 * Block hashes for prefix caching (vllm/v1/core/kv_cache_utils.py hash_block_tokens): the hash
 * of a full block covers its parent block's hash and its own token ids, so equal hashes mean
 * equal token prefixes (up to collisions) and one lookup per block finds the longest cached
 * prefix.
 *
 * The function is our own 64-bit, non-cryptographic hash: two 32-bit lanes, one with the
 * MurmurHash3 x86_32 body round (Austin Appleby, public domain), one with the xxHash32 round
 * (Yann Collet, BSD), cross-mixed by the MurmurHash3 finalizer. It is deterministic across
 * processes. Accidental collisions are negligible (about n^2 / 2^65 for n cached blocks), but a
 * client that can choose prompts could craft one; vLLM uses SHA-256 for that reason.
 */

declare const blockHashBrand: unique symbol;
/** 16 lowercase hex digits (64 bits); a Map key. */
export type BlockHash = string & { readonly [blockHashBrand]: "BlockHash" };

/** Parent hash of a request's first block (vLLM's NONE_HASH, fixed here for determinism). */
export const NONE_HASH = "0000000000000000" as BlockHash;

// MurmurHash3 x86_32 constants.
const C1 = 0xcc9e2d51;
const C2 = 0x1b873593;
// xxHash32 primes.
const P1 = 0x9e3779b1;
const P2 = 0x85ebca77;
// Lane seeds (arbitrary odd constants so that the lanes differ even for equal inputs).
const SEED1 = 0x2545f491;
const SEED2 = 0x6c8e9cf5;

const rotl = (x: number, r: number): number => (x << r) | (x >>> (32 - r));

/** MurmurHash3 body round: mixes the 32-bit word `k` into the state `h`. */
function murmurRound(h: number, k: number): number {
  let m = Math.imul(k, C1);
  m = rotl(m, 15);
  m = Math.imul(m, C2);
  const x = rotl(h ^ m, 13);
  return (Math.imul(x, 5) + 0xe6546b64) | 0;
}

/** xxHash32 round: mixes the 32-bit word `k` into the accumulator `acc`. */
function xxRound(acc: number, k: number): number {
  const a = (acc + Math.imul(k, P2)) | 0;
  return Math.imul(rotl(a, 13), P1);
}

/** MurmurHash3 finalizer (avalanche). */
function fmix32(h: number): number {
  let x = h ^ (h >>> 16);
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  return x ^ (x >>> 16);
}

const hex8 = (x: number): string => (x >>> 0).toString(16).padStart(8, "0");

/**
 * Hash of one full block: `hash(parentHash, tokenIds)`.
 * @param parentHash hash of the previous block, or {@link NONE_HASH} for the first block.
 * @param tokenIds the block's token ids (`blockSize` of them; non-negative integers).
 * @returns 64-bit hash as 16 hex digits.
 */
export function hashBlockTokens(parentHash: BlockHash, tokenIds: readonly number[]): BlockHash {
  let h1 = SEED1 ^ Number.parseInt(parentHash.slice(0, 8), 16);
  let h2 = SEED2 ^ Number.parseInt(parentHash.slice(8, 16), 16);
  for (const t of tokenIds) {
    h1 = murmurRound(h1, t);
    h2 = xxRound(h2, t);
  }
  h1 ^= tokenIds.length;
  h2 ^= tokenIds.length;
  // Cross-mix so that every output bit depends on both lanes.
  h1 = (h1 + h2) | 0;
  h2 = (h2 + h1) | 0;
  h1 = fmix32(h1);
  h2 = fmix32(h2);
  h1 = (h1 + h2) | 0;
  h2 = (h2 + h1) | 0;
  return (hex8(h1) + hex8(h2)) as BlockHash;
}

/**
 * Extends `hashes` (the hashes of the first `hashes.length` full blocks of `tokenIds`) with the
 * hashes of every further full block. Partial trailing blocks get no hash.
 * @param tokenIds all of a request's tokens (prompt, then output), `[numTokens]`.
 * @param blockSize tokens per block.
 * @param hashes in/out: appended to in place; also returned.
 */
export function extendBlockHashes(
  tokenIds: readonly number[],
  blockSize: number,
  hashes: BlockHash[],
): BlockHash[] {
  const numFullBlocks = Math.floor(tokenIds.length / blockSize);
  for (let i = hashes.length; i < numFullBlocks; i++) {
    const parent = i === 0 ? NONE_HASH : hashes[i - 1]!;
    hashes.push(hashBlockTokens(parent, tokenIds.slice(i * blockSize, (i + 1) * blockSize)));
  }
  return hashes;
}
