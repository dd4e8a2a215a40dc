/** Philox4x32-10 against Random123's known-answer vectors, and the Generator built on it. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Generator, philox4x32_10 } from "../../../src/worker/generator.js";

const hex = (a: Uint32Array) => [...a].map((x) => x.toString(16).padStart(8, "0")).join(" ");

describe("philox4x32_10", () => {
  it("matches the Random123 known-answer vectors (tests/kat_vectors)", () => {
    const out = new Uint32Array(4);
    philox4x32_10([0, 0, 0, 0], [0, 0], out);
    assert.equal(hex(out), "6627e8d5 e169c58d bc57ac4c 9b00dbd8");
    philox4x32_10([0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff], out);
    assert.equal(hex(out), "408f276d 41c83b0e a20bc7c6 6d5451fd");
    philox4x32_10([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0], out);
    assert.equal(hex(out), "d16cfe09 94fdcceb 5001e420 24126ea1");
  });
});

describe("Generator", () => {
  it("seed 0 yields the counter-0 block, then counter 1", () => {
    const g = new Generator(0);
    const words = Uint32Array.from({ length: 8 }, () => g.nextUint32());
    assert.equal(hex(words.subarray(0, 4)), "6627e8d5 e169c58d bc57ac4c 9b00dbd8");
    const next = new Uint32Array(4);
    philox4x32_10([1, 0, 0, 0], [0, 0], next);
    assert.deepEqual([...words.subarray(4)], [...next]);
  });

  it("uniforms are the top 24 bits of each word times 2^-24", () => {
    const g = new Generator(0);
    assert.equal(g.nextUniform(), 0x6627e8 / 2 ** 24);
    assert.equal(g.nextUniform(), 0xe169c5 / 2 ** 24);
    const many = Array.from({ length: 1000 }, () => g.nextUniform());
    assert.ok(many.every((u) => u >= 0 && u < 1 && Math.fround(u) === u));
  });

  it("seed -1 is the all-ones key (64-bit two's complement)", () => {
    const g = new Generator(-1);
    const words = Uint32Array.from({ length: 4 }, () => g.nextUint32());
    const ref = new Uint32Array(4);
    philox4x32_10([0, 0, 0, 0], [0xffffffff, 0xffffffff], ref);
    assert.deepEqual([...words], [...ref]);
  });

  it("the same seed reproduces the same stream; another seed gives another", () => {
    const a = new Generator(1234);
    const b = new Generator(1234);
    const c = new Generator(1235);
    const sa = Array.from({ length: 10 }, () => a.nextUniform());
    assert.deepEqual(
      Array.from({ length: 10 }, () => b.nextUniform()),
      sa,
    );
    assert.notDeepEqual(
      Array.from({ length: 10 }, () => c.nextUniform()),
      sa,
    );
    // The high word of the seed matters: 2^32 + 5 differs from 5.
    assert.notEqual(new Generator(2 ** 32 + 5).nextUint32(), new Generator(5).nextUint32());
  });

  it("rejects seeds that are not safe integers", () => {
    assert.throws(() => new Generator(1.5), /seed must be a safe integer, got 1.5/);
    assert.throws(() => new Generator(2 ** 60), /safe integer/);
  });
});
