/**
 * Capacity: a device pool sized for about two long requests serves eight at once with
 * `--enable-hybrid-sparse auto` (pages of decoding requests spill to the host tier instead of
 * preempting), while the dense engine (`off`) must preempt on the same run. A tiny Llama config
 * with `--load-format dummy` weights keeps it fast (exactness does not depend on the weights).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { LLM } from "../../../src/engine/llm.js";

/** 3 layers (layer 0 dense), 4 q heads, 2 kv heads of 16 dims, vocabulary 512. */
const TINY_CONFIG = {
  architectures: ["LlamaForCausalLM"],
  hidden_size: 64,
  intermediate_size: 128,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  num_hidden_layers: 3,
  vocab_size: 512,
  max_position_embeddings: 1024,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  hidden_act: "silu",
  tie_word_embeddings: true,
  eos_token_id: 0,
};

const NUM_REQUESTS = 8;
/** 200 prompt tokens + 16 outputs: 215 KV tokens = 54 pages of 4 tokens each. */
const PROMPT_LEN = 200;
const MAX_TOKENS = 16;
/** Fewer than two requests' 108 pages: two prefills fit, their decodes do not. */
const NUM_GPU_BLOCKS = 100;

/** Deterministic prompt token ids in [1, 512). */
function prompt(i: number): number[] {
  return Array.from({ length: PROMPT_LEN }, (_, j) => 1 + ((i * 7919 + j * 104729) % 511));
}

interface CapacityRun {
  numPreemptions: number;
  maxRunning: number;
  outputs: number[][];
  spilled: number;
  freeBlocksAfter: number;
  hostUsedAfter: number;
}

async function serve(modelDir: string, mode: "auto" | "off"): Promise<CapacityRun> {
  const extensions =
    mode === "off"
      ? {}
      : {
          hisparse: resolveHiSparseConfig({
            mode,
            topk: 12,
            deviceBufferTokens: 12,
            sinkTokens: 4,
            windowTokens: 4,
            denseLayers: [0],
            hostPoolBytes: 1 << 20,
          }),
        };
  const llm = new LLM({
    model: modelDir,
    loadFormat: "dummy",
    device: "cpu",
    blockSize: 4,
    // The whole pool (100 blocks of 4 tokens): one max_model_len request must fit, else the
    // engine refuses to start.
    maxModelLen: NUM_GPU_BLOCKS * 4,
    numGpuBlocksOverride: NUM_GPU_BLOCKS,
    extensions,
  });
  try {
    const engine = await llm.getEngine();
    const params = makeSamplingParams({ temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true });
    for (let i = 0; i < NUM_REQUESTS; i++) engine.addRequest(`r${i}`, { promptTokenIds: prompt(i) }, params);
    const outputs = new Map<string, number[]>();
    let maxRunning = 0;
    while (engine.hasPendingWork()) {
      for (const o of await engine.step()) if (o.finished) outputs.set(o.requestId, o.outputs[0]!.tokenIds);
      maxRunning = Math.max(maxRunning, engine.stats!.scheduler.numRunningReqs);
    }
    const stats = engine.stats!;
    return {
      numPreemptions: stats.scheduler.numPreemptions,
      maxRunning,
      outputs: Array.from({ length: NUM_REQUESTS }, (_, i) => outputs.get(`r${i}`) ?? []),
      spilled: stats.hisparse?.spilledPagesTotal ?? 0,
      freeBlocksAfter: engine.scheduler.kvCacheManager.numFreeBlocks,
      hostUsedAfter: stats.hisparse?.hostPoolUsedBlocks ?? 0,
    };
  } finally {
    await llm.shutdown();
  }
}

describe("HiSparse capacity (dummy tiny model)", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "hisparse-capacity-"));
    writeFileSync(join(dir, "config.json"), JSON.stringify(TINY_CONFIG));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("auto: 8 long requests on a pool for ~2 run together, none preempted, all finish, pools freed", async () => {
    const r = await serve(dir, "auto");
    assert.equal(r.numPreemptions, 0);
    assert.equal(r.maxRunning, NUM_REQUESTS);
    for (const [i, out] of r.outputs.entries()) assert.equal(out.length, MAX_TOKENS, `request ${i}`);
    assert.ok(r.spilled > 0);
    assert.equal(r.freeBlocksAfter, NUM_GPU_BLOCKS);
    assert.equal(r.hostUsedAfter, 0);
  });

  it("off: the same run preempts", async () => {
    const r = await serve(dir, "off");
    assert.ok(r.numPreemptions > 0, `preemptions: ${r.numPreemptions}`);
    assert.ok(r.maxRunning < NUM_REQUESTS);
    for (const out of r.outputs) assert.equal(out.length, MAX_TOKENS);
    assert.equal(r.freeBlocksAfter, NUM_GPU_BLOCKS);
  });
});
