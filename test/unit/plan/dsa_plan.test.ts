/**
 * `hisparse plan` for a DSA model against what the engine does (CPU backend, tiny GLM-5 with
 * dummy weights, f32 KV): the DSA settings (selector dsa, hot buffer 2 x index_topk = 64 rows,
 * a one-page window, no dense layers), the engine's GPU pool and the number of requests it runs
 * at once with HiSparse `on`, no preemption; and the plan refuses Quest's keys as the engine does.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { variantEngineArgs } from "../../../src/cli/eval.js";
import { makeEngineArgs } from "../../../src/config/engine_args.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { LLMEngine } from "../../../src/engine/llm_engine.js";
import { planDsaKnobs } from "../../../src/plan/dsa_plan.js";
import { PlanError, type PlanInput, planHiSparse } from "../../../src/plan/plan.js";
import { refModelDir } from "../../helpers/reference.js";

/**
 * f32 rows, 16-token pages: a GPU block = 4 layers × 16 × (64 + 16) × 4 B = 20,480 B; each page
 * keeps its indexer keys on the GPU: 4 full layers × 16 × 32 × 4 B = 8,192 B. 80 host pages;
 * budget 25 blocks + 80 pages = 512,000 + 655,360 B.
 */
const [BLOCK, PER_PAGE, HOST_PAGES] = [20480, 8192, 80];
const BUDGET = 25 * BLOCK + HOST_PAGES * PER_PAGE;
/** 200 + 8 tokens = 13 pages; decoding, a request holds ceil((16 + 64) / 16) + 1 = 6 blocks. */
const [PROMPT, MAX_TOKENS] = [200, 8];

describe("hisparse plan vs the engine: DSA (tiny GLM-5, dummy weights)", () => {
  const src = refModelDir("tiny-glm5-dsa-pv");
  let dir = "";
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "hisparse-dsa-plan-"));
    if (src !== null) writeFileSync(join(dir, "config.json"), readFileSync(join(src, "config.json")));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** The plan at the test's context (budget BUDGET unless given); hostPoolBytes null: the engine's default. */
  const plan = (
    hostPoolBytes: number | null = HOST_PAGES * BLOCK,
    kvBudgetBytes = BUDGET,
    { contextTokens = PROMPT + MAX_TOKENS, maxNumBatchedTokens = 4096 } = {},
  ) => {
    const config = loadModelConfig(dir);
    const knobs = planDsaKnobs({
      hostPoolBytes: hostPoolBytes ?? undefined,
      blockSize: 16,
      mla: config.mla!,
      numLayers: config.numHiddenLayers,
      architecture: config.architecture,
      maxNumBatchedTokens,
    });
    const p: PlanInput = {
      model: config,
      kvBudgetBytes,
      contextTokens,
      blockSize: 16,
      kvElementBytes: 4,
      hisparse: knobs,
    };
    return { knobs, h: planHiSparse(p) };
  };

  it("the planned pools and requests at once are the engine's, with HiSparse on", async (t) => {
    if (src === null) return t.skip("tiny-glm5-dsa-pv not found");
    const { knobs, h } = plan();
    assert.deepEqual(
      [knobs.topk, knobs.deviceBufferTokens, knobs.sinkTokens, knobs.windowTokens, knobs.denseLayers],
      [32, 64, 0, 16, []],
    );
    assert.deepEqual([h.mainBytesPerBlock, h.deviceBytesPerHostBlock], [BLOCK, PER_PAGE]);
    // By the GPU pool: one prefill on 13 blocks, the others on 6 (tail page + 4 hot blocks + the
    // page a decode step may open): floor((25 − 13) / 6) + 1 = 3; by the host pool floor(80 / 13) = 6.
    assert.deepEqual(
      [
        h.pagesPerRequest,
        h.devicePagesPerRequest,
        h.given.numGpuBlocks,
        h.given.maxByDevice,
        h.given.maxByHost,
      ],
      [13, 6, 25, 3, 6],
    );
    const run = await runOn(
      ["--host-pool-gib", String((HOST_PAGES * BLOCK) / 2 ** 30)],
      256,
      h.given.maxConcurrent + 2,
    );
    assert.equal(run.numGpuBlocks, h.given.numGpuBlocks, "the engine sizes the planned GPU pool");
    assert.equal(run.numHostBlocks, h.given.numHostBlocks);
    assert.equal(run.peak, h.given.maxConcurrent, "the planned number of requests runs at once, no more");
    assert.equal(run.preemptions, 0);
  });

  it("without --host-pool-gib: the host pool that holds the most requests of --max-model-len, as planned", async (t) => {
    if (src === null) return t.skip("tiny-glm5-dsa-pv not found");
    const { h } = plan(null);
    // N = floor((BUDGET − (13 − 6) × 20,480) / (13 × 8,192 + 6 × 20,480)) = floor(1,024,000 / 229,376) = 4
    // requests: 4 × 13 = 52 host pages, floor((BUDGET − 52 × 8,192) / 20,480) = 36 GPU blocks (the
    // device ratio: 31 blocks and 62 pages, also 4 at this size; GLM-5 at 128K: 1.8x dense vs 4.8x).
    assert.deepEqual(
      [h.best.numHostBlocks, h.given.numHostBlocks, h.given.numGpuBlocks, h.given.maxConcurrent],
      [52, 52, 36, 4],
    );
    assert.equal(h.givenSizedBy, "max_model_len");
    assert.equal(plan().h.givenSizedBy, "given");
    // A budget that holds no request of the context: the engine falls back to the device ratio.
    assert.equal(plan(null, 10 * BLOCK).h.givenSizedBy, "device_ratio");
    const run = await runOn([], PROMPT + MAX_TOKENS, h.given.maxConcurrent + 2);
    assert.deepEqual([run.numGpuBlocks, run.numHostBlocks], [h.given.numGpuBlocks, h.given.numHostBlocks]);
    assert.equal(run.peak, h.given.maxConcurrent);
    assert.equal(run.preemptions, 0);
  });

  it("a streaming prefill (16-token chunks): a request longer than the GPU pool runs, as many at once as planned", async (t) => {
    if (src === null) return t.skip("tiny-glm5-dsa-pv not found");
    // 600 + 8 tokens = 38 pages > the 25-block pool. A prefill of 16-token chunks holds at most
    // 1 window page + 2 × (1 + 1) chunk pages + 4 hot blocks = 9 blocks, so by the GPU pool
    // floor((25 − 9) / 6) + 1 = 3, by the host pool floor(80 / 38) = 2; without streaming: refused.
    const tokens = { contextTokens: 600 + MAX_TOKENS, maxNumBatchedTokens: 16 };
    const { h } = plan(HOST_PAGES * BLOCK, BUDGET, tokens);
    assert.deepEqual(
      [
        h.pagesPerRequest,
        h.streamingPrefillBlocks,
        h.given.maxByDevice,
        h.given.maxByHost,
        h.given.maxConcurrent,
      ],
      [38, 9, 3, 2, 2],
    );
    assert.equal(
      plan(HOST_PAGES * BLOCK, BUDGET, { ...tokens, maxNumBatchedTokens: 4096 }).h.given.maxConcurrent,
      0,
    );
    const run = await runOn(
      ["--host-pool-gib", String((HOST_PAGES * BLOCK) / 2 ** 30)],
      tokens.contextTokens,
      h.given.maxConcurrent + 2,
      { prompt: 600, maxNumBatchedTokens: 16 },
    );
    assert.equal(run.numGpuBlocks, h.given.numGpuBlocks);
    assert.equal(run.peak, h.given.maxConcurrent, "the planned number of requests runs at once, no more");
    assert.equal(run.preemptions, 0);
  });

  it("a streaming prefill bounded by the GPU pool: as many at once as planned", async (t) => {
    if (src === null) return t.skip("tiny-glm5-dsa-pv not found");
    // 20 GPU blocks and 120 host pages: by the GPU pool floor((20 − 9) / 6) + 1 = 2, by the host
    // pool floor(120 / 38) = 3.
    const budget = 20 * BLOCK + 120 * PER_PAGE;
    const tokens = { contextTokens: 600 + MAX_TOKENS, maxNumBatchedTokens: 16 };
    const { h } = plan(120 * BLOCK, budget, tokens);
    assert.deepEqual(
      [h.given.numGpuBlocks, h.given.maxByDevice, h.given.maxByHost, h.given.maxConcurrent],
      [20, 2, 3, 2],
    );
    const run = await runOn(["--host-pool-gib", String((120 * BLOCK) / 2 ** 30)], tokens.contextTokens, 4, {
      prompt: 600,
      maxNumBatchedTokens: 16,
      budget,
    });
    assert.deepEqual([run.numGpuBlocks, run.numHostBlocks], [20, 120]);
    assert.equal(run.peak, 2, "the planned number of requests runs at once, no more");
    assert.equal(run.preemptions, 0);
  });

  /**
   * `n` requests of `prompt` tokens (default PROMPT) through a CPU engine with HiSparse on and the
   * extra flags (chunked prefill of `maxNumBatchedTokens` when given, else whole prefills); what it sized and ran.
   */
  const runOn = async (
    argv: string[],
    maxModelLen: number,
    n: number,
    o: { prompt?: number; maxNumBatchedTokens?: number; budget?: number } = {},
  ) => {
    const args = variantEngineArgs(
      {
        ...makeEngineArgs({
          model: dir,
          device: "cpu",
          loadFormat: "dummy",
          kvCacheDtype: "f32",
          blockSize: 16,
          maxModelLen,
          maxNumBatchedTokens: o.maxNumBatchedTokens ?? 4096,
          enableChunkedPrefill: o.maxNumBatchedTokens !== undefined,
        }),
        cpuKvCacheGib: o.budget ?? BUDGET,
      },
      { name: "on", argv: ["--enable-hybrid-sparse", "on", ...argv] },
    );
    const engine = await LLMEngine.create({ ...args, inprocWorker: true });
    try {
      for (let i = 0; i < n; i++)
        engine.addRequest(
          `r${i}`,
          { promptTokenIds: Array.from({ length: o.prompt ?? PROMPT }, (_, j) => 1 + ((i * 7 + j) % 300)) },
          makeSamplingParams({ maxTokens: MAX_TOKENS, ignoreEos: true, temperature: 0 }),
        );
      let peak = 0;
      while (engine.hasPendingWork()) {
        await engine.step();
        peak = Math.max(peak, engine.scheduler.numRunning);
      }
      return {
        numGpuBlocks: engine.info.numGpuBlocks,
        numHostBlocks: engine.info.hisparse!.numHostBlocks,
        peak,
        preemptions: engine.scheduler.makeStats().numPreemptions,
      };
    } finally {
      await engine.shutdown();
    }
  };

  it("Quest's keys are refused as the engine refuses them", async (t) => {
    if (src === null) return t.skip("tiny-glm5-dsa-pv not found");
    const config = loadModelConfig(dir);
    assert.throws(
      () =>
        planDsaKnobs({
          json: '{"window_tokens": 64}',
          blockSize: 16,
          mla: config.mla!,
          numLayers: config.numHiddenLayers,
          architecture: config.architecture,
          maxNumBatchedTokens: 4096,
        }),
      (e: unknown) => e instanceof PlanError && /window_tokens does not apply to DSA models/.test(e.message),
    );
  });
});
