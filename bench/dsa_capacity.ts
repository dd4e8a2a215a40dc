/**
 * DSA HiSparse capacity (issue 15), GPU machine: how many long requests decode at once without a
 * preemption, `off` vs `auto` / `on`, on the same device memory, for a DSA model:
 *   node dist/bench/dsa_capacity.js [--config configs/glm-5] [--num-layers 8] [--num-experts 16]
 *     [--runs 131072:12:48,1048576:40:8:60,1048576:8:8] [--modes off,auto,on] [--chunk 65536] [--json FILE]
 * Each run is context:kvBudgetGiB:maxRequests[:hostPoolGiB]; without hostPoolGiB the engine's
 * default host pool (DSA: the one that holds the most requests of the context, the run's
 * --max-model-len; capped at half the RAM, so give it where that binds).
 * GLM-5's per-layer shape cut to --num-layers layers (bench/mla_bench_setup.ts cutGlm5), dummy
 * weights, bf16 latent rows, block size 16. max_position_embeddings is raised to the longest
 * context (dummy weights: RoPE positions only).
 *
 * Per run and mode, one engine over the run's device KV budget (the dense latent +
 * indexer-key cache, or HiSparse's main pool of latent rows, the indexer keys of every host page,
 * the hot rows' blocks and the slot tables) and `--host-pool-gib` of pinned host memory, with the
 * engine's own scheduler (admission, spills in `auto`, offload after prefill in `on`,
 * preemption). The run's maxRequests requests of the context are added at once, each asking for
 * enough outputs to keep decoding while the later ones prefill; prefills are fast-filled
 * (ModelRunner.fastPrefill: latent rows and indexer keys written from random rows, in chunks of
 * `--chunk` tokens, pages mirrored), decode steps run the real model (CUDA graphs). The figure is
 * the largest number of requests decoding in one step before the first preemption or the
 * first finished request (bench/hisparse_harness.ts measureConcurrency), printed beside what `hisparse plan` predicts
 * for the same settings (src/plan: planDense, planHiSparse over planDsaKnobs).
 *
 * What bounds HiSparse: the indexer keys stay on the GPU for every token (GLM-5: 256 B per token
 * and full layer, 22% of the dense bytes), and the host pool holds every latent row of every
 * request; a prefilling request streams (its attention reads the pages it spilled from the host
 * tier), so it holds at most core/kv/kv_memory.ts streamingPrefillBlocks of the device pool.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import { resolveHiSparseConfig } from "../src/config/hisparse_config.js";
import { loadModelConfig } from "../src/config/model_config.js";
import { DummyWeights } from "../src/models/dummy.js";
import { DeepseekV3ForCausalLM } from "../src/models/llama.js";
import { planDsaKnobs } from "../src/plan/dsa_plan.js";
import { planDense, planHiSparse } from "../src/plan/plan.js";
import { abortAll, addRequests, createBenchEngine, measureConcurrency } from "./hisparse_harness.js";
import { cutGlm5 } from "./mla_bench_setup.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const GiB = 2 ** 30;
const BLOCK = 16;
const runs = arg("runs", "131072:12:48,1048576:40:8:60,1048576:8:8")
  .split(",")
  .map((r) => {
    const [c, g, n, hp] = r.split(":").map(Number);
    const hostPoolBytes = hp === undefined ? null : Math.floor(hp * GiB);
    return { context: c!, budgetBytes: Math.floor(g! * GiB), maxRequests: n!, hostPoolBytes };
  });
const contexts = runs.map((r) => r.context);
const gib = (b: number | null) => (b === null ? "default" : `${(b / GiB).toFixed(1)} GiB`);
const modes = arg("modes", "off,auto,on").split(",") as ("off" | "auto" | "on")[];
const chunk = Number(arg("chunk", "65536"));

const maxLen = Math.max(...contexts);
const cut = cutGlm5(
  loadModelConfig(arg("config", "configs/glm-5")),
  Number(arg("num-layers", "8")),
  Number(arg("num-experts", "16")),
);
const config = { ...cut, maxPositionEmbeddings: Math.max(cut.maxPositionEmbeddings, maxLen) };
const backend = new CudaBackend({ workspaceBytes: 4 * GiB });
const model = DeepseekV3ForCausalLM.load(
  config,
  new DummyWeights(config, { seed: 0, dtype: "bf16" }),
  backend,
  maxLen,
);
console.log(
  `${config.architecture} (dummy, ${config.numHiddenLayers} layers, ${config.moe?.numExperts} routed experts); block ${BLOCK}; prefill chunks ${chunk}`,
);

interface Result {
  context: number;
  budgetGiB: number;
  mode: string;
  maxDecoding: number;
  preempted: boolean;
  planned: number;
  numGpuBlocks: number;
  numHostBlocks: number;
  spilledPages: number;
  steps: number;
  seconds: number;
}

/** `hisparse plan`'s figures for one context: off, and HiSparse with the given host pool (null: the default). */
function planned(
  context: number,
  budgetBytes: number,
  hostPoolBytes: number | null,
): { off: number; hisparse: number; line: string } {
  const knobs = planDsaKnobs({
    hostPoolBytes: hostPoolBytes ?? undefined,
    blockSize: BLOCK,
    mla: config.mla!,
    numLayers: config.numHiddenLayers,
    architecture: config.architecture,
    maxNumBatchedTokens: chunk,
  });
  const p = {
    model: config,
    kvBudgetBytes: budgetBytes,
    contextTokens: context,
    blockSize: BLOCK,
    kvElementBytes: 2,
    digestElementBytes: 2,
    hisparse: knobs,
  };
  const dense = planDense(p);
  const h = planHiSparse(p);
  const line = `plan at ${context}, KV budget ${(budgetBytes / GiB).toFixed(1)} GiB, host pool ${gib(hostPoolBytes)} (${gib(h.given.hostPoolBytes)}): off ${dense.maxConcurrent}; HiSparse ${h.given.maxConcurrent} (by device ${h.given.maxByDevice}, by host ${h.given.maxByHost}); GPU bytes per request ${(h.deviceBytesPerRequest / GiB).toFixed(3)} GiB vs ${((dense.pagesPerRequest * dense.kvBytesPerBlock) / GiB).toFixed(3)} GiB dense`;
  return { off: dense.maxConcurrent, hisparse: h.given.maxConcurrent, line };
}

const results: Result[] = [];
for (const { context, budgetBytes, maxRequests, hostPoolBytes } of runs) {
  const plan = planned(context, budgetBytes, hostPoolBytes);
  console.log(plan.line);
  const outputs = (Math.ceil(context / chunk) + 1) * maxRequests + 64;
  const prompt = context - outputs;
  for (const mode of modes) {
    const t0 = performance.now();
    let e: ReturnType<typeof createBenchEngine>;
    try {
      e = createBenchEngine(backend, model, {
        blockSize: BLOCK,
        maxModelLen: context,
        maxNumSeqs: maxRequests,
        maxNumBatchedTokens: chunk,
        kvBudgetBytes: budgetBytes,
        hisparse: mode === "off" ? null : resolveHiSparseConfig({ mode, hostPoolBytes, minSparseTokens: 0 }),
      });
    } catch (err) {
      console.log(`${context} ${mode}: does not start: ${(err as Error).message}`);
      results.push({
        context,
        budgetGiB: budgetBytes / GiB,
        mode,
        maxDecoding: 0,
        preempted: false,
        planned: mode === "off" ? plan.off : plan.hisparse,
        numGpuBlocks: 0,
        numHostBlocks: 0,
        spilledPages: 0,
        steps: 0,
        seconds: 0,
      });
      continue;
    }
    const ids = addRequests(e, config.vocabSize, maxRequests, prompt, outputs);
    const cap = (Math.ceil(context / chunk) + 1) * maxRequests + outputs + 200;
    const run = measureConcurrency(e, prompt, maxRequests, cap, true);
    const r: Result = {
      context,
      budgetGiB: budgetBytes / GiB,
      mode,
      ...run,
      planned: mode === "off" ? plan.off : plan.hisparse,
      numGpuBlocks: e.numGpuBlocks,
      numHostBlocks: e.numHostBlocks,
      spilledPages: e.hisparse?.stats().spilledPagesTotal ?? 0,
      seconds: (performance.now() - t0) / 1000,
    };
    results.push(r);
    console.log(
      `${context} ${mode}: ${r.maxDecoding} requests decoding at once before ${r.preempted ? "the first preemption" : "the end (no preemption)"} (plan: ${r.planned}); ${r.numGpuBlocks} device blocks, ${r.numHostBlocks} host blocks, ${r.spilledPages} pages spilled, ${r.steps} steps, ${r.seconds.toFixed(1)} s`,
    );
    abortAll(e, ids);
    e.dispose();
    backend.resetWorkspace();
  }
}
console.log(
  "\n| context | KV budget GiB | mode | requests decoding at once (no preemption) | vs off | hisparse plan | device blocks | host blocks |",
);
console.log("|---|---|---|---|---|---|---|---|");
for (const r of results) {
  const off = results.find((o) => o.context === r.context && o.mode === "off");
  const vs = off && off.maxDecoding > 0 ? `${(r.maxDecoding / off.maxDecoding).toFixed(1)}x` : "-";
  console.log(
    `| ${r.context} | ${r.budgetGiB} | ${r.mode} | ${r.maxDecoding} | ${vs} | ${r.planned} | ${r.numGpuBlocks} | ${r.numHostBlocks} |`,
  );
}
const json = arg("json", "");
if (json !== "") writeFileSync(json, JSON.stringify({ config: config.architecture, runs, results }, null, 2));
backend.dispose();
