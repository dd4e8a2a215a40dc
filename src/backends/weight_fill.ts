/**
 * Weights generated from a rule instead of host data (`--load-format dummy`): the rule that
 * `Backend.fillWeight` runs on the device, written here once in TypeScript. It is the CPU
 * backend's implementation, the host copy `DummyWeights.get()` returns, and the oracle of the CUDA
 * kernel (native/kernels/dummy_init.cu), which must produce the same bits.
 *
 * The rule is counter-based, so any element can be computed on its own (no sequential state):
 *   pair  c = floor(i / 2) of element i (a 53-bit integer; lo = c mod 2^32, hi = floor(c / 2^32))
 *   r     = mix32(mix32(lo ^ key0) ^ (key1 + hi * 0x9e3779b9 mod 2^32))
 *   index = i even ? r & 0xffff : r >>> 16
 *   value = table[index]
 * mix32 is Chris Wellons' "lowbias32" integer hash (a bijection of 32-bit words,
 * https://github.com/skeeto/hash-prospector); two keyed rounds decorrelate neighbouring counters
 * and tensors. Only integer operations and a table lookup: the CUDA kernel's output equals this
 * bit for bit. The table (e.g. 65,536 normal quantiles, models/dummy.ts) and the keys (from the seed
 * and the tensor name) are made on the host and handed to the backend as they are.
 */

/** Entries of a fill table: one per 16-bit index. */
export const WEIGHT_FILL_TABLE_SIZE = 65536;

/**
 * How a generated weight's values are defined: every element equal to one value, or looked up in
 * a table by 16 counter-based random bits (above). Values are given in `dtype`: f32 values in a
 * Float32Array, bf16/f16 bit patterns in a Uint16Array (as HostTensorData holds them); a backend
 * stores them converted to its weight dtype exactly as `writeWeight` converts host data.
 */
export type WeightFill =
  | {
      kind: "constant";
      dtype: "f32" | "bf16" | "f16";
      /** The value: an f32 number for f32, the 16-bit pattern for bf16/f16. */
      value: number;
    }
  | {
      kind: "table";
      dtype: "f32" | "bf16" | "f16";
      /** [WEIGHT_FILL_TABLE_SIZE] values (f32) or bit patterns (bf16/f16). */
      table: Float32Array | Uint16Array;
      /** 32-bit keys (unsigned integers) of the counter hash. */
      key0: number;
      key1: number;
    };

/** lowbias32 (hash-prospector): x ^= x >> 16; x *= 0x21f0aaad; x ^= x >> 15; x *= 0x735a2d97; x ^= x >> 15. */
export function mix32(x: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x21f0aaad);
  h ^= h >>> 15;
  h = Math.imul(h, 0x735a2d97);
  h ^= h >>> 15;
  return h >>> 0;
}

/** The 32 random bits of element pair `pair` (a non-negative safe integer) under (key0, key1). */
export function fillBits(key0: number, key1: number, pair: number): number {
  const lo = pair >>> 0;
  const hi = Math.floor(pair / 2 ** 32) >>> 0;
  return mix32(mix32(lo ^ key0) ^ ((key1 + Math.imul(hi, 0x9e3779b9)) >>> 0));
}

/**
 * Writes elements [start, start + count) of the fill into out[outOffset ...] in the fill's own
 * encoding: bit patterns into a Uint16Array for bf16/f16, values into a Float32Array for f32.
 * @throws Error when a table has the wrong size or `out` is too short.
 */
export function generateFill(
  fill: WeightFill,
  start: number,
  count: number,
  out: Float32Array | Uint16Array,
  outOffset = 0,
): void {
  if (outOffset + count > out.length)
    throw new Error(`generateFill: ${count} values do not fit at ${outOffset} of ${out.length}`);
  if (fill.kind === "constant") {
    out.fill(fill.value, outOffset, outOffset + count);
    return;
  }
  if (fill.table.length !== WEIGHT_FILL_TABLE_SIZE)
    throw new Error(
      `generateFill: a fill table has ${WEIGHT_FILL_TABLE_SIZE} entries, got ${fill.table.length}`,
    );
  const { table, key0, key1 } = fill;
  let i = start;
  const end = start + count;
  let o = outOffset;
  if (i % 2 === 1 && i < end) {
    out[o++] = table[fillBits(key0, key1, (i - 1) / 2) >>> 16]!;
    i++;
  }
  // Pairs below 2^32 (tensors under 8.6e9 elements): hi = 0, so the second key is constant.
  for (; i + 1 < end && i < 2 ** 33; i += 2) {
    const r = mix32(mix32((i / 2) ^ key0) ^ key1);
    out[o++] = table[r & 0xffff]!;
    out[o++] = table[r >>> 16]!;
  }
  for (; i < end; i++) {
    const r = fillBits(key0, key1, Math.floor(i / 2));
    out[o++] = table[i % 2 === 0 ? r & 0xffff : r >>> 16]!;
  }
}
