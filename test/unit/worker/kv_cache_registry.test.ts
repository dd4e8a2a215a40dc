/**
 * The KV set-up contract (worker/kv_cache_setup.ts) and its table (worker/kv_cache_registry.ts):
 * Worker.create picks the set-up by backend and feature and hands it whole to the ModelRunner
 * (CPU backend, tiny dummy-weight Llama: 4 layers, 1 KV head of 32, f32 KV, so a 16-token block
 * of one layer is 2 × 16 × 32 × 4 B = 4,096 B).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { DensePagedAttention } from "../../../src/attention/backend.js";
import { HiSparseAttention } from "../../../src/attention/sparse/hisparse_attention.js";
import { CpuBackend } from "../../../src/backends/cpu/cpu_backend.js";
import { ConfigError, makeEngineArgs } from "../../../src/config/engine_args.js";
import { resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import { loadModel } from "../../../src/models/registry.js";
import { hisparseStartupSummary } from "../../../src/worker/hisparse/describe.js";
import { HiSparseWorker } from "../../../src/worker/hisparse/hisparse_worker.js";
import {
  createKVCacheSetup,
  DENSE_KV,
  HISPARSE_KV,
  KV_CACHE_SETUPS,
  kvCacheFeatureOf,
  kvCacheSetupEntry,
} from "../../../src/worker/kv_cache_registry.js";
import { Worker } from "../../../src/worker/worker.js";
import { TINY_LLAMA_CONFIG } from "../../helpers/tiny_model.js";

describe("KV set-ups by backend and feature", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "hisparse-kvsetup-"));
    writeFileSync(join(dir, "config.json"), JSON.stringify(TINY_LLAMA_CONFIG));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const args = (extensions: Record<string, unknown> = {}) =>
    makeEngineArgs({
      model: dir,
      device: "cpu",
      loadFormat: "dummy",
      kvCacheDtype: "f32",
      blockSize: 16,
      cpuKvCacheBytes: 2 ** 20,
      maxModelLen: 512,
      inprocWorker: true,
      extensions,
    });
  const hs = resolveHiSparseConfig({
    mode: "auto",
    topk: 64,
    deviceBufferTokens: 64,
    sinkTokens: 16,
    windowTokens: 16,
    denseLayers: [0],
  });

  it("every (backend, feature) has one entry; the feature comes from the arguments", () => {
    const keys = KV_CACHE_SETUPS.map((e) => `${e.backend}/${e.feature}`);
    assert.deepEqual(keys.sort(), ["cpu/dense", "cpu/hisparse", "cuda/dense", "cuda/hisparse"]);
    assert.equal(kvCacheFeatureOf(args()), "dense");
    assert.equal(kvCacheFeatureOf(args({ hisparse: hs })), "hisparse");
    assert.equal(kvCacheFeatureOf(args({ hisparse: { ...hs, mode: "off" } })), "dense");
  });

  it("dense on the CPU: 1 MiB / (4 layers × 4,096 B) = 64 blocks, dense paged attention, no extension", async () => {
    const w = await Worker.create(args());
    try {
      assert.equal(w.info.numGpuBlocks, 64);
      assert.equal(w.info.kvBytesPerBlock, 16384);
      assert.equal(w.info.hisparse, null);
      assert.ok(w.modelRunner.attention instanceof DensePagedAttention);
      assert.equal(w.modelRunner.extensions.length, 0);
      assert.deepEqual(
        [w.info.kvCache.key, w.info.kvCache.logLevel, w.info.kvCache.line],
        ["kv_cache", "debug", "KV cache: 64 blocks of 16 tokens (1.00 MiB, f32), attention 4 layers"],
      );
    } finally {
      w.shutdown();
    }
  });

  it("HiSparse auto on the CPU: the runner gets the set-up's attention and extension; serve's summary is its description", async () => {
    const w = await Worker.create(args({ hisparse: hs }));
    try {
      // Main block 3 × 4,096 = 12,288 B; per host page layer 0's 4,096 B + digests 3 × 2 × 32 × 4 B
      // = 768 B; 1 MiB / (12,288 + 2 × 4,864) = 47.6 -> 47 blocks, 94 host pages.
      assert.deepEqual([w.info.numGpuBlocks, w.info.hisparse?.numHostBlocks], [47, 94]);
      assert.ok(w.modelRunner.attention instanceof HiSparseAttention);
      assert.equal(w.modelRunner.extensions.length, 1);
      assert.ok(w.modelRunner.extensions[0] instanceof HiSparseWorker);
      const summary = hisparseStartupSummary(hs, { ...w.info, hisparse: w.info.hisparse! });
      assert.deepEqual(w.info.kvCache, {
        key: "hisparse",
        line: summary.line,
        fields: summary.fields,
        logLevel: "info",
      });
    } finally {
      w.shutdown();
    }
  });

  it("a backend without a set-up for the feature is refused; an entry only serves its own backend", () => {
    const backend = new CpuBackend({ numThreads: 1 });
    try {
      const { model } = loadModel({ modelDir: dir, backend, loadFormat: "dummy", seed: 0, maxModelLen: 512 });
      const ctx = {
        model,
        args: args({ hisparse: hs }),
        kvCacheDtype: "f32" as const,
        deviceBudgetBytes: 2 ** 20,
        maxModelLen: 512,
      };
      const denseOnly = KV_CACHE_SETUPS.filter((e) => e.feature === DENSE_KV.name);
      assert.throws(
        () => createKVCacheSetup(backend, ctx, denseOnly),
        (e: unknown) =>
          e instanceof ConfigError && /the cpu backend has no KV cache set-up for hisparse/.test(e.message),
      );
      const cudaOnly = kvCacheSetupEntry("cuda", HISPARSE_KV, () => {
        throw new Error("not reached");
      });
      assert.throws(() => cudaOnly.create(backend, ctx), /the cuda\/hisparse KV set-up was asked for cpu/);
      model.dispose();
    } finally {
      backend.dispose();
    }
  });
});
