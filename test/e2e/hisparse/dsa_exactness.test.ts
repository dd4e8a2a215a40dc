/**
 * Hybrid HiSparse exactness for DSA models (issue 15) on the CPU backend, through the whole
 * engine (scheduler, HybridPolicy, worker thread): a DSA model attends only to its indexer's
 * top-k rows, so wherever those rows live (device pool, hot buffer, host tier) the greedy tokens
 * must equal the dense-resident engine's. The prompts (45, 90 and 130 tokens) are longer than
 * index_topk (32: selections drop rows) and than the hot buffer (2 x 32 rows: rows are evicted
 * and recalled again); 4-token pages give each request up to 37 pages.
 * - `on` (residency host): every page but the tail leaves the device after the prefill, every
 *   selected row of an older page comes through the hot buffer;
 * - `auto` under forced pressure (a pool too small for the three requests): the policy spills
 *   pages of decoding requests instead of preempting them; with a pool smaller than the longest
 *   prompt, that prompt's prefill spills its own pages and reads them from the host tier
 *   (streaming prefill, SpilledRows);
 * - GLM-5 with "shared" indexer layers (dummy weights): shared layers reuse their full layer's
 *   resolution (one plan, one copy pass per layer).
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import { LLM, type LLMOptions } from "../../../src/engine/llm.js";
import { type HiSparseRunResult, runPrompts } from "../../helpers/hisparse_run.js";
import { describeIfFound, type RefModel, refModelDir } from "../../helpers/reference.js";

const MAX_TOKENS = 12;
const PARAMS = { temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true };

/** Deterministic prompt of n token ids in [1, 383) (the pruned vocabulary). */
const prompt = (n: number, seed: number): number[] =>
  Array.from({ length: n }, (_, j) => 1 + ((seed * 7919 + j * 104729) % 382));
const PROMPTS = [prompt(130, 1), prompt(45, 2), prompt(90, 3)];

function run(model: string, opts: Partial<LLMOptions>): Promise<HiSparseRunResult> {
  return runPrompts({ model, device: "cpu", maxModelLen: 160, blockSize: 4, ...opts }, PROMPTS, PARAMS);
}

const hisparse = (c: Partial<HiSparseConfig>) => ({ hisparse: resolveHiSparseConfig(c) });

/** The checks every model gets: on (host) and auto under pressure equal the dense engine. */
function exactnessCases(model: () => string, opts: Partial<LLMOptions> = {}): void {
  let dense: HiSparseRunResult;
  before(async () => {
    dense = await run(model(), opts);
  });

  it("on, residency host: rows recalled through the hot buffer, greedy tokens equal dense", async () => {
    const r = await run(model(), {
      ...opts,
      numGpuBlocksOverride: 256,
      extensions: hisparse({ mode: "on", minSparseTokens: 0 }),
    });
    assert.deepEqual(r.tokens, dense.tokens);
    const st = r.stats!;
    assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0 && st.hitsTotal > 0, JSON.stringify(st));
    assert.equal(st.sparseDecodesTotal, PROMPTS.length * (MAX_TOKENS - 1), JSON.stringify(st));
    assert.ok(st.hostToDeviceBytesTotal > 0);
    assert.equal(r.numPreemptions, 0);
  });

  it("on, residency hybrid: every row resolves to its own resident page, nothing copied, greedy tokens equal dense", async () => {
    const r = await run(model(), {
      ...opts,
      numGpuBlocksOverride: 256,
      extensions: hisparse({ mode: "on", residency: "hybrid", minSparseTokens: 0 }),
    });
    assert.deepEqual(r.tokens, dense.tokens);
    const st = r.stats!;
    assert.equal(st.sparseDecodesTotal, PROMPTS.length * (MAX_TOKENS - 1), JSON.stringify(st));
    assert.deepEqual([st.spilledPagesTotal, st.hitsTotal, st.missesTotal], [0, 0, 0]);
  });

  it("auto under forced pressure (a 56-block pool): pages spill instead of preempting, greedy tokens equal dense", async () => {
    const r = await run(model(), {
      ...opts,
      numGpuBlocksOverride: 56,
      extensions: hisparse({ mode: "auto" }),
    });
    assert.deepEqual(r.tokens, dense.tokens);
    const st = r.stats!;
    assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0, JSON.stringify(st));
  });

  it("auto, streaming prefill (a 28-block pool, 16-token chunks): the 130-token prompt (33 pages) prefills by spilling its own pages, greedy tokens equal dense", async () => {
    // A streaming prefill holds at most 2 chunks of 5 pages and the 16-block hot buffer: 26 <= 28.
    // The longest prompt needs 33 pages, more than the pool: without reading host pages in its
    // prefill it would be refused at admission.
    const r = await run(model(), {
      ...opts,
      numGpuBlocksOverride: 28,
      maxNumBatchedTokens: 16,
      extensions: hisparse({ mode: "auto" }),
    });
    assert.deepEqual(r.tokens, dense.tokens);
    const st = r.stats!;
    assert.ok(st.spilledPagesTotal > 0 && st.missesTotal > 0, JSON.stringify(st));
    assert.equal(r.numPreemptions, 0);
  });
}

for (const name of ["tiny-glm5-dsa-pv", "tiny-deepseek-v32-pv"] as RefModel[]) {
  const dir = refModelDir(name);
  describeIfFound(`DSA HiSparse exactness: ${name}`, name, dir, () => exactnessCases(() => dir!));
}

describe("DSA HiSparse exactness: GLM-5 with shared indexer layers (dummy weights)", () => {
  const src = refModelDir("tiny-glm5-dsa-pv");
  let path = "";
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-dsa-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  if (src !== null) {
    const cfg = JSON.parse(readFileSync(join(src, "config.json"), "utf8")) as Record<string, unknown>;
    path = tmp;
    writeFileSync(
      join(tmp, "config.json"),
      JSON.stringify({ ...cfg, indexer_types: ["full", "shared", "full", "shared"] }),
    );
  }
  exactnessCases(() => path, { loadFormat: "dummy" });
});

describe("HiSparse refusals for MLA models", () => {
  /** The start-up error of an engine with these HiSparse settings. */
  async function startError(model: string, c: Partial<HiSparseConfig>): Promise<Error> {
    const llm = new LLM({ model, device: "cpu", maxModelLen: 160, blockSize: 4, extensions: hisparse(c) });
    try {
      await llm.getEngine();
    } catch (e) {
      return e as Error;
    } finally {
      await llm.shutdown();
    }
    throw new Error("the engine started");
  }

  it("MLA without a DSA indexer (DeepSeek-V3) is refused with the reason", async (t) => {
    const dir = refModelDir("tiny-deepseek-v3-pv");
    if (dir === null) return t.skip("tiny-deepseek-v3-pv not found");
    const e = await startError(dir, { mode: "auto" });
    assert.match(e.message, /only with a DSA indexer .*DeepseekV3ForCausalLM has none/);
  });

  it("a DSA model refuses Quest's sink_tokens and window_tokens, naming both", async (t) => {
    const dir = refModelDir("tiny-glm5-dsa-pv");
    if (dir === null) return t.skip("tiny-glm5-dsa-pv not found");
    const e = await startError(dir, { mode: "on", sinkTokens: 4, windowTokens: 8 });
    assert.match(e.message, /sink_tokens does not apply to DSA models/);
    assert.match(e.message, /window_tokens does not apply to DSA models/);
  });

  it("a DSA model given Quest's keys and an explicit topk gets the DSA refusals, not Quest's sink+window check", async (t) => {
    const dir = refModelDir("tiny-glm5-dsa-pv");
    if (dir === null) return t.skip("tiny-glm5-dsa-pv not found");
    // topk = the model's index_topk (32): sinks + window (16 + 32) exceed it, which only Quest checks.
    const e = await startError(dir, { mode: "on", topk: 32, sinkTokens: 16, windowTokens: 32 });
    assert.match(e.message, /sink_tokens does not apply to DSA models/);
    assert.match(e.message, /window_tokens does not apply to DSA models/);
    assert.doesNotMatch(e.message, /must be <= topk/);
  });
});
