/**
 * HiSparse (Quest) on mixture-of-experts models, unchanged (their attention is GQA): on the CPU
 * backend, with `topk` covering the whole context, `auto` and `on` (every request host-resident
 * right after its prefill, pages recalled through the hot buffer) give the dense engine's
 * greedy tokens. On tiny-qwen3-moe (the three fixture prompts of 7, 40 and 300 ids, when found)
 * and on a dummy-weight Qwen3-MoE shape (always).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import type { LLMOptions } from "../../../src/engine/llm.js";
import { type HiSparseRunResult, runPrompts } from "../../helpers/hisparse_run.js";
import { loadFixture, referencedModelDir } from "../../helpers/reference.js";
import { TINY_QWEN3_MOE_CONFIG } from "../../helpers/tiny_model.js";

const MAX_TOKENS = 24;
const PARAMS = { temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true };
/** Sinks = page 0, window = the last 2 pages of 4, topk = every page of 300 + 24 tokens. */
const SPARSE: Partial<HiSparseConfig> = {
  topk: 336,
  deviceBufferTokens: 336,
  sinkTokens: 4,
  windowTokens: 8,
};
const hisparse = (c: Partial<HiSparseConfig>) => ({ hisparse: resolveHiSparseConfig({ ...SPARSE, ...c }) });

/** Seeded prompts of 7, 40 and 100 ids below 256 for the dummy model. */
const dummyPrompts = [7, 40, 100].map((n, i) =>
  Array.from({ length: n }, (_, j) => (j * 37 + i * 11 + 5) % 256),
);

const tmp = mkdtempSync(join(tmpdir(), "hisparse-moe-sparse-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
writeFileSync(join(tmp, "config.json"), JSON.stringify(TINY_QWEN3_MOE_CONFIG));

const real = referencedModelDir("tiny-qwen3-moe");
for (const [label, model, prompts] of [
  [
    "tiny-qwen3-moe",
    { model: real ?? "" },
    real === null ? [] : loadFixture("tiny-qwen3-moe").map((c) => c.input_ids),
  ],
  ["Qwen3-MoE shape, dummy weights", { model: tmp, loadFormat: "dummy", seed: 3 }, dummyPrompts],
] as const) {
  const skip = label === "tiny-qwen3-moe" && real === null && "tiny-qwen3-moe not found";
  describe(`HiSparse exactness on a MoE model: ${label}`, { skip }, () => {
    const run = (opts: Partial<LLMOptions>): Promise<HiSparseRunResult> =>
      runPrompts(
        { ...model, device: "cpu", maxModelLen: 336, blockSize: 4, ...opts } as LLMOptions,
        [...prompts],
        PARAMS,
      );
    let dense: HiSparseRunResult;
    before(async () => {
      dense = await run({});
    });

    it("auto, topk >= context: greedy tokens equal off", async () => {
      const r = await run({ numGpuBlocksOverride: 256, extensions: hisparse({ mode: "auto" }) });
      assert.deepEqual(r.tokens, dense.tokens);
      assert.equal(r.stats!.missesTotal, 0);
    });

    it("on, topk >= context: requests go host-resident after prefill and recall their pages; greedy tokens equal off", async () => {
      const r = await run({
        numGpuBlocksOverride: 256,
        extensions: hisparse({ mode: "on", minSparseTokens: 0 }),
      });
      assert.deepEqual(r.tokens, dense.tokens);
      const st = r.stats!;
      assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0, JSON.stringify(st));
    });
  });
}
