/**
 * HiSparse (Quest) on a mixture-of-experts model, CUDA (GPU machine; issue 14: "HiSparse works
 * unchanged on these models: attention is GQA"). tiny-qwen3-moe (GQA + q/k norm, 8 experts,
 * top-2) with `topk` covering the whole context: `on` (every request host-resident after the
 * prefill, pages recalled through the hot buffer) must give the dense engine's greedy tokens, and
 * its CUDA-graph decode must equal the eager one. Nothing MoE-specific sits in the HiSparse path;
 * the MoE layers only see the attention output. Skipped without the checkpoint
 * ($HISPARSE_MODELS/tiny-qwen3-moe or ../shared/models).
 */
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../src/config/hisparse_config.js";
import type { LLMOptions } from "../../src/engine/llm.js";
import { type HiSparseRunResult, runPrompts } from "../helpers/hisparse_run.js";
import { loadFixture, refModelDir } from "../helpers/reference.js";
import { gpuSkip } from "./helpers.js";

const MODEL = "tiny-qwen3-moe";
/** The fixture's 7- and 40-token prompts + 24 outputs: at most 64 tokens, within topk = 64. */
const PARAMS = { temperature: 0, maxTokens: 24, ignoreEos: true };
const BLOCK = 8;
const SPARSE: Partial<HiSparseConfig> = { topk: 64, deviceBufferTokens: 64, sinkTokens: 8, windowTokens: 16 };

function skip(): string | false {
  const g = gpuSkip();
  if (g !== false) return g;
  if (!loadAddon().buildInfo.hasHiSparse) return "the addon was built without the HiSparse kernels";
  return refModelDir(MODEL) === null ? `${MODEL} not found` : false;
}

describe(`HiSparse exactness on CUDA: ${MODEL} (MoE)`, { skip: skip() }, () => {
  const dir = refModelDir(MODEL)!;
  const prompts = loadFixture(MODEL)
    .map((c) => c.input_ids)
    .filter((p) => p.length <= 40);
  const run = (opts: Partial<LLMOptions>): Promise<HiSparseRunResult> =>
    runPrompts(
      {
        model: dir,
        device: "cuda",
        maxModelLen: 128,
        blockSize: BLOCK,
        maxNumSeqs: 8,
        gpuMemoryUtilization: 0.3,
        numGpuBlocksOverride: 256,
        ...opts,
      },
      prompts,
      PARAMS,
    );
  const on = {
    extensions: { hisparse: resolveHiSparseConfig({ ...SPARSE, mode: "on", minSparseTokens: 0 }) },
  };
  let dense: HiSparseRunResult;
  before(async () => {
    dense = await run({});
  });

  it("on, topk >= context: host-resident pages recalled through the hot buffer, greedy tokens equal off", async () => {
    assert.equal(prompts.length, 2);
    const r = await run(on);
    assert.deepEqual(r.tokens, dense.tokens);
    const st = r.stats!;
    assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0, JSON.stringify(st));
  });

  it("on with --enforce-eager equals on with CUDA graphs", async () => {
    const graphs = await run(on);
    const eager = await run({ ...on, enforceEager: true });
    assert.deepEqual(eager.tokens, graphs.tokens);
  });
});
