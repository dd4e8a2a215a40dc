/**
 * The start-up check (engine/kv_capacity.ts): the engine refuses a KV cache that cannot hold one
 * request of max_model_len tokens, as vLLM does, with one sentence naming both numbers and the
 * remedies. First on schedulers built here (the dense pool; HiSparse with the device pool, the
 * host pool or both too small), then through LLMEngine.create on a tiny dummy-weight Llama on
 * the CPU backend, where a pool of exactly one request starts and serves it.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ConfigError, type EngineArgs, makeEngineArgs } from "../../../src/config/engine_args.js";
import { resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import { createHiSparseScheduling } from "../../../src/core/hisparse/hisparse_scheduling.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import type { Scheduler } from "../../../src/core/sched/scheduler.js";
import { checkKVCacheCapacity, KVCacheCapacityError } from "../../../src/engine/kv_capacity.js";
import { LLMEngine } from "../../../src/engine/llm_engine.js";
import { TINY_LLAMA_CONFIG } from "../../helpers/tiny_model.js";
import { makeScheduler } from "../core/helpers.js";

const REMEDY_CPU = "--cpu-kv-cache-gib or --num-gpu-blocks-override";
const REMEDY_CUDA = "--gpu-memory-utilization or --num-gpu-blocks-override";

/** A HiSparse scheduler (block size 4, mode on) over the given pools. */
function hisparseScheduler(maxModelLen: number, numGpuBlocks: number, numHostBlocks: number): Scheduler {
  const cfg = resolveHiSparseConfig({ mode: "on", topk: 8, sinkTokens: 4, windowTokens: 4 });
  const hs = createHiSparseScheduling(cfg, { blockSize: 4, numGpuBlocks, numHostBlocks });
  return makeScheduler({ maxModelLen }, { blockSize: 4, numGpuBlocks }, hs.schedulerOptions);
}

/** The error checkKVCacheCapacity throws (fails the test when it throws none). */
function refusal(s: Scheduler, pools: Parameters<typeof checkKVCacheCapacity>[1]): KVCacheCapacityError {
  try {
    checkKVCacheCapacity(s, pools);
  } catch (e) {
    assert.ok(e instanceof KVCacheCapacityError);
    return e;
  }
  assert.fail("checkKVCacheCapacity accepted the pools");
}

describe("checkKVCacheCapacity", () => {
  it("dense: 16 blocks of 4 tokens hold 64 tokens; max_model_len 65 is refused, 64 starts", () => {
    const e = refusal(makeScheduler({ maxModelLen: 65 }, { blockSize: 4, numGpuBlocks: 16 }), {
      backend: "cuda",
      numHostBlocks: null,
    });
    assert.equal(
      e.message,
      `the model's max seq len (65) is larger than the maximum number of tokens that can be stored in the KV cache (64: 16 blocks of 4 tokens); increase ${REMEDY_CUDA}, or decrease --max-model-len`,
    );
    assert.deepEqual([e.name, e.maxModelLen, e.maxNumKvTokens], ["KVCacheCapacityError", 65, 64]);
    assert.ok(e instanceof ConfigError);
    assert.deepEqual(e.reasons, [e.message]);
    // Exactly one request of max_model_len: ceil(64 / 4) = 16 blocks, the whole pool.
    const exact = makeScheduler({ maxModelLen: 64 }, { blockSize: 4, numGpuBlocks: 16 });
    checkKVCacheCapacity(exact, { backend: "cuda", numHostBlocks: null });
  });

  it("the CPU backend names its KV cache flag", () => {
    const e = refusal(makeScheduler({ maxModelLen: 1024 }, { blockSize: 4, numGpuBlocks: 16 }), {
      backend: "cpu",
      numHostBlocks: null,
    });
    assert.match(e.message, /\(64: 16 blocks of 4 tokens\); increase --cpu-kv-cache-gib or/);
  });

  it("HiSparse, host pool too small: 12 host blocks hold 48 of the 64 tokens (device 16 would do)", () => {
    const e = refusal(hisparseScheduler(64, 16, 12), { backend: "cuda", numHostBlocks: 12 });
    assert.equal(
      e.message,
      "the model's max seq len (64) is larger than the maximum number of tokens one HiSparse request can hold (48: its pages must fit the device pool of 16 blocks for its dense prefill and the host pool of 12 blocks, 4 tokens a block); increase the host pool (--host-pool-gib), or decrease --max-model-len",
    );
    assert.equal(e.maxNumKvTokens, 48);
  });

  it("HiSparse, device pool too small: 12 device blocks hold 48 tokens (host 32 would do)", () => {
    const e = refusal(hisparseScheduler(64, 12, 32), { backend: "cuda", numHostBlocks: 32 });
    assert.equal(
      e.message,
      `the model's max seq len (64) is larger than the maximum number of tokens one HiSparse request can hold (48: its pages must fit the device pool of 12 blocks for its dense prefill and the host pool of 32 blocks, 4 tokens a block); increase the device pool (${REMEDY_CUDA}), or decrease --max-model-len`,
    );
  });

  it("HiSparse, both pools too small: both remedies, the limit is the smaller pool", () => {
    const e = refusal(hisparseScheduler(64, 12, 10), { backend: "cpu", numHostBlocks: 10 });
    assert.equal(
      e.message,
      `the model's max seq len (64) is larger than the maximum number of tokens one HiSparse request can hold (40: its pages must fit the device pool of 12 blocks for its dense prefill and the host pool of 10 blocks, 4 tokens a block); increase the device pool (${REMEDY_CPU}) and the host pool (--host-pool-gib), or decrease --max-model-len`,
    );
  });

  it("HiSparse: pools of exactly one max_model_len request start", () => {
    checkKVCacheCapacity(hisparseScheduler(64, 16, 16), { backend: "cuda", numHostBlocks: 16 });
  });
});

const TINY = TINY_LLAMA_CONFIG;

describe("LLMEngine.create refuses a KV cache smaller than one max_model_len request (CPU)", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "hisparse-kvcap-"));
    writeFileSync(join(dir, "config.json"), JSON.stringify(TINY));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const args = (p: Partial<EngineArgs>): EngineArgs =>
    makeEngineArgs({ model: dir, device: "cpu", loadFormat: "dummy", kvCacheDtype: "f32", ...p });
  /** HiSparse on, layer 0 dense; a request's minimum is (16 + 16 + 64) / 16 + 1 = 7 blocks. */
  const hisparse = (hostPoolBytes: number) => ({
    hisparse: resolveHiSparseConfig({
      mode: "on",
      topk: 32,
      deviceBufferTokens: 64,
      sinkTokens: 16,
      windowTokens: 16,
      denseLayers: [0],
      hostPoolBytes,
    }),
  });

  /** Starts the engine, serves one request of `prompt` + `maxTokens` tokens, stops it. */
  async function serveOne(a: EngineArgs, prompt: number, maxTokens: number): Promise<number[]> {
    const engine = await LLMEngine.create(a);
    try {
      const ids = Array.from({ length: prompt }, (_, j) => 1 + (j % 250));
      const sp = makeSamplingParams({ maxTokens, ignoreEos: true, temperature: 0 });
      engine.addRequest("r0", { promptTokenIds: ids }, sp);
      let out: number[] = [];
      while (engine.hasPendingWork())
        for (const o of await engine.step()) if (o.finished) out = o.outputs[0]!.tokenIds;
      return out;
    } finally {
      await engine.shutdown();
    }
  }

  it("dense, worker thread: 4 blocks of 16 hold 64 tokens; 65 is refused, 64 starts and serves it", async () => {
    await assert.rejects(LLMEngine.create(args({ numGpuBlocksOverride: 4, maxModelLen: 65 })), {
      name: "KVCacheCapacityError",
      message: `the model's max seq len (65) is larger than the maximum number of tokens that can be stored in the KV cache (64: 4 blocks of 16 tokens); increase ${REMEDY_CPU}, or decrease --max-model-len`,
    });
    // 60 prompt tokens + 4 generated = 64 = max_model_len; 63 of them are written to the cache.
    const out = await serveOne(args({ numGpuBlocksOverride: 4, maxModelLen: 64 }), 60, 4);
    assert.equal(out.length, 4);
  });

  it("HiSparse on: a device pool of 20 blocks holds 320 tokens; 321 is refused, 320 starts and serves it", async () => {
    // 64 host pages of 3 sparse layers × 4 KiB: the host pool is not the limit.
    const a = (maxModelLen: number) =>
      args({
        numGpuBlocksOverride: 20,
        maxModelLen,
        inprocWorker: true,
        extensions: hisparse(64 * 3 * 4096),
      });
    await assert.rejects(LLMEngine.create(a(321)), {
      name: "KVCacheCapacityError",
      message: `the model's max seq len (321) is larger than the maximum number of tokens one HiSparse request can hold (320: its pages must fit the device pool of 20 blocks for its dense prefill and the host pool of 64 blocks, 16 tokens a block); increase the device pool (${REMEDY_CPU}), or decrease --max-model-len`,
    });
    const out = await serveOne(a(320), 300, 20);
    assert.equal(out.length, 20);
  });
});
