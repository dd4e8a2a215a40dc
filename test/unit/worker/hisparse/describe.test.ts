/**
 * The start-up summary of a HiSparse set-up (its KVCacheSetup.description, which `hisparse serve`
 * logs): the settings in effect and both pools' sizes.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import { hisparseStartupSummary } from "../../../../src/worker/hisparse/describe.js";

/**
 * ref-small on the CPU with dense layers [0, 1]: a block of the 2 sparse layers is
 * 2 (K, V) × 16 tokens × 2 KV heads × 64 head_dim × 4 B (f32) × 2 layers = 32,768 B.
 */
const BLOCK_BYTES = 32768;

const pools = (numGpuBlocks: number, numHostBlocks: number) => ({
  numGpuBlocks,
  kvBytesPerBlock: BLOCK_BYTES,
  hisparse: {
    numHostBlocks,
    hostBytesPerBlock: BLOCK_BYTES,
    deviceBytesPerHostBlock: 34816,
    denseLayers: [0, 1],
    sparseLayers: [2, 3],
  },
});

test("auto with the defaults: residency hybrid, topk 2048, buffer 2 × topk; min_sparse (64 + 256 + 4096) only in the fields", () => {
  // 10,485 × 32,768 B = 343,572,480 B = 0.32 GiB; 20,970 pages = 687,144,960 B = 0.64 GiB.
  const s = hisparseStartupSummary(resolveHiSparseConfig({ mode: "auto" }), pools(10485, 20970));
  assert.equal(
    s.line,
    "HiSparse auto: residency hybrid, topk 2048, device_buffer_tokens 4096; " +
      "device pool 10485 blocks (0.32 GiB) + 0.68 GiB of dense-layer KV and digests, host pool 20970 pages (0.64 GiB)",
  );
  assert.deepEqual(s.fields, {
    mode: "auto",
    residency: "hybrid",
    topk: 2048,
    deviceBufferTokens: 4096,
    minSparseTokens: 4416,
    numGpuBlocks: 10485,
    devicePoolBytes: 343_572_480,
    hostPagesDeviceBytes: 20970 * 34816, // 730,091,520 B = 0.68 GiB
    numHostBlocks: 20970,
    hostPoolBytes: 687_144_960,
  });
});

test("on with topk 512 and a 0.5 GiB host pool: residency host, the knobs derived from topk", () => {
  // Buffer 2 × 512 = 1,024; sinks 512 / 16 = 32, window 512 / 8 = 64; min_sparse 32 + 64 + 1,024 =
  // 1,120; 16,384 pages × 32 KiB = 0.50 GiB.
  const s = hisparseStartupSummary(resolveHiSparseConfig({ mode: "on", topk: 512 }), pools(15360, 16384));
  assert.equal(
    s.line,
    "HiSparse on: residency host, topk 512, device_buffer_tokens 1024, min_sparse_tokens 1120; " +
      "device pool 15360 blocks (0.47 GiB) + 0.53 GiB of dense-layer KV and digests, host pool 16384 pages (0.50 GiB)",
  );
});
