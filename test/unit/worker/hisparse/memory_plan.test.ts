/**
 * planHiSparseMemory: the device budget pays for the main pool (sparse layers) and, per host
 * page, its dense-layer KV and digests; the refusals name the fix.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import { planHiSparseMemory } from "../../../../src/worker/hisparse/memory_plan.js";

// ref-small's geometry: 4 layers (0 and 1 dense), 2 kv heads of 64 dims, f32 KV, blocks of 16.
// One layer's page: 2 (K, V) * 16 * 2 * 64 * 4 B = 16384 B. Main block: 2 sparse layers =
// 32768 B. Per host page on the device: 2 dense layers (32768 B) + digests 2 layers * 2 (min,
// max) * 2 heads * 64 * 4 B (2048 B) = 34816 B. Host page: 32768 B.
const base = {
  blockSize: 16,
  numLayers: 4,
  numKvHeads: 2,
  headDim: 64,
  kvElementBytes: 4,
  deviceBudgetBytes: 10 * 2 ** 20,
};
const cfg = (hostPoolBytes: number | null) =>
  resolveHiSparseConfig({
    mode: "auto",
    topk: 64,
    deviceBufferTokens: 64,
    sinkTokens: 16,
    windowTokens: 16,
    hostPoolBytes,
  });

test("default host pool: 2 host pages per device block, sized together from the budget", () => {
  const p = planHiSparseMemory({ ...base, config: cfg(null) });
  // 10 MiB / (32768 + 2 * 34816) = 102.4 -> 102 device blocks, 204 host pages.
  assert.deepEqual(p, {
    numGpuBlocks: 102,
    numHostBlocks: 204,
    mainBytesPerBlock: 32768,
    deviceBytesPerHostBlock: 34816,
    hostBytesPerBlock: 32768,
    reasons: [],
  });
});

test("a host pool smaller than the device pool, or a device pool below one sparse request's minimum, is refused", () => {
  // 1 MiB of host = 32 pages; the device pool gets (10 MiB - 32 * 34816) / 32768 = 286 blocks.
  const small = planHiSparseMemory({ ...base, config: cfg(2 ** 20) });
  assert.deepEqual([small.numHostBlocks, small.numGpuBlocks], [32, 286]);
  assert.deepEqual(small.reasons, [
    "the host pool holds 32 pages, fewer than the 286 device blocks; every page has a host copy, so raise --host-pool-gib to at least 0.009",
  ]);
  // A fixed pool of 8 blocks fits the minimum: 1 sink + 1 window + 4 hot + 1 new page = 7.
  assert.deepEqual(
    planHiSparseMemory({ ...base, config: cfg(2 ** 20), numGpuBlocksOverride: 8 }).reasons,
    [],
  );
  assert.deepEqual(planHiSparseMemory({ ...base, config: cfg(2 ** 20), numGpuBlocksOverride: 6 }).reasons, [
    "the device pool (6 blocks) cannot hold one sparse request's minimum of 7 blocks (sinks, window, hot buffer and a new page); lower device_buffer_tokens or raise the memory budget",
  ]);
});
