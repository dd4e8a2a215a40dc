/**
 * The plan against what the engine really does (CPU backend, a tiny dummy-weight Llama): the
 * engine sizes its KV cache to the planned number of blocks, and admits exactly the planned
 * number of requests of the planned context at once, with no preemption while they run; with
 * HiSparse, one request's dense prefill beside the others' sparse blocks, and the engine
 * refuses to start when the plan refuses a request of max_model_len tokens; in every HiSparse
 * mode (`on`, `on` with residency hybrid, `auto`).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { variantEngineArgs } from "../../../src/cli/eval.js";
import { type EngineArgs, makeEngineArgs } from "../../../src/config/engine_args.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { LLMEngine } from "../../../src/engine/llm_engine.js";
import { planHiSparseKnobs } from "../../../src/plan/hisparse_knobs.js";
import { type PlanInput, planDense, planHiSparse } from "../../../src/plan/plan.js";
import { TINY_LLAMA_CONFIG } from "../../helpers/tiny_model.js";

const TINY = TINY_LLAMA_CONFIG;

/**
 * Submits `n` requests of `prompt` tokens + `maxTokens`, steps the engine to the end.
 * @returns the most requests running after any step, the preemptions, and the block count
 */
async function run(args: EngineArgs, n: number, prompt: number, maxTokens: number) {
  const engine = await LLMEngine.create(args);
  try {
    for (let i = 0; i < n; i++) {
      const ids = Array.from({ length: prompt }, (_, j) => 1 + ((i * 7 + j) % 250));
      engine.addRequest(
        `r${i}`,
        { promptTokenIds: ids },
        makeSamplingParams({ maxTokens, ignoreEos: true, temperature: 0 }),
      );
    }
    let peak = 0;
    let finished = 0;
    while (engine.hasPendingWork()) {
      for (const o of await engine.step()) if (o.finished) finished++;
      peak = Math.max(peak, engine.scheduler.numRunning);
    }
    return {
      peak,
      finished,
      preemptions: engine.scheduler.makeStats().numPreemptions,
      numGpuBlocks: engine.info.numGpuBlocks,
    };
  } finally {
    await engine.shutdown();
  }
}

describe("plan vs the engine's admission (CPU, tiny dummy model)", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "hisparse-plan-"));
    writeFileSync(join(dir, "config.json"), JSON.stringify(TINY));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** One max_model_len request must fit the pool, else the engine refuses to start. */
  const base = (kvBudgetBytes: number, maxModelLen = 1024) =>
    makeEngineArgs({
      model: dir,
      device: "cpu",
      loadFormat: "dummy",
      kvCacheDtype: "f32",
      blockSize: 16,
      cpuKvCacheBytes: kvBudgetBytes,
      maxModelLen,
      maxNumBatchedTokens: 8192,
      enableChunkedPrefill: false,
      inprocWorker: true,
    });
  const planFor = (kvBudgetBytes: number, contextTokens: number): PlanInput => ({
    model: loadModelConfig(dir),
    kvBudgetBytes,
    contextTokens,
    blockSize: 16,
    kvElementBytes: 4,
    hisparse: planHiSparseKnobs({}),
  });

  for (const [budget, prompt, maxTokens, maxModelLen] of [
    // 30 blocks + 5000 B (max_model_len 480 = 30 × 16); 99 + 2 tokens = 7 blocks each: 4 at once
    // (28 of 30 blocks).
    [30 * 16384 + 5000, 99, 2, 480],
    // 128 blocks; 290 + 10 tokens = 19 blocks each: 6 at once.
    [2 ** 21, 290, 10, 1024],
  ] as const) {
    it(`dense: ${budget} B, ${prompt} + ${maxTokens} tokens per request`, async () => {
      const d = planDense(planFor(budget, prompt + maxTokens));
      const r = await run(base(budget, maxModelLen), d.maxConcurrent + 2, prompt, maxTokens);
      assert.equal(r.numGpuBlocks, d.numGpuBlocks, "the engine sizes the planned number of blocks");
      assert.equal(r.peak, d.maxConcurrent, "the planned number of requests runs at once, no more");
      assert.equal(r.preemptions, 0);
      assert.equal(r.finished, d.maxConcurrent + 2);
    });
  }

  /*
   * HiSparse on the tiny model, layer 0 dense, layers 1-3 sparse: a GPU block holds 3 layers ×
   * 2 × 16 × 1 × 32 × 4 B = 12,288 B; each page costs on the device its dense layer 4,096 B +
   * digests 3 × 2 × 1 × 32 × 4 B = 768 B = 4,864 B. Knobs: topk 64, hot buffer 128 tokens,
   * sink 16, window 16, so a decoding request holds d = ceil(160 / 16) + 1 = 11 GPU blocks.
   * Requests of 600 + 24 tokens: P = 39 pages, all of them on the GPU while it prefills. One
   * digest per page (digest_tokens 16, the default, given explicitly), which the figures were worked out for.
   */
  const knobs =
    '{"topk": 64, "device_buffer_tokens": 128, "sink_tokens": 16, "window_tokens": 16, "dense_layers": [0], "digest_tokens": 16}';
  const hisparsePlan = (budget: number, hostPages: number, contextTokens: number) => {
    const p = planFor(budget, contextTokens);
    p.hisparse = planHiSparseKnobs({ json: knobs, hostPoolBytes: hostPages * 12288 });
    return planHiSparse(p);
  };
  /**
   * Every HiSparse mode: the plan counts the pages each holds at full load, so residency changes
   * no figure (`on` spills a request's pages after its prefill, `on` with residency hybrid and
   * `auto` when the pool runs short).
   */
  const MODES = [
    { mode: "on", json: knobs },
    { mode: "on", json: knobs.replace("}", ', "residency": "hybrid"}') },
    { mode: "auto", json: knobs },
  ] as const;
  type Mode = (typeof MODES)[number];
  const modeName = (m: Mode) => (m.json.includes("hybrid") ? `${m.mode} (residency hybrid)` : m.mode);
  const hisparseArgs = (
    budget: number,
    hostPages: number,
    maxModelLen = 1024,
    m: Mode = MODES[0],
  ): EngineArgs => {
    const flags = [
      "--enable-hybrid-sparse",
      m.mode,
      "--hisparse-config",
      m.json,
      "--host-pool-gib",
      String((hostPages * 12288) / 2 ** 30),
    ];
    const args = variantEngineArgs(
      { ...base(budget, maxModelLen), cpuKvCacheGib: budget },
      { name: m.mode, argv: flags },
    );
    return { ...args, inprocWorker: true };
  };

  for (const { what, hostPages, budget, byDevice, byHost } of [
    // 351 host pages (9 requests); GPU pool floor((2,867,336 − 351 × 4,864) / 12,288) = 94 blocks.
    // By the GPU: one prefill on 39 blocks, the others on 11: floor((94 − 39) / 11) + 1 = 6
    // (floor(94 / 11) = 8 if the prefill were ignored); by the host pool 9.
    {
      what: "the GPU pool, one dense prefill beside the sparse requests",
      hostPages: 351,
      budget: 2_867_336,
      byDevice: 6,
      byHost: 9,
    },
    // 195 host pages (5 requests); GPU pool floor((2,108,552 − 195 × 4,864) / 12,288) = 94 again.
    { what: "the host pool", hostPages: 195, budget: 2_108_552, byDevice: 6, byHost: 5 },
  ]) {
    for (const m of MODES) {
      it(`HiSparse ${modeName(m)}, limited by ${what}: the planned GPU pool and number of requests at once`, async () => {
        const h = hisparsePlan(budget, hostPages, 624);
        assert.deepEqual([h.pagesPerRequest, h.devicePagesPerRequest], [39, 11]);
        assert.deepEqual(
          [h.given.numGpuBlocks, h.given.maxByDevice, h.given.maxByHost],
          [94, byDevice, byHost],
        );
        const n = h.given.maxConcurrent;
        const r = await run(hisparseArgs(budget, hostPages, 1024, m), n + 3, 600, 24);
        assert.equal(r.numGpuBlocks, 94, "the engine sizes the planned GPU pool");
        assert.equal(r.peak, n, "the planned number of requests runs at once, no more");
        assert.equal(r.preemptions, 0);
        assert.equal(r.finished, n + 3);
      });
    }
  }

  it("HiSparse on, on (residency hybrid) and auto: a GPU pool smaller than one request's pages is refused as the engine refuses it", async () => {
    // 156 host pages; GPU pool floor((1,132,424 − 156 × 4,864) / 12,288) = 30 blocks < 39 pages.
    const [budget, hostPages] = [1_132_424, 156];
    const h = hisparsePlan(budget, hostPages, 624);
    assert.equal(h.given.numGpuBlocks, 30);
    assert.equal(h.given.maxByDevice, 0);
    assert.equal(h.given.maxConcurrent, 0);
    assert.deepEqual(h.given.refusals, [
      "the device pool (30 blocks) cannot hold one request's 39 pages for its dense prefill",
    ]);
    // The engine refuses to start: a request of max_model_len 1024 tokens would need 64 pages
    // on the device for its prefill, and 30 × 16 = 480 tokens fit.
    // With max_model_len 480 it starts; 400 + 24 tokens = 27 pages fit:
    // floor((30 − 27) / 11) + 1 = 1 request at a time.
    const short = hisparsePlan(budget, hostPages, 424);
    assert.deepEqual([short.given.maxByDevice, short.given.maxConcurrent], [1, 1]);
    for (const m of MODES) {
      await assert.rejects(run(hisparseArgs(budget, hostPages, 1024, m), 1, 600, 24), {
        name: "KVCacheCapacityError",
        message:
          "the model's max seq len (1024) is larger than the maximum number of tokens one HiSparse request can hold (480: its pages must fit the device pool of 30 blocks for its dense prefill and the host pool of 156 blocks, 16 tokens a block); increase the device pool (--cpu-kv-cache-gib or --num-gpu-blocks-override), or decrease --max-model-len",
      });
      const r = await run(hisparseArgs(budget, hostPages, 480, m), 3, 400, 24);
      assert.deepEqual([r.peak, r.preemptions, r.finished], [1, 0, 3], modeName(m));
    }
  });
});
