/**
 * The trained reference model ref-small (models/ref-small, bf16) on the CPU backend against
 * HF transformers' fp32 outputs (shared/fixtures/hf-ref-small.json, or $HISPARSE_FIXTURES):
 * last-position logits of each prompt within 2e-3 and the 48 greedy tokens identical.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { DensePagedAttention } from "../../../../src/attention/backend.js";
import { argmaxRow, CpuBackend } from "../../../../src/backends/cpu/index.js";
import { loadModelConfig } from "../../../../src/config/model_config.js";
import { LlamaForCausalLM } from "../../../../src/models/llama.js";
import { buildMetadata, maxAbsDiff } from "./helpers.js";
import { readSafetensorsDir } from "./safetensors_min.js";

const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const modelDir = `${repoRoot}models/ref-small`;
/** The shared fixtures folder sits beside the checkout (/work/main) or two levels up (worktrees). */
const fixturePath =
  [process.env.HISPARSE_FIXTURES ?? "", `${repoRoot}../shared/fixtures`, `${repoRoot}../../shared/fixtures`]
    .filter((d) => d !== "")
    .map((d) => `${d}/hf-ref-small.json`)
    .find((p) => existsSync(p)) ?? "";

interface Fixture {
  cases: { prompt: string; input_ids: number[]; greedy_ids: number[]; last_logits: number[] }[];
}

const BLOCK_SIZE = 16;
const MAX_POS = 128;

describe("ref-small vs HF transformers (fp32)", {
  skip: !existsSync(fixturePath) && "fixture not found",
}, () => {
  const backend = new CpuBackend();
  after(() => backend.dispose());
  const cfg = loadModelConfig(modelDir);
  const model = LlamaForCausalLM.load(cfg, readSafetensorsDir(modelDir), backend, MAX_POS);
  const attention = new DensePagedAttention(backend, model.layout, BLOCK_SIZE);
  const numBlocks = MAX_POS / BLOCK_SIZE;
  const kvCaches = backend.allocateKvCache({
    numLayers: cfg.numHiddenLayers,
    numBlocks,
    blockSize: BLOCK_SIZE,
    numKvHeads: cfg.numKeyValueHeads,
    headDim: cfg.headDim,
    dtype: "f32",
  });
  // Blocks in reverse order, so the pages are not contiguous in token order.
  const blockIds = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);
  const fixture = existsSync(fixturePath)
    ? (JSON.parse(readFileSync(fixturePath, "utf8")) as Fixture)
    : { cases: [] };

  /** Runs `ids` after `numComputed` cached tokens; returns the last position's logits. */
  const run = (ids: number[], numComputed: number): Float32Array => {
    const { meta, positions } = buildMetadata(
      backend,
      [{ numComputed, numNew: ids.length, blockIds }],
      BLOCK_SIZE,
    );
    const input = backend.stage(Int32Array.from(ids), [ids.length], "i32");
    const idx = backend.stage(Int32Array.from([ids.length - 1]), [1], "i32");
    const logits = backend.toHost(
      model.forward(input, positions, { meta, attention, kvCaches }, idx),
    ) as Float32Array;
    backend.resetWorkspace();
    return logits;
  };

  for (const c of fixture.cases) {
    it(`${JSON.stringify(c.prompt)}: logits within 2e-3, 48 greedy tokens identical`, () => {
      let logits = run(c.input_ids, 0);
      const d = maxAbsDiff(logits, c.last_logits);
      assert.ok(d <= 2e-3, `last-position logits differ by ${d}`);
      const out: number[] = [];
      let len = c.input_ids.length;
      while (out.length < c.greedy_ids.length) {
        const next = argmaxRow(logits, 0, cfg.vocabSize);
        out.push(next);
        if (out.length === c.greedy_ids.length) break;
        logits = run([next], len);
        len++;
      }
      assert.deepEqual(out, c.greedy_ids);
    });
  }
});
