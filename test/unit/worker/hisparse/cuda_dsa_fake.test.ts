/**
 * Hybrid HiSparse for DSA models on the CUDA backend's TS layer (issue 15), end to end on the
 * host-memory double of the addon (test/unit/backends/cuda/fake_addon.ts): the real Scheduler with
 * HiSparse scheduling, the ModelRunner with CUDA graphs, GLM-5's decoder with "shared" indexer
 * layers (tiny-glm5-dsa-shared-pv, dummy weights), and the CUDA DSA set-up (slot tables with a
 * row LRU per indexer, pinned row tier, CudaLruRowResolver, CudaDsaHiSparseAttention). The fake
 * launches no kernels, so this checks the plumbing: one resolution and one view merge per indexer
 * and sparse step, one copy pass per sparse layer, all of them captured in the decode graphs, the
 * indexer scored over host block tables, mirrors on the side stream, the device tables' shapes,
 * slots given back. Numerics: test/native/dsa_hisparse.test.ts on the GPU machine.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  abortAll,
  addRequests,
  createBenchEngine,
  measureConcurrency,
  step,
} from "../../../../bench/hisparse_harness.js";
import { CudaDsaHiSparseAttention } from "../../../../src/attention/sparse/cuda/cuda_dsa_attention.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { makeEngineArgs } from "../../../../src/config/engine_args.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import { createHiSparseScheduling } from "../../../../src/core/hisparse/hisparse_scheduling.js";
import { HISPARSE_PLAN } from "../../../../src/core/hisparse/plan.js";
import { Scheduler } from "../../../../src/core/sched/scheduler.js";
import { loadModel } from "../../../../src/models/registry.js";
import { CudaHiSparseWorker } from "../../../../src/worker/hisparse/cuda/cuda_hisparse_worker.js";
import { createKVCacheSetup } from "../../../../src/worker/kv_cache_registry.js";
import { ModelRunner } from "../../../../src/worker/model_runner.js";
import { refModelDir } from "../../../helpers/reference.js";
import { createFakeAddon } from "../../backends/cuda/fake_addon.js";
import { cacheConfig, req, schedConfig } from "../../core/helpers.js";

const BS = 8;
const MAX_MODEL_LEN = 256;
const MODEL = refModelDir("tiny-glm5-dsa-shared-pv");
const WATCHED = [
  "rowResolve",
  "rowCopy",
  "rowViewMerge",
  "rowSelectionOverlap",
  "mlaAttention",
  "mlaIndexerLogits",
  "mirrorPages",
] as const;

interface DsaRunStats {
  captured: Set<string>;
  /** Calls per launcher, eager and captured. */
  calls: Map<string, number>;
  sparseSteps: number;
  outputs: number;
  slotsAfter: number;
  lruShape: number[];
  numGraphs: number;
  /** rowCopy passes on the backend's (compute) stream and on any other (the prefetch's side stream). */
  copiesOnCompute: number;
  copiesOnSide: number;
}

function run(
  hsConfig: Partial<HiSparseConfig>,
  numGpuBlocks: number,
  prompts: number[][],
  rowPrefetch = true,
): DsaRunStats {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 32 << 20, stagingBytes: 1 << 18 });
  const stats: DsaRunStats = {
    captured: new Set(),
    calls: new Map(),
    sparseSteps: 0,
    outputs: 0,
    slotsAfter: -1,
    lruShape: [],
    numGraphs: 0,
    copiesOnCompute: 0,
    copiesOnSide: 0,
  };
  for (const fn of WATCHED) {
    const orig = fake[fn] as (...a: unknown[]) => void;
    (fake as unknown as Record<string, (...a: unknown[]) => void>)[fn] = (...a: unknown[]) => {
      if (be.graphs.isCapturing) stats.captured.add(fn);
      stats.calls.set(fn, (stats.calls.get(fn) ?? 0) + 1);
      if (fn === "rowCopy") {
        if (a[0] === be.stream) stats.copiesOnCompute++;
        else stats.copiesOnSide++;
      }
      orig(...a);
    };
  }
  const { model, config } = loadModel({
    modelDir: MODEL!,
    backend: be,
    loadFormat: "dummy",
    seed: 0,
    maxModelLen: MAX_MODEL_LEN,
  });
  // The benchmark knob is not a user key: set it on the resolved settings, as the benchmarks do.
  const bench = hsConfig.benchSelectionOverlap;
  const hs = {
    ...resolveHiSparseConfig({ ...hsConfig }),
    ...(bench === undefined ? {} : { benchSelectionOverlap: bench }),
  };
  const args = makeEngineArgs({
    blockSize: BS,
    maxNumSeqs: 4,
    numGpuBlocksOverride: numGpuBlocks,
    extensions: { hisparse: hs },
  });
  const setup = createKVCacheSetup(be, {
    model: { config, layout: model.layout },
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
  const worker = setup.extensions[0];
  assert.ok(worker instanceof CudaHiSparseWorker);
  const mla = setup.mla?.attention;
  assert.ok(mla instanceof CudaDsaHiSparseAttention);
  mla.rowPrefetch = rowPrefetch;
  stats.lruShape = [...worker.tables.state.lruPage.shape];
  const eff = setup.info.hisparse!.config!;
  const scheduling = createHiSparseScheduling(eff, {
    blockSize: BS,
    numGpuBlocks: setup.numGpuBlocks,
    numHostBlocks: setup.info.hisparse!.numHostBlocks,
  });
  const sched = new Scheduler(
    schedConfig({ maxNumSeqs: 4, maxModelLen: MAX_MODEL_LEN, maxNumBatchedTokens: 128 }),
    cacheConfig({ blockSize: BS, numGpuBlocks: setup.numGpuBlocks }),
    scheduling.schedulerOptions,
  );
  for (const [i, p] of prompts.entries())
    sched.addRequest(req(`r${i}`, p, { maxTokens: 8, ignoreEos: true }));
  for (let i = 0; i < 500 && (sched.hasUnfinishedRequests() || sched.hasFinishedRequests()); i++) {
    const so = sched.schedule();
    const plan = so.extensions.get(HISPARSE_PLAN);
    if (plan !== undefined && plan.sparseReqIds.length > 0) stats.sparseSteps++;
    const mro = runner.executeModel(so);
    for (const out of sched.updateFromOutput(so, mro)) if (out.finishReason !== null) stats.outputs++;
  }
  stats.numGraphs = be.graphs.size;
  stats.slotsAfter = worker.tables.numRequests;
  runner.dispose();
  be.dispose();
  return stats;
}

/** 100- and 150-token prompts: longer than index_topk (32) and the hot buffer (64 rows). */
const PROMPTS = [100, 150].map((n, k) => Array.from({ length: n }, (_, j) => 1 + ((k * 31 + j * 7) % 380)));

describe("DSA HiSparse on the CUDA TS layer, end to end on the fake addon", {
  skip: MODEL === null && "tiny-glm5-dsa-shared-pv not found",
}, () => {
  it("on: sparse decodes resolve once per indexer (2 of 4 layers), copy once per layer, inside the decode graphs", () => {
    const s = run({ mode: "on", minSparseTokens: 0 }, 128, PROMPTS);
    assert.equal(s.outputs, 2, "both requests finish");
    assert.ok(s.sparseSteps > 0, "decodes go sparse");
    assert.deepEqual(s.lruShape, [4, 2, 64], "slot tables: [slots, indexers, hot rows]");
    for (const fn of ["rowResolve", "rowCopy", "rowViewMerge", "mlaAttention"])
      assert.ok(s.captured.has(fn), `${fn} is recorded in a graph`);
    const n = (fn: string) => s.calls.get(fn) ?? 0;
    // Layers 0 and 2 are full (2 indexers), 1 and 3 share them: per sparse forward 2 plans, 2
    // merges, 4 copy passes.
    assert.equal(n("rowResolve"), n("rowViewMerge"));
    assert.equal(n("rowCopy"), 2 * n("rowResolve"));
    assert.ok(n("mirrorPages") > 0, "eager mirrors");
    assert.equal(s.slotsAfter, 0, "finished requests gave their slots back");
  });

  it("exact prefetch: the sharing layers' copy passes go to a side stream, the full layers' stay on the compute stream; off: all on the compute stream", () => {
    const s = run({ mode: "on", minSparseTokens: 0 }, 128, PROMPTS);
    const resolves = s.calls.get("rowResolve") ?? 0;
    assert.ok(resolves > 0);
    // Layers 1 and 3 share the indexers of 0 and 2: one prefetched pass per plan.
    assert.equal(s.copiesOnCompute, resolves);
    assert.equal(s.copiesOnSide, resolves);
    const off = run({ mode: "on", minSparseTokens: 0 }, 128, PROMPTS, false);
    assert.equal(off.copiesOnSide, 0);
    assert.equal(off.copiesOnCompute, 2 * (off.calls.get("rowResolve") ?? 0));
    assert.equal(off.outputs, 2);
  });

  it("on with the benchmark's selection overlap: one rewrite per resolution, captured too; none without the knob", () => {
    const s = run({ mode: "on", minSparseTokens: 0, benchSelectionOverlap: 0.87 }, 128, PROMPTS);
    assert.equal(s.outputs, 2);
    assert.ok((s.calls.get("rowResolve") ?? 0) > 0);
    assert.equal(s.calls.get("rowSelectionOverlap"), s.calls.get("rowResolve"));
    assert.ok(s.captured.has("rowSelectionOverlap"));
    const plain = run({ mode: "on", minSparseTokens: 0 }, 128, PROMPTS);
    assert.equal(plain.calls.get("rowSelectionOverlap") ?? 0, 0);
  });

  it("auto without pressure: no resolution, copy or view; the dense-resident attention runs", () => {
    const s = run({ mode: "auto" }, 128, PROMPTS);
    assert.equal(s.outputs, 2);
    assert.equal(s.sparseSteps, 0);
    for (const fn of ["rowResolve", "rowCopy", "rowViewMerge"]) assert.equal(s.calls.get(fn) ?? 0, 0, fn);
    assert.ok(s.captured.has("mlaAttention") && s.captured.has("mlaIndexerLogits"));
    assert.ok((s.calls.get("mirrorPages") ?? 0) > 0, "eager mirrors still run");
  });
});

describe("DSA benchmark harness on the fake addon (bench/hisparse_harness.ts)", {
  skip: MODEL === null && "tiny-glm5-dsa-shared-pv not found",
}, () => {
  for (const mode of ["off", "on"] as const)
    it(`${mode}: fastPrefill writes latent rows and indexer keys only (no attention, no GEMM), then requests decode; measureConcurrency counts them`, () => {
      const fake = createFakeAddon();
      const be = new CudaBackend({ addon: fake, workspaceBytes: 32 << 20, stagingBytes: 1 << 18 });
      const { model, config } = loadModel({
        modelDir: MODEL!,
        backend: be,
        loadFormat: "dummy",
        seed: 0,
        maxModelLen: MAX_MODEL_LEN,
      });
      const e = createBenchEngine(be, model, {
        blockSize: BS,
        maxModelLen: MAX_MODEL_LEN,
        maxNumSeqs: 4,
        maxNumBatchedTokens: 128,
        kvBudgetBytes: 4 << 20,
        hisparse:
          mode === "off" ? null : resolveHiSparseConfig({ mode, minSparseTokens: 0, hostPoolBytes: 4 << 20 }),
      });
      const ids = addRequests(e, config.vocabSize, 3, 180, 40);
      const prefillFns = new Set<string>();
      const mark = fake.calls.length;
      step(e); // the first step prefills (fast-filled)
      for (const c of fake.calls.slice(mark)) prefillFns.add(c.fn);
      assert.ok(prefillFns.has("mlaWriteRows"), [...prefillFns].join());
      assert.ok(!prefillFns.has("mlaAttention") && !prefillFns.has("linear"), [...prefillFns].join());
      const run = measureConcurrency(e, 180, 3, 200, true);
      assert.equal(run.preempted, false);
      assert.equal(run.maxDecoding, 3, "the three requests decode at once");
      for (let k = 0; k < 3; k++) step(e); // decodes: in `on`, host-resident and sparse from the next one
      if (mode === "on") {
        const st = e.hisparse!.stats();
        assert.ok(st.spilledPagesTotal > 0 && st.sparseDecodesTotal > 0, JSON.stringify(st));
      }
      abortAll(e, ids);
      assert.equal(e.scheduler.kvCacheManager.numFreeBlocks, e.numGpuBlocks);
      e.dispose();
      be.dispose();
    });
});
