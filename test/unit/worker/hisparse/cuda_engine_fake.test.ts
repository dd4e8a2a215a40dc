/**
 * HiSparse on the CUDA backend's TS layer, end to end on the host-memory double of the addon
 * (test/unit/backends/cuda/fake_addon.ts): the real Scheduler with HiSparse scheduling, the
 * ModelRunner with CUDA graphs, LlamaForCausalLM, and the CUDA HiSparse worker side
 * (slot tables, pinned host tier, device selector / resolver, CudaHiSparseAttention). The fake
 * launches no kernels, so this checks the plumbing: which launchers run in which steps, that
 * sparse decode steps are captured in graphs (no host work inside), the graph variants, mirrors on
 * the side stream, slot bookkeeping, and the device page tables' contents. Numerics are checked
 * on the GPU machine (test/native/hisparse*.test.ts).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  abortAll,
  addRequests,
  createBenchEngine,
  isDecodeStep,
  rescheduleBenchEngine,
  setSelectionOverlap,
  step,
} from "../../../../bench/hisparse_harness.js";
import type { HostTensorData } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { makeEngineArgs } from "../../../../src/config/engine_args.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import type { ModelConfig } from "../../../../src/config/model_config.js";
import { createHiSparseScheduling } from "../../../../src/core/hisparse/hisparse_scheduling.js";
import { HISPARSE_PLAN } from "../../../../src/core/hisparse/plan.js";
import { Scheduler } from "../../../../src/core/sched/scheduler.js";
import { LlamaForCausalLM } from "../../../../src/models/llama.js";
import type { WeightSource } from "../../../../src/models/weights.js";
import { CudaHiSparseWorker } from "../../../../src/worker/hisparse/cuda/cuda_hisparse_worker.js";
import { createKVCacheSetup } from "../../../../src/worker/kv_cache_registry.js";
import { ModelRunner } from "../../../../src/worker/model_runner.js";
import { createFakeAddon } from "../../backends/cuda/fake_addon.js";
import { cacheConfig, req, schedConfig } from "../../core/helpers.js";

const BS = 4;
const MAX_MODEL_LEN = 128;

const config: ModelConfig = {
  architecture: "LlamaForCausalLM",
  family: "llama",
  hiddenSize: 64,
  intermediateSize: 96,
  numHiddenLayers: 3,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  headDim: 32,
  vocabSize: 50,
  rmsNormEps: 1e-6,
  maxPositionEmbeddings: MAX_MODEL_LEN,
  tieWordEmbeddings: true,
  attentionBias: false,
  oProjBias: false,
  mlpBias: false,
  qkNorm: false,
  rope: {
    type: "default",
    theta: 10000,
    factor: 1,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: MAX_MODEL_LEN,
  },
  dtype: "bfloat16",
  bosTokenId: null,
  eosTokenIds: [],
};

/** Zero-filled weights of the tiny model (values do not matter on the double). */
function weights(): WeightSource {
  const {
    hiddenSize: H,
    intermediateSize: I,
    headDim: D,
    numAttentionHeads: Hq,
    numKeyValueHeads: Hkv,
  } = config;
  const shapes = new Map<string, number[]>([
    ["model.embed_tokens.weight", [config.vocabSize, H]],
    ["model.norm.weight", [H]],
  ]);
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const p = `model.layers.${l}`;
    for (const [n, s] of [
      ["input_layernorm.weight", [H]],
      ["post_attention_layernorm.weight", [H]],
      ["self_attn.q_proj.weight", [Hq * D, H]],
      ["self_attn.k_proj.weight", [Hkv * D, H]],
      ["self_attn.v_proj.weight", [Hkv * D, H]],
      ["self_attn.o_proj.weight", [H, Hq * D]],
      ["mlp.gate_proj.weight", [I, H]],
      ["mlp.up_proj.weight", [I, H]],
      ["mlp.down_proj.weight", [H, I]],
    ] as const)
      shapes.set(`${p}.${n}`, [...s]);
  }
  return {
    names: [...shapes.keys()],
    has: (n) => shapes.has(n),
    get: (n): HostTensorData => {
      const shape = shapes.get(n)!;
      return { data: new Float32Array(shape.reduce((a, b) => a * b, 1)), dtype: "f32", shape };
    },
    close: () => {},
  };
}

interface RunStats {
  /** Launcher names issued while a graph was being captured. */
  captured: Set<string>;
  /** Launcher names issued eagerly. */
  eager: Map<string, number>;
  mirrorCalls: number[][];
  sideStreams: Set<number>;
  numGraphs: number;
  sparseSteps: number;
  mirroredPages: number;
  outputs: number;
  slotsAfter: number;
  /** Device host-block table row of the first request after its first sparse step. */
  tables: { host: number[]; block: number[] } | null;
}

/** Runs `prompts` to completion through the scheduler and the CUDA HiSparse worker on the fake addon. */
function run(
  hsConfig: Partial<HiSparseConfig>,
  numGpuBlocks: number,
  prompts: number[][],
  maxTokens: number,
): RunStats {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 16 << 20, stagingBytes: 1 << 16 });
  const stats: RunStats = {
    captured: new Set(),
    eager: new Map(),
    mirrorCalls: [],
    sideStreams: new Set(),
    numGraphs: 0,
    sparseSteps: 0,
    mirroredPages: 0,
    outputs: 0,
    slotsAfter: -1,
    tables: null,
  };
  for (const fn of [
    "questSelect",
    "resolve",
    "sparseDecodeAttention",
    "reshapeAndCacheDigest",
    "pagedDecodeAttention",
    "pagedPrefillAttention",
    "mirrorPages",
  ] as const) {
    const orig = fake[fn] as (...a: number[]) => void;
    (fake as unknown as Record<string, (...a: number[]) => void>)[fn] = (...a: number[]) => {
      if (be.graphs.isCapturing) stats.captured.add(fn);
      else stats.eager.set(fn, (stats.eager.get(fn) ?? 0) + 1);
      if (fn === "mirrorPages") {
        stats.mirrorCalls.push(a);
        stats.sideStreams.add(a[0]!);
      }
      orig(...a);
    };
  }
  const model = LlamaForCausalLM.load(config, weights(), be, MAX_MODEL_LEN);
  const hs = resolveHiSparseConfig({
    topk: 8,
    deviceBufferTokens: 8,
    sinkTokens: 4,
    windowTokens: 4,
    denseLayers: [0],
    ...hsConfig,
  });
  const args = makeEngineArgs({
    blockSize: BS,
    maxNumSeqs: 4,
    numGpuBlocksOverride: numGpuBlocks,
    extensions: { hisparse: hs },
  });
  // The engine's own choice of set-up: the CUDA backend and HiSparse on give setupCudaHiSparse.
  const setup = createKVCacheSetup(be, {
    model,
    args,
    kvCacheDtype: "bf16",
    deviceBudgetBytes: 0,
    maxModelLen: MAX_MODEL_LEN,
  });
  const runner = new ModelRunner(be, model, setup, {
    seed: 0,
    enforceEager: false,
    maxModelLen: MAX_MODEL_LEN,
    maxNumSeqs: 4,
  });
  assert.equal(setup.extensions.length, 1);
  const worker = setup.extensions[0];
  assert.ok(worker instanceof CudaHiSparseWorker);
  const scheduling = createHiSparseScheduling(hs, {
    blockSize: BS,
    numGpuBlocks: setup.numGpuBlocks,
    numHostBlocks: setup.info.hisparse!.numHostBlocks,
  });
  const sched = new Scheduler(
    schedConfig({ maxNumSeqs: 4, maxModelLen: MAX_MODEL_LEN, maxNumBatchedTokens: 64 }),
    cacheConfig({ blockSize: BS, numGpuBlocks: setup.numGpuBlocks }),
    scheduling.schedulerOptions,
  );
  for (const [i, p] of prompts.entries()) sched.addRequest(req(`r${i}`, p, { maxTokens, ignoreEos: true }));
  for (let i = 0; i < 500 && (sched.hasUnfinishedRequests() || sched.hasFinishedRequests()); i++) {
    const so = sched.schedule();
    const plan = so.extensions.get(HISPARSE_PLAN);
    if (plan !== undefined) {
      stats.mirroredPages += plan.mirror.blockIds.length;
      if (plan.sparseReqIds.length > 0) stats.sparseSteps++;
    }
    const mro = runner.executeModel(so); // always, as LLMEngine.step: finished ids reach the worker
    for (const out of sched.updateFromOutput(so, mro)) if (out.finishReason !== null) stats.outputs++;
    if (stats.tables === null && plan !== undefined && plan.sparseReqIds.length > 0) {
      const slot = worker.tables.slotOf(plan.sparseReqIds[0]!)!;
      const W = worker.tables.config.maxPages;
      const row = (t: typeof worker.tables.hostBlockTable) =>
        Array.from((be.toHost(t) as Int32Array).subarray(slot * W, slot * W + 8));
      stats.tables = { host: row(worker.tables.hostBlockTable), block: row(worker.tables.blockTable) };
    }
  }
  stats.numGraphs = be.graphs.size;
  stats.slotsAfter = worker.tables.numRequests;
  runner.dispose();
  be.dispose();
  return stats;
}

/** 20-token prompts: 5 pages of 4 tokens, then decodes. */
const PROMPTS = [Array.from({ length: 20 }, (_, i) => 1 + i), Array.from({ length: 18 }, (_, i) => 21 + i)];

describe("HiSparse on the CUDA TS layer, end to end on the fake addon", () => {
  it("on: decodes go sparse after prefill; sparse steps are captured in graphs (select, resolve, per-head attention) and mirrors run on a side stream", () => {
    const s = run({ mode: "on", minSparseTokens: 0 }, 64, PROMPTS, 10);
    assert.equal(s.outputs, 2, "both requests finish");
    assert.ok(s.sparseSteps > 0, "some steps decode sparsely");
    for (const fn of ["questSelect", "resolve", "sparseDecodeAttention", "reshapeAndCacheDigest"])
      assert.ok(s.captured.has(fn), `${fn} is recorded in a graph`);
    assert.equal(s.eager.get("questSelect") ?? 0, s.eager.get("resolve") ?? 0, "one resolve per selection");
    assert.equal(s.numGraphs, 1, "every decode step is sparse (on): one variant of one bucket");
    assert.equal(s.sideStreams.size, 1, "every mirror on one side stream");
    assert.equal(
      s.mirrorCalls.reduce((n, a) => n + a[5]!, 0),
      s.mirroredPages,
      "one mirror launch covers the step's pages",
    );
    assert.deepEqual(new Set(s.mirrorCalls.map((a) => a[6])), new Set([2]), "both sparse layers per launch");
    assert.equal(s.slotsAfter, 0, "finished requests gave their slots back");
    // The first sparse request's device table: 6 pages with host blocks; INACTIVE pages -1 except
    // the sink page 0 and the window (tail) page.
    const t = s.tables!;
    assert.ok(t.host.slice(0, 6).every((h) => h >= 0));
    assert.ok(t.block[0]! >= 0 && t.block.slice(1, 4).every((b) => b === -1), JSON.stringify(t));
  });

  it("auto without pressure: no sparse step, no selection or resolve; digests and mirrors still run", () => {
    const s = run({ mode: "auto" }, 64, PROMPTS, 10);
    assert.equal(s.outputs, 2);
    assert.equal(s.sparseSteps, 0);
    for (const fn of ["questSelect", "resolve", "sparseDecodeAttention"]) {
      assert.ok(!s.captured.has(fn) && !s.eager.has(fn), `${fn} never runs`);
    }
    assert.ok(s.captured.has("reshapeAndCacheDigest") && s.captured.has("pagedDecodeAttention"));
    assert.ok(s.mirroredPages > 0 && s.mirrorCalls.length > 0);
    assert.equal(s.numGraphs, 1, "one (dense) variant of one bucket");
  });
});

describe("benchmark harness on the fake addon (bench/hisparse_harness.ts)", () => {
  it("fastPrefill fills contexts with KV writes only (no GEMM), then requests decode through graphs; abortAll frees every pool", () => {
    const fake = createFakeAddon();
    const be = new CudaBackend({ addon: fake, workspaceBytes: 16 << 20, stagingBytes: 1 << 16 });
    const model = LlamaForCausalLM.load(config, weights(), be, MAX_MODEL_LEN);
    const hs = resolveHiSparseConfig({
      mode: "on",
      topk: 8,
      deviceBufferTokens: 8,
      sinkTokens: 4,
      windowTokens: 4,
      denseLayers: [0],
      minSparseTokens: 0,
      hostPoolBytes: 1 << 20,
    });
    const e = createBenchEngine(be, model, {
      blockSize: BS,
      maxModelLen: MAX_MODEL_LEN,
      maxNumSeqs: 4,
      maxNumBatchedTokens: 32,
      kvBudgetBytes: 1 << 20,
      hisparse: hs,
    });
    const ids = addRequests(e, config.vocabSize, 3, 60, 1000);
    const prefillFns = new Set<string>();
    let decodeSteps = 0;
    for (let i = 0; i < 40; i++) {
      const mark = fake.calls.length;
      const { so } = step(e);
      if (isDecodeStep(so)) decodeSteps++;
      else for (const c of fake.calls.slice(mark)) prefillFns.add(c.fn);
    }
    assert.ok(prefillFns.has("reshapeAndCacheDigest") && prefillFns.has("reshapeAndCache"));
    assert.ok(!prefillFns.has("linear") && !prefillFns.has("pagedPrefillAttention"), [...prefillFns].join());
    assert.ok(decodeSteps > 10, `requests decode (${decodeSteps} decode steps)`);
    assert.ok((e.hisparse!.stats().spilledPagesTotal ?? 0) > 0, "on: pages went host-resident");
    abortAll(e, ids);
    assert.equal(e.scheduler.kvCacheManager.numFreeBlocks, e.numGpuBlocks);
    assert.equal(e.hisparse!.stats().hostPoolUsedBlocks, 0);
    e.dispose();
    be.dispose();
  });
});

describe("throughput benchmark knobs on the fake addon (rescheduleBenchEngine, setSelectionOverlap)", () => {
  it("one device side serves on then auto; a new overlap p drops the graphs and reaches questSelect", () => {
    const fake = createFakeAddon();
    const be = new CudaBackend({ addon: fake, workspaceBytes: 16 << 20, stagingBytes: 1 << 16 });
    const model = LlamaForCausalLM.load(config, weights(), be, MAX_MODEL_LEN);
    const hs = resolveHiSparseConfig({
      mode: "on",
      topk: 8,
      deviceBufferTokens: 8,
      sinkTokens: 4,
      windowTokens: 4,
      denseLayers: [0],
      minSparseTokens: 0,
      hostPoolBytes: 1 << 20,
    });
    const on = createBenchEngine(be, model, {
      blockSize: BS,
      maxModelLen: MAX_MODEL_LEN,
      maxNumSeqs: 4,
      maxNumBatchedTokens: 32,
      kvBudgetBytes: 1 << 20,
      hisparse: { ...hs, benchSelectionOverlap: 0 },
    });
    /** Steps 3 requests of 60 tokens through 30 steps; @returns the overlapP of each questSelect launch. */
    const runRequests = (e: typeof on): number[] => {
      const ids = addRequests(e, config.vocabSize, 3, 60, 1000);
      const mark = fake.calls.length;
      for (let i = 0; i < 30; i++) step(e);
      abortAll(e, ids);
      return fake.calls
        .slice(mark)
        .filter((c) => c.fn === "questSelect")
        .map((c) => c.params!.overlapP!);
    };
    // step 1: `on` at p = 0: every selection (captured or eager) carries p = 0.
    const graphsBefore = be.graphs.size;
    const p0 = runRequests(on);
    assert.ok(p0.length > 0 && p0.every((p) => p === 0), JSON.stringify(p0));
    assert.ok(be.graphs.size > graphsBefore, "decode steps were captured");
    // step 2: p = 0.97 on the same engine: the old graphs are freed, the new capture carries 0.97.
    const captured = be.graphs.size;
    setSelectionOverlap(on, 0.97);
    assert.ok(be.graphs.size < captured, "setSelectionOverlap drops the captured graphs");
    const p97 = runRequests(on);
    assert.ok(p97.length > 0 && p97.every((p) => Math.abs(p - 0.97) < 1e-6), JSON.stringify(p97));
    // step 3: `auto` over the same device side: a fresh scheduler, the same pools and host tier.
    const auto = rescheduleBenchEngine(on, { ...hs, mode: "auto", residency: "hybrid" });
    assert.equal(auto.runner, on.runner);
    assert.equal(auto.hisparse!.policy !== on.hisparse!.policy, true);
    assert.equal(auto.numHostBlocks, on.numHostBlocks);
    const ids = addRequests(auto, config.vocabSize, 2, 20, 4);
    for (let i = 0; i < 20 && auto.scheduler.hasUnfinishedRequests(); i++) step(auto);
    assert.equal(
      auto.scheduler.hasUnfinishedRequests(),
      false,
      "auto requests finish on the shared device side",
    );
    abortAll(auto, ids);
    assert.equal(auto.scheduler.kvCacheManager.numFreeBlocks, auto.numGpuBlocks);
    // A p outside [0, 1] is refused; an engine with requests cannot be rescheduled.
    assert.throws(() => setSelectionOverlap(auto, 1.5), /\[0, 1\]/);
    addRequests(auto, config.vocabSize, 1, 20, 4);
    assert.throws(() => rescheduleBenchEngine(auto, hs), /still holds requests/);
    auto.dispose();
    be.dispose();
  });
});
