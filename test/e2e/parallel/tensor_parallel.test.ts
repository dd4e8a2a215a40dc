/**
 * Tensor parallelism on the CPU backend (one worker thread per rank, the shared-memory
 * collectives; engine/tp_executor.ts): the Megatron shards of TP=2 and TP=4 must give the greedy
 * tokens of TP=1 (fp32; a rank's partial sums differ from the whole matmul only in rounding),
 * with HiSparse off and `auto` under forced pressure; TP=1 through the collectives path
 * (`distributedExecutorBackend: "threads"`) must equal the single worker. Shapes that do not
 * divide, and families without a sharding rule (MoE, MLA), are refused with the reason.
 */
import assert from "node:assert/strict";
import { before, it } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import type { LLMOptions } from "../../../src/engine/llm.js";
import { LLM } from "../../../src/engine/llm.js";
import { type HiSparseRunResult, runPrompts } from "../../helpers/hisparse_run.js";
import { describeIfFound, loadFixture, type RefModel, refModelDir } from "../../helpers/reference.js";

/** Prompts and output tokens per model (ref-base is 4x the compute of ref-small: fewer tokens; three prompts overfill the 16-block pool). */
const WORK: Record<"ref-small" | "ref-base", { prompts: number; maxTokens: number }> = {
  "ref-small": { prompts: 3, maxTokens: 24 },
  "ref-base": { prompts: 3, maxTokens: 16 },
};

function run(
  dir: string,
  prompts: number[][],
  maxTokens: number,
  opts: Partial<LLMOptions>,
): Promise<HiSparseRunResult> {
  const params = { temperature: 0, maxTokens, ignoreEos: true };
  return runPrompts({ model: dir, device: "cpu", maxModelLen: 64, blockSize: 4, ...opts }, prompts, params);
}

/**
 * HiSparse `auto`, topk >= context (48 >= 13 + 24), and a 16-block pool (one max_model_len
 * request; one sparse request's minimum: a sink page, 2 window pages, 12 hot pages, a new page):
 * the policy acts (or preempts) under pressure, on every rank alike.
 */
const AUTO_UNDER_PRESSURE: Partial<LLMOptions> = {
  numGpuBlocksOverride: 16,
  extensions: {
    hisparse: resolveHiSparseConfig({
      mode: "auto",
      topk: 48,
      deviceBufferTokens: 48,
      sinkTokens: 4,
      windowTokens: 8,
    } satisfies Partial<HiSparseConfig>),
  },
};

/** The sizes each reference model can be split into (ref-base: 6 heads, so not 4). */
const SIZES: Record<"ref-small" | "ref-base", number[]> = { "ref-small": [2, 4], "ref-base": [2] };

for (const name of ["ref-small", "ref-base"] as const) {
  const dir = refModelDir(name as RefModel);
  describeIfFound(`tensor parallelism on CPU: ${name}`, name, dir, () => {
    const { maxTokens } = WORK[name];
    const prompts = loadFixture(name)
      .slice(0, WORK[name].prompts)
      .map((c) => c.input_ids);
    let dense: HiSparseRunResult;
    let autoTp1: HiSparseRunResult;
    before(async () => {
      dense = await run(dir!, prompts, maxTokens, {});
      autoTp1 = await run(dir!, prompts, maxTokens, AUTO_UNDER_PRESSURE);
    });

    if (name === "ref-small")
      it("TP=1 through the collectives path (one rank, threads executor) equals the single worker", async () => {
        const r = await run(dir!, prompts, maxTokens, { distributedExecutorBackend: "threads" });
        assert.deepEqual(r.tokens, dense.tokens);
      });

    for (const tp of SIZES[name]) {
      it(`TP=${tp}, HiSparse off: greedy tokens equal TP=1`, async () => {
        const r = await run(dir!, prompts, maxTokens, { tensorParallelSize: tp });
        assert.deepEqual(r.tokens, dense.tokens);
      });

      it(`TP=${tp}, HiSparse auto under forced pressure (16 blocks per rank): greedy tokens equal TP=1's`, async () => {
        const r = await run(dir!, prompts, maxTokens, { ...AUTO_UNDER_PRESSURE, tensorParallelSize: tp });
        assert.ok(r.numPreemptions > 0 || r.stats!.spilledPagesTotal > 0, "the pool was under pressure");
        assert.equal(r.numPreemptions, autoTp1.numPreemptions);
        assert.deepEqual(r.tokens, autoTp1.tokens);
        assert.deepEqual(r.tokens, dense.tokens);
      });
    }
  });
}

/** Loads `model` with the options and returns the one-sentence error it is refused with. */
async function refusal(opts: Partial<LLMOptions>): Promise<Error> {
  const llm = new LLM({ device: "cpu", maxModelLen: 64, ...opts });
  try {
    await llm.getEngine();
  } catch (e) {
    return e as Error;
  } finally {
    await llm.shutdown();
  }
  throw new Error("the engine was created");
}

const refBase = refModelDir("ref-base");
it("ref-base at TP=4 is refused: 6 attention heads do not split over 4 ranks", {
  skip: refBase === null,
}, async () => {
  const e = await refusal({ model: refBase!, tensorParallelSize: 4 });
  assert.equal(e.name, "ConfigError");
  assert.match(e.message, /6 attention heads cannot be split over 4 ranks/);
});

it("ref-small at TP=8 is refused: 4 attention heads and 2 KV heads cannot be split over 8 ranks", async () => {
  const e = await refusal({ tensorParallelSize: 8 });
  assert.equal(e.name, "ConfigError");
  assert.match(e.message, /4 attention heads cannot be split over 8 ranks/);
});

it("an MLA model (DeepSeek-V3 family) at TP=2 is refused through its family traits", async () => {
  const dir = refModelDir("tiny-deepseek-v3-pv");
  assert.ok(dir !== null, "test/fixtures/models/tiny-deepseek-v3-pv is in the repository");
  const e = await refusal({ model: dir, tensorParallelSize: 2 });
  assert.equal(e.name, "ConfigError");
  assert.match(e.message, /tensor parallelism of multi-head latent attention .* is not implemented yet/);
});

const moe = refModelDir("tiny-qwen3-moe");
it("a MoE model (Qwen3-MoE) at TP=2 is refused through its family traits", {
  skip: moe === null,
}, async () => {
  const e = await refusal({ model: moe!, tensorParallelSize: 2 });
  assert.equal(e.name, "ConfigError");
  assert.match(e.message, /tensor parallelism of mixture-of-experts layers is not implemented yet/);
});

it("bad settings are refused before anything loads", async () => {
  for (const [opts, re] of [
    [{ tensorParallelSize: 0 }, /--tensor-parallel-size must be an integer >= 1, got 0/],
    [
      { tensorParallelSize: 2, distributedExecutorBackend: "uni" },
      /needs --distributed-executor-backend threads/,
    ],
    [{ tensorParallelSize: 2, inprocWorker: true }, /the in-process worker runs one rank/],
  ] as const) {
    const e = await refusal(opts as Partial<LLMOptions>);
    assert.equal(e.name, "ConfigError");
    assert.match(e.message, re);
  }
});
