/**
 * HiSparse capacity (issue 6), GPU machine: how many long requests decode at once without a
 * preemption, `off` vs `auto` / `on`, on the same device memory.
 *   node dist/bench/hisparse_capacity.js [--config configs/llama-3.1-8b] [--context 131072]
 *     [--kv-budget-gib 32] [--host-pool-gib 80] [--modes off,auto,on] [--max-requests 24]
 *     [--topk 2048] [--buffer 4096] [--dense-layers 0,1] [--json FILE]
 * Llama-3.1-8B shape, dummy weights, bf16 KV, block size 16.
 *
 * For each mode, one engine over the same `--kv-budget-gib` of device memory (dense KV cache, or
 * HiSparse's main pool, dense-layer KV, bf16 digests and tables) and `--host-pool-gib` of pinned
 * host memory, with the engine's own scheduler (admission, HiSparse spills in `auto`, offload in
 * `on`, preemption). `--max-requests` requests of `--context` tokens are added at once, each
 * asking for enough output tokens to keep decoding while every later request prefills (prefill
 * chunks of 8192 tokens run one request at a time: ceil(prompt / 8192) steps each; with only a
 * few outputs the first request would finish before the second decodes, and the count would
 * read 1 for every mode); prefills are fast-filled (ModelRunner.fastPrefill: K/V and digests
 * written from random rows, pages mirrored), decode steps run the real model. The figure is the
 * largest number of requests decoding in one step before the first preemption. The capacity the
 * engine's sizing predicts (src/plan, the same arithmetic as `hisparse plan`) is printed beside.
 *
 * What bounds it here: a HiSparse request must fit the device pool densely for its prefill (part
 * 1's admission rule), which at 128K and this shape takes 15 GiB of main pool beside the dense
 * layers and digests of every host page; and the host pool must hold every page of every
 * request (15 GiB each at 128K), while this GPU machine has 128 GiB of RAM. So at 128K the host
 * pool, not the device, sets the count (80 GiB: 5 requests); `hisparse plan` shows the
 * device-side figures for a larger host.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import { resolveHiSparseConfig } from "../src/config/hisparse_config.js";
import { loadModel } from "../src/models/registry.js";
import { planDense, planHiSparse } from "../src/plan/plan.js";
import { abortAll, addRequests, createBenchEngine, measureConcurrency } from "./hisparse_harness.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const GiB = 2 ** 30;
const BLOCK = 16;
const context = Number(arg("context", "131072"));
const budgetBytes = Math.floor(Number(arg("kv-budget-gib", "32")) * GiB);
const hostPoolBytes = Math.floor(Number(arg("host-pool-gib", "80")) * GiB);
const modes = arg("modes", "off,auto,on").split(",") as ("off" | "auto" | "on")[];
const maxRequests = Number(arg("max-requests", "24"));
/** Outputs per request: one decode step for every prefill step of every other request, plus slack. */
const OUTPUTS = (Math.ceil(context / 8192) + 1) * maxRequests + 64;
const denseLayers = arg("dense-layers", "0,1")
  .split(",")
  .filter((x) => x !== "")
  .map(Number);

const backend = new CudaBackend({ workspaceBytes: 4 * GiB });
const { config, model } = loadModel({
  modelDir: arg("config", "configs/llama-3.1-8b"),
  backend,
  loadFormat: "dummy",
  seed: 0,
  maxModelLen: context,
});
console.log(
  `${config.architecture} (dummy, ${config.numHiddenLayers} layers); context ${context}; device KV budget ${(budgetBytes / GiB).toFixed(1)} GiB; host pool ${(hostPoolBytes / GiB).toFixed(1)} GiB; dense layers [${denseLayers}]`,
);

interface Result {
  mode: string;
  numGpuBlocks: number;
  numHostBlocks: number;
  maxDecoding: number;
  preempted: boolean;
  steps: number;
  seconds: number;
  spilledPages: number;
}

const plan = {
  model: config,
  kvBudgetBytes: budgetBytes,
  contextTokens: context,
  blockSize: BLOCK,
  kvElementBytes: 2,
  digestElementBytes: 2,
  hisparse: {
    topk: Number(arg("topk", "2048")),
    deviceBufferTokens: Number(arg("buffer", "4096")),
    sinkTokens: 64,
    windowTokens: 256,
    denseLayers,
    hostPoolBytes,
  },
};
const dense = planDense(plan);
const sparse = planHiSparse(plan);
console.log(
  `plan (src/plan, bf16 digests): off ${dense.maxConcurrent} requests; HiSparse ${sparse.given.maxConcurrent} (by device pool ${sparse.given.maxByDevice}, by host pool ${sparse.given.maxByHost}); device bytes per request ${(sparse.deviceBytesPerRequest / GiB).toFixed(2)} GiB vs ${((dense.pagesPerRequest * dense.kvBytesPerBlock) / GiB).toFixed(2)} GiB dense; host bytes per request ${((sparse.pagesPerRequest * sparse.hostBytesPerBlock) / GiB).toFixed(2)} GiB`,
);

const results: Result[] = [];
for (const mode of modes) {
  const t0 = performance.now();
  let e: ReturnType<typeof createBenchEngine>;
  try {
    e = createBenchEngine(backend, model, {
      blockSize: BLOCK,
      maxModelLen: context,
      maxNumSeqs: maxRequests,
      maxNumBatchedTokens: 8192,
      kvBudgetBytes: budgetBytes,
      hisparse:
        mode === "off"
          ? null
          : resolveHiSparseConfig({
              mode,
              topk: Number(arg("topk", "2048")),
              deviceBufferTokens: Number(arg("buffer", "4096")),
              denseLayers,
              hostPoolBytes,
              minSparseTokens: 0,
            }),
    });
  } catch (err) {
    console.log(`${mode}: does not start: ${(err as Error).message}`);
    continue;
  }
  const ids = addRequests(e, config.vocabSize, maxRequests, context - OUTPUTS, OUTPUTS);
  const prompt = context - OUTPUTS;
  const cap = (Math.ceil(context / 8192) + 1) * maxRequests + OUTPUTS + 200;
  const { maxDecoding, preempted, steps } = measureConcurrency(e, prompt, maxRequests, cap);
  const r: Result = {
    mode,
    numGpuBlocks: e.numGpuBlocks,
    numHostBlocks: e.numHostBlocks,
    maxDecoding,
    preempted,
    steps,
    seconds: (performance.now() - t0) / 1000,
    spilledPages: e.hisparse?.stats().spilledPagesTotal ?? 0,
  };
  results.push(r);
  console.log(
    `${mode}: ${r.maxDecoding} requests decoding at once before ${preempted ? "the first preemption" : "the end (no preemption)"}; ${r.numGpuBlocks} device blocks, ${r.numHostBlocks} host blocks, ${r.spilledPages} pages spilled, ${r.steps} steps, ${r.seconds.toFixed(1)} s`,
  );
  abortAll(e, ids);
  e.dispose();
  backend.resetWorkspace();
}
const off = results.find((r) => r.mode === "off");
console.log("\n| mode | requests decoding at once (no preemption) | vs off | device blocks | host blocks |");
console.log("|---|---|---|---|---|");
for (const r of results)
  console.log(
    `| ${r.mode} | ${r.maxDecoding} | ${off && off.maxDecoding > 0 ? `${(r.maxDecoding / off.maxDecoding).toFixed(1)}x` : "-"} | ${r.numGpuBlocks} | ${r.numHostBlocks} |`,
  );
const json = arg("json", "");
if (json !== "")
  writeFileSync(json, JSON.stringify({ context, budgetBytes, hostPoolBytes, denseLayers, results }, null, 2));
backend.dispose();
