/**
 * The KV memory formula (core/kv/kv_memory.ts) over the KV cache groups (kv_cache_interface.ts):
 * dense blocks from a budget; the HiSparse split between the device pool and the host pool, the
 * device cost of every host page, the RAM cap of the default host pool and the reserved bytes;
 * every refusal with its words; the admission limit. Each figure is worked out in the comments.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DIGEST_ELEMENT_BYTES,
  groupPageBytes,
  hisparseKVCacheGroups,
  indexerKeySpec,
  type KVCacheGroupSpec,
  kvHeadsPerRank,
  mlaAttentionSpec,
  modelKVCacheGroups,
} from "../../../../src/core/kv/kv_cache_interface.js";
import {
  admissionRefusal,
  bytesPerToken,
  denseBytesPerBlock,
  hisparseBlockCosts,
  maxBlocksPerRequest,
  poolsTooSmall,
  sizeKVMemory,
  sparseRequestMinBlocks,
} from "../../../../src/core/kv/kv_memory.js";
import { describeKVRefusal, kvRefusalMessage } from "../../../../src/core/kv/kv_refusals.js";

// ref-small's geometry: 4 layers, 2 KV heads of 64 dims, f32 KV, blocks of 16. One layer's page:
// 2 (K, V) × 16 × 2 × 64 × 4 B = 16,384 B.
const REF_SMALL = { numHiddenLayers: 4, numKeyValueHeads: 2, headDim: 64 };
const BS = 16;
const dense = modelKVCacheGroups(REF_SMALL, { elementBytes: 4 });
// HiSparse with layers 0 and 1 dense, f32 digests (the CPU engine).
const sparse = hisparseKVCacheGroups(dense, {
  denseLayers: [0, 1],
  digestElementBytes: DIGEST_ELEMENT_BYTES.cpu,
});
// sink 16 + window 16 + hot buffer 64 tokens = 6 pages, + 1 new page = 7 blocks.
const minGpuBlocks = sparseRequestMinBlocks({ sinkTokens: 16, windowTokens: 16, deviceBufferTokens: 64 }, BS);

describe("KV cache groups", () => {
  it("dense: one full-attention group over every layer; 4 × 16,384 B a block", () => {
    assert.deepEqual(
      dense.map((g) => [g.name, g.spec.kind, g.layers, g.offloadable]),
      [["attention", "full_attention", [0, 1, 2, 3], true]],
    );
    assert.equal(bytesPerToken(dense), 4 * 2 * 2 * 64 * 4); // 4,096 B
    assert.equal(denseBytesPerBlock(dense, BS), 65536);
  });

  it("HiSparse: sparse layers offloadable, dense layers and digests stay on the device", () => {
    assert.deepEqual(
      sparse.map((g) => [g.name, g.spec.kind, g.layers, g.offloadable, groupPageBytes(g, BS)]),
      [
        ["attention", "full_attention", [2, 3], true, 32768],
        ["attention (dense layers)", "full_attention", [0, 1], false, 32768],
        // 2 layers × (min, max) × 2 heads × 64 × 4 B, whatever the block size.
        ["quest digest", "page_digest", [2, 3], false, 2048],
      ],
    );
    assert.deepEqual(hisparseBlockCosts(sparse, BS), {
      mainBytesPerBlock: 32768,
      hostBytesPerBlock: 32768,
      deviceBytesPerHostBlock: 32768 + 2048,
    });
    assert.equal(minGpuBlocks, 7);
  });

  it("fp8 host pages (host_kv_cache_dtype fp8): a host block costs 1 B an element, the device side is unchanged", () => {
    // f32 KV here: 32,768 B of K/V a block on the device, 32,768 / 4 = 8,192 B in the host pool.
    assert.deepEqual(hisparseBlockCosts(sparse, BS, 1), {
      mainBytesPerBlock: 32768,
      hostBytesPerBlock: 8192,
      deviceBytesPerHostBlock: 32768 + 2048,
    });
    // A 1 MiB host pool: 32 f32 host blocks, 128 fp8 ones; the device pool pays each host page's
    // dense layers and digests (34,816 B), so it shrinks by the 96 extra pages' device costs.
    const size = (hostElementBytes?: number) =>
      sizeKVMemory({
        groups: sparse,
        blockSize: BS,
        deviceBudgetBytes: 16 * 2 ** 20,
        hisparse: { hostPoolBytes: 2 ** 20, minGpuBlocks, hostElementBytes },
      });
    const f32 = size();
    const fp8 = size(1);
    assert.deepEqual([f32.host!.numHostBlocks, fp8.host!.numHostBlocks], [32, 128]);
    assert.deepEqual([f32.host!.hostBytesPerBlock, fp8.host!.hostBytesPerBlock], [32768, 8192]);
    assert.equal(f32.numGpuBlocks, Math.floor((16 * 2 ** 20 - 32 * 34816) / 32768));
    assert.equal(fp8.numGpuBlocks, Math.floor((16 * 2 ** 20 - 128 * 34816) / 32768));
  });

  it("tensor parallelism: heads split per rank, replicated below one head a rank", () => {
    assert.equal(kvHeadsPerRank(8, 1), 8);
    assert.equal(kvHeadsPerRank(8, 4), 2);
    assert.equal(kvHeadsPerRank(8, 16), 1); // each head on 2 ranks
    assert.throws(() => kvHeadsPerRank(6, 4), /cannot be split over 4 ranks/);
    assert.throws(() => kvHeadsPerRank(4, 6), /cannot be replicated over 6 ranks/);
    // Llama-3.1-8B (32 layers, 8 KV heads × 128, bf16) on 4 ranks: a quarter of the 2 MiB block.
    const llama = { numHiddenLayers: 32, numKeyValueHeads: 8, headDim: 128 };
    const one = denseBytesPerBlock(modelKVCacheGroups(llama, { elementBytes: 2 }), BS);
    const tp4 = denseBytesPerBlock(modelKVCacheGroups(llama, { elementBytes: 2, tensorParallelSize: 4 }), BS);
    assert.deepEqual([one, tp4], [2 ** 21, 2 ** 19]);
  });

  it("MLA latent rows and DSA indexer keys are groups like any other (DeepSeek-V3.2 shape, bf16 / fp8)", () => {
    // 61 layers, one latent row of 512 + 64 elements a token: 61 × 576 × 2 B = 70,272 B/token;
    // the indexer keeps 128 elements a token in fp8 plus one f32 scale: 61 × 132 B = 8,052 B.
    const layers = Array.from({ length: 61 }, (_, l) => l);
    const groups: KVCacheGroupSpec[] = [
      {
        name: "mla",
        spec: mlaAttentionSpec({ kvLoraRank: 512, qkRopeHeadDim: 64, elementBytes: 2 }),
        layers,
        offloadable: true,
      },
      {
        name: "indexer",
        spec: indexerKeySpec({ indexHeadDim: 128, elementBytes: 1, scaleBytesPerToken: 4 }),
        layers,
        offloadable: false,
      },
    ];
    assert.equal(bytesPerToken(groups), 70272 + 8052);
    // HiSparse keeps the indexer keys of every page on the device; only the latent rows move.
    const h = hisparseKVCacheGroups(groups, { denseLayers: [], digestElementBytes: 2 });
    assert.deepEqual(hisparseBlockCosts(h, 64), {
      mainBytesPerBlock: 64 * 70272,
      hostBytesPerBlock: 64 * 70272,
      deviceBytesPerHostBlock: 64 * 8052,
    });
  });
});

describe("sizeKVMemory", () => {
  it("dense: floor(budget / block bytes), or the override; no block is refused", () => {
    const s = sizeKVMemory({ groups: dense, blockSize: BS, deviceBudgetBytes: 10 * 2 ** 20 });
    assert.deepEqual(s, { numGpuBlocks: 160, bytesPerBlock: 65536, host: null, refusals: [] });
    const fixed = sizeKVMemory({
      groups: dense,
      blockSize: BS,
      deviceBudgetBytes: 0,
      numGpuBlocksOverride: 7,
    });
    assert.equal(fixed.numGpuBlocks, 7);
    const none = sizeKVMemory({ groups: dense, blockSize: BS, deviceBudgetBytes: 65535 });
    assert.deepEqual(none.refusals.map(kvRefusalMessage), [
      "no memory is left for the KV cache (one block needs 65536 bytes); lower --max-model-len or raise the memory budget",
    ]);
  });

  const hisparse = (hostPoolBytes: number | null, over: object = {}) =>
    sizeKVMemory({
      groups: sparse,
      blockSize: BS,
      deviceBudgetBytes: 10 * 2 ** 20,
      hisparse: { hostPoolBytes, minGpuBlocks },
      ...over,
    });

  it("HiSparse, default host pool: 2 host pages per device block, sized together from the budget", () => {
    // 10 MiB / (32,768 + 2 × 34,816) = 102.4 -> 102 device blocks, 204 host pages.
    assert.deepEqual(hisparse(null), {
      numGpuBlocks: 102,
      bytesPerBlock: 32768,
      host: {
        numHostBlocks: 204,
        hostPoolBytes: 204 * 32768,
        hostBytesPerBlock: 32768,
        deviceBytesPerHostBlock: 34816,
      },
      refusals: [],
    });
  });

  it("HiSparse: reserved device bytes come off the budget; the default host pool is capped", () => {
    // 1 MiB of slot tables: 9 MiB / 102,400 = 92.16 -> 92 blocks, 184 host pages.
    const r = hisparse(null, { reservedDeviceBytes: 2 ** 20 });
    assert.deepEqual([r.numGpuBlocks, r.host?.numHostBlocks], [92, 184]);
    // A cap of 150 host pages (4,915,200 B) below the 204 of the default: the host pool is the
    // cap, the device gets floor((10 MiB − 150 × 34,816) / 32,768) = 160 blocks.
    const capped = hisparse(null, {
      hisparse: { hostPoolBytes: null, minGpuBlocks, defaultHostPoolMaxBytes: 150 * 32768 },
    });
    assert.deepEqual([capped.numGpuBlocks, capped.host?.numHostBlocks], [160, 150]);
    // The cap is below the device pool: refused as a given host pool would be.
    assert.equal(capped.refusals[0]?.kind, "host_pool_below_device_pool");
    // A given host pool is never capped.
    assert.equal(
      hisparse(2 ** 30, { hisparse: { hostPoolBytes: 2 ** 30, minGpuBlocks, defaultHostPoolMaxBytes: 1 } })
        .host?.numHostBlocks,
      32768,
    );
  });

  it("HiSparse refusals: a host pool smaller than the device pool, a device pool below one sparse request, none left", () => {
    // 1 MiB of host = 32 pages; the device pool gets (10 MiB − 32 × 34,816) / 32,768 = 286 blocks.
    const small = hisparse(2 ** 20);
    assert.deepEqual([small.host?.numHostBlocks, small.numGpuBlocks], [32, 286]);
    assert.deepEqual(small.refusals.map(kvRefusalMessage), [
      "the host pool holds 32 pages, fewer than the 286 device blocks; every page has a host copy, so raise --host-pool-gib to at least 0.009",
    ]);
    // A fixed pool of 8 blocks fits the minimum of 7; 6 does not (and 12 host pages are fine).
    assert.deepEqual(hisparse(null, { numGpuBlocksOverride: 8 }).refusals, []);
    assert.deepEqual(hisparse(null, { numGpuBlocksOverride: 6 }).refusals.map(kvRefusalMessage), [
      "the device pool (6 blocks) cannot hold one sparse request's minimum of 7 blocks (sinks, window, hot buffer and a new page); lower device_buffer_tokens or raise the memory budget",
    ]);
    // Both at once: 6 blocks and a host pool of 4 pages.
    assert.deepEqual(
      hisparse(4 * 32768, { numGpuBlocksOverride: 6 }).refusals.map((r) => r.kind),
      ["host_pool_below_device_pool", "below_sparse_minimum"],
    );
    // 1 GiB of host pages costs 32,768 × 34,816 B of device memory, more than the budget.
    const none = hisparse(2 ** 30);
    assert.equal(none.numGpuBlocks, 0);
    assert.deepEqual(
      none.refusals.map((r) => describeKVRefusal(r, (n) => n.toLocaleString("en-US")).fact),
      ["no device memory is left for the KV pool after the dense layers and digests of 32,768 host pages"],
    );
  });
});

describe("admission", () => {
  it("a request must fit the device pool, and with HiSparse the host pool too", () => {
    assert.equal(maxBlocksPerRequest({ numGpuBlocks: 30, numHostBlocks: null }), 30);
    assert.equal(maxBlocksPerRequest({ numGpuBlocks: 30, numHostBlocks: 156 }), 30);
    assert.equal(maxBlocksPerRequest({ numGpuBlocks: 30, numHostBlocks: 20 }), 20);
    // 1024 tokens = 64 blocks: the device pool of 30 is too small, the host pool of 156 is not.
    assert.deepEqual(poolsTooSmall({ numGpuBlocks: 30, numHostBlocks: 156 }, 1024, BS), {
      device: true,
      host: false,
    });
    assert.deepEqual(poolsTooSmall({ numGpuBlocks: 64, numHostBlocks: 63 }, 1024, BS), {
      device: false,
      host: true,
    });
    const r = admissionRefusal({ numGpuBlocks: 30, numHostBlocks: 156 }, 624, BS);
    assert.equal(
      describeKVRefusal(r!).fact,
      "the device pool (30 blocks) cannot hold one request's 39 pages for its dense prefill",
    );
    assert.equal(admissionRefusal({ numGpuBlocks: 39, numHostBlocks: 156 }, 624, BS), null);
    assert.equal(
      describeKVRefusal(admissionRefusal({ numGpuBlocks: 30, numHostBlocks: null }, 624, BS)!).fact,
      "the device pool (30 blocks) cannot hold one request's 39 pages",
    );
  });
});
