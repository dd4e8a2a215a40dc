/**
 * The plan against what the engine really does (CPU backend, a tiny dummy-weight Llama): the
 * engine sizes its KV cache to the planned number of blocks, and admits exactly the planned
 * number of requests of the planned context at once, with no preemption while they run.
 * The HiSparse half runs once the HiSparse flags exist in this checkout (branch wip/hisparse).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Command } from "commander";
import { addEngineFlags } from "../../../src/cli/engine_flags.js";
import { variantEngineArgs } from "../../../src/cli/eval.js";
import { type EngineArgs, makeEngineArgs } from "../../../src/config/engine_args.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { LLMEngine } from "../../../src/engine/llm_engine.js";
import { planHiSparseKnobs } from "../../../src/plan/hisparse_knobs.js";
import { type PlanInput, planDense, planHiSparse } from "../../../src/plan/plan.js";

/** 4 layers, 1 KV head of 32: 2 × 4 × 1 × 32 × 4 B = 1 KiB of f32 KV (the CPU backend's) per token, 16 KiB per block. */
const TINY = {
  architectures: ["LlamaForCausalLM"],
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 4,
  num_attention_heads: 2,
  num_key_value_heads: 1,
  head_dim: 32,
  vocab_size: 256,
  max_position_embeddings: 1024,
  rms_norm_eps: 1e-5,
  torch_dtype: "float32",
};

const hasHiSparseFlags = addEngineFlags(new Command()).options.some(
  (o) => o.long === "--enable-hybrid-sparse",
);

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

  const base = (kvBudgetBytes: number) =>
    makeEngineArgs({
      model: dir,
      device: "cpu",
      loadFormat: "dummy",
      kvCacheDtype: "f32",
      blockSize: 16,
      cpuKvCacheBytes: kvBudgetBytes,
      maxModelLen: 1024,
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

  for (const [budget, prompt, maxTokens] of [
    // 30 blocks + 5000 B; 99 + 2 tokens = 7 blocks each: 4 at once (28 of 30 blocks).
    [30 * 16384 + 5000, 99, 2],
    // 128 blocks; 290 + 10 tokens = 19 blocks each: 6 at once.
    [2 ** 21, 290, 10],
  ] as const) {
    it(`dense: ${budget} B, ${prompt} + ${maxTokens} tokens per request`, async () => {
      const d = planDense(planFor(budget, prompt + maxTokens));
      const r = await run(base(budget), d.maxConcurrent + 2, prompt, maxTokens);
      assert.equal(r.numGpuBlocks, d.numGpuBlocks, "the engine sizes the planned number of blocks");
      assert.equal(r.peak, d.maxConcurrent, "the planned number of requests runs at once, no more");
      assert.equal(r.preemptions, 0);
      assert.equal(r.finished, d.maxConcurrent + 2);
    });
  }

  const skip = !hasHiSparseFlags && "the HiSparse flags are not in this checkout yet (branch wip/hisparse)";
  it("HiSparse on: the planned GPU pool, and the planned number of long requests at once", {
    skip,
  }, async () => {
    // topk 32, hot buffer 32, sink 16, window 16: ceil(64 / 16) + 1 = 5 GPU blocks per request;
    // layer 0 dense, layers 1-3 sparse. A host pool for 32 requests of 39 pages (600 + 24
    // tokens) = 1248 pages, whose dense layer and digests take 1248 × 4,864 B of the 8 MiB:
    // GPU pool floor((8 MiB − 6,070,272 B) / 12,288 B) = 188 blocks, 37 requests by the GPU,
    // 32 by the host pool. Dense: 512 blocks / 39 = 13.
    const knobs =
      '{"topk": 32, "device_buffer_tokens": 32, "sink_tokens": 16, "window_tokens": 16, "dense_layers": [0]}';
    const budget = 8 * 2 ** 20;
    const [prompt, maxTokens] = [600, 24];
    const p = planFor(budget, prompt + maxTokens);
    p.hisparse = planHiSparseKnobs({ json: knobs });
    const costs = planHiSparse(p);
    const hostPoolBytes = 32 * costs.pagesPerRequest * costs.hostBytesPerBlock;
    p.hisparse = planHiSparseKnobs({ json: knobs, hostPoolBytes });
    const h = planHiSparse(p);
    assert.deepEqual([h.given.numGpuBlocks, h.given.maxByDevice, h.given.maxByHost], [188, 37, 32]);
    assert.equal(planDense(p).maxConcurrent, 13);
    const flags = [
      "--enable-hybrid-sparse",
      "on",
      "--hisparse-config",
      knobs,
      "--host-pool-gib",
      String(hostPoolBytes / 2 ** 30),
    ];
    const args = variantEngineArgs({ ...base(budget), cpuKvCacheGib: budget }, { name: "on", argv: flags });
    const n = h.given.maxConcurrent;
    const r = await run({ ...args, inprocWorker: true }, n, prompt, maxTokens);
    assert.equal(r.numGpuBlocks, h.given.numGpuBlocks, "the engine sizes the planned GPU pool");
    assert.equal(r.peak, n, "the planned number of requests runs at once");
    assert.equal(r.preemptions, 0);
    assert.equal(r.finished, n);
  });
});
