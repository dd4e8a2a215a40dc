/**
 * Requests at once in sized pools (core/kv/kv_concurrency.ts), on the figures of the plan's
 * engine test (tiny model, layer 0 dense: m = 12,288 B, h = 4,864 B; P = 39 pages, d = 11).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  bestHostPool,
  concurrency,
  defaultHostPoolBytes,
  maxByDevicePool,
  sparseRequestDeviceBytes,
} from "../../../../src/core/kv/kv_concurrency.js";
import type { KVMemorySizing } from "../../../../src/core/kv/kv_memory.js";

const costs = { mainBytesPerBlock: 12288, hostBytesPerBlock: 12288, deviceBytesPerHostBlock: 4864 };
const sizing = (numGpuBlocks: number, numHostBlocks: number): KVMemorySizing => ({
  numGpuBlocks,
  bytesPerBlock: 12288,
  host: {
    numHostBlocks,
    hostPoolBytes: numHostBlocks * 12288,
    hostBytesPerBlock: 12288,
    deviceBytesPerHostBlock: 4864,
  },
  refusals: [],
});

test("one prefill on all its pages beside the others' sparse blocks", () => {
  // floor((94 − 39) / 11) + 1 = 6; below one request's pages, none; d = P is the dense count.
  assert.equal(maxByDevicePool(94, 39, 11), 6);
  assert.equal(maxByDevicePool(38, 39, 11), 0);
  assert.equal(maxByDevicePool(100, 25, 25), 4);
  // 11 × 12,288 B + 39 × 4,864 B = 324,864 B of device memory per decoding request.
  assert.equal(sparseRequestDeviceBytes(costs, 39, 11), 324864);
});

test("the host pool may bind; start refusals come before the admission refusal", () => {
  assert.deepEqual(concurrency(sizing(94, 351), 39, 11, 16), {
    maxByHost: 9,
    maxByDevice: 6,
    maxConcurrent: 6,
    refusals: [],
  });
  assert.equal(concurrency(sizing(94, 195), 39, 11, 16).maxConcurrent, 5);
  const admission = concurrency(sizing(30, 156), 39, 11, 16);
  assert.deepEqual(
    [admission.maxConcurrent, admission.refusals.map((r) => r.kind)],
    [0, ["request_exceeds_pool"]],
  );
  const start = { ...sizing(30, 20), refusals: [{ kind: "no_device_block" as const, numHostBlocks: 20 }] };
  assert.deepEqual(
    concurrency(start, 39, 11, 16).refusals.map((r) => r.kind),
    ["no_device_block"],
  );
});

test("the best host pool: N requests and one prefill within the budget, at least one host page per device block", () => {
  // N = floor((2,867,336 − 28 × 12,288) / (39 × 4,864 + 11 × 12,288)) = floor(2,523,272 / 324,864) = 7;
  // host pages max(7 × 39, ceil(2,867,336 / 17,152) = 168) = 273.
  assert.deepEqual(bestHostPool(2_867_336, costs, 39, 11), {
    bestN: 7,
    minHostBlocks: 168,
    numHostBlocks: 273,
    hostPoolBytes: 273 * 12288,
  });
});

test("the default host pool of DSA models (max_model_len): the best one for requests of that length, none when not one fits", () => {
  // 624 tokens = 39 pages of 16 (the best host pool above), d = min(39, minGpuBlocks 11).
  const o = { requestTokens: 39 * 16, minGpuBlocks: 11, blockSize: 16 };
  assert.equal(
    defaultHostPoolBytes("max_model_len", 2_867_336, costs, o),
    bestHostPool(2_867_336, costs, 39, 11).hostPoolBytes,
  );
  // One request needs (39 − 11) × 12,288 + 39 × 4,864 + 11 × 12,288 = 668,928 B: a smaller budget holds none.
  assert.equal(defaultHostPoolBytes("max_model_len", 668_927, costs, o), undefined);
  assert.notEqual(defaultHostPoolBytes("max_model_len", 668_928, costs, o), undefined);
  // The device ratio's rule, or a given device pool: no default here (kv_memory's ratio applies).
  assert.equal(defaultHostPoolBytes("device_ratio", 2_867_336, costs, o), undefined);
  assert.equal(
    defaultHostPoolBytes("max_model_len", 2_867_336, costs, { ...o, numGpuBlocksOverride: 94 }),
    undefined,
  );
});
