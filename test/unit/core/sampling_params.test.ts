/**
 * validateSamplingParams: the limits that keep a request from reaching the sampler with values
 * it cannot represent (the sampler works on 32-bit floats; generators take safe integers).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { makeSamplingParams, validateSamplingParams } from "../../../src/core/sampling_params.js";

/** Largest finite 32-bit float (2^128 - 2^104). */
const F32_MAX = 3.4028234663852886e38;

describe("validateSamplingParams: temperature", () => {
  it("0, 1 and the largest 32-bit float are valid", () => {
    for (const temperature of [0, 1, F32_MAX])
      assert.deepEqual(validateSamplingParams(makeSamplingParams({ temperature })), [], `${temperature}`);
  });

  it("1e39 is refused: as a 32-bit float it is +Infinity, and logits / inf turn masked tokens into NaN", () => {
    assert.deepEqual(validateSamplingParams(makeSamplingParams({ temperature: 1e39 })), [
      `temperature must be at most ${F32_MAX} (the largest 32-bit float), got 1e+39`,
    ]);
  });

  it("negative and non-finite values keep their message", () => {
    assert.deepEqual(validateSamplingParams(makeSamplingParams({ temperature: -1 })), [
      "temperature must be >= 0, got -1",
    ]);
    assert.deepEqual(validateSamplingParams(makeSamplingParams({ temperature: Number.NaN })), [
      "temperature must be >= 0, got NaN",
    ]);
  });
});

describe("validateSamplingParams: seed", () => {
  it("null, 0, -1 and ±MAX_SAFE_INTEGER are valid (the generator takes any safe integer)", () => {
    for (const seed of [null, 0, -1, Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER])
      assert.deepEqual(validateSamplingParams(makeSamplingParams({ seed })), [], `${seed}`);
  });

  it("2^53 and 1e20 are integers but not safe ones: refused here, not by the worker's generator mid-step", () => {
    for (const seed of [2 ** 53, 1e20])
      assert.deepEqual(validateSamplingParams(makeSamplingParams({ seed })), [
        `seed must be a safe integer, got ${seed}`,
      ]);
  });
});

describe("validateSamplingParams: max_tokens and min_tokens", () => {
  it("a bad max_tokens gives its own reason only, not a min_tokens one beside it", () => {
    for (const maxTokens of [-1, 0, 1.5]) {
      assert.deepEqual(validateSamplingParams(makeSamplingParams({ maxTokens })), [
        `max_tokens must be an integer >= 1, got ${maxTokens}`,
      ]);
    }
  });

  it("min_tokens above a valid max_tokens is still refused, and a bad min_tokens says so", () => {
    assert.deepEqual(validateSamplingParams(makeSamplingParams({ maxTokens: 4, minTokens: 5 })), [
      "min_tokens (5) must be <= max_tokens (4)",
    ]);
    assert.deepEqual(validateSamplingParams(makeSamplingParams({ maxTokens: -1, minTokens: -2 })), [
      "max_tokens must be an integer >= 1, got -1",
      "min_tokens must be an integer >= 0, got -2",
    ]);
  });
});
