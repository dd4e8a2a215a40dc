/**
 * MLA + DSA speed of the CUDA backend (issue 21), GPU machine:
 *   node dist/bench/mla_bench.js [--config configs/glm-5] [--num-layers 8] [--num-experts 16]
 *     [--batches 1,32,128] [--contexts 32768,131072] [--indexer-contexts 32768,131072,524288]
 *     [--prefill 32768] [--prefill-forms expanded,absorbed] [--prefill-scratch-mib 512] [--json FILE]
 * GLM-5's per-layer shape (MLA with q-LoRA 2048, kv_lora 512 + rope 64, 64 heads, the DSA indexer
 * with 32 heads x 128 and top-2048, MoE with a shared expert), cut to --num-layers layers (the
 * first 3 dense, as first_k_dense_replace) and --num-experts routed experts (top-8 kept), with
 * dummy weights generated on the device.
 * 1. decode: one step at batch B over a context of C tokens per request, replayed from its CUDA
 *    graph (mean of 10 replays after warm-up), against the HBM roofline at 4.3 TB/s of the bytes
 *    the step must read per layer: the non-expert weights, the routed experts it activates
 *    (counted during the eager warm-up), every index key (B * C * 256 B) and the selected latent
 *    rows (B * min(C, 2048) * 1152 B); lm_head timed alone and left out of the per-layer figure.
 * 2. indexer: one full layer's indexer alone (logits over the paged keys, then the top-2048), per
 *    decode step, at each batch and context, against the index keys' roofline.
 * 3. prefill: one prompt of T tokens in chunks of 8192 (as --max-num-batched-tokens 8192), eager,
 *    once per attention form: "expanded" (the default path: k_nope / v per head, cuBLAS GEMMs,
 *    scratch bound --prefill-scratch-mib) and "absorbed" (the decode kernel for every token,
 *    forced by prefill.minQueryLen = Infinity, the path before the expanded form existed).
 * Caches of every run are zeros (the kernels read every byte whatever the values); when the N
 * layers' caches would not fit, all layers share one (marked "shared KV": at those sizes no layer
 * finds another's rows in L2). Prints markdown tables; --json writes the figures.
 */
import { writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { DensePagedAttention } from "../src/attention/backend.js";
import { DenseMlaAttention } from "../src/attention/mla.js";
import type { Tensor } from "../src/backends/backend.js";
import { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import type { CudaMlaOps } from "../src/backends/cuda/mla_ops.js";
import { loadModelConfig } from "../src/config/model_config.js";
import { DummyWeights } from "../src/models/dummy.js";
import { DeepseekV3ForCausalLM } from "../src/models/llama.js";
import { CudaGraphRunner } from "../src/worker/cuda_graph_runner.js";
import { stageAttentionMetadata } from "../src/worker/input_batch.js";
import {
  allocateCaches,
  benchIndexer,
  cutGlm5,
  decodeInputs,
  HBM_BPS,
  type IndexerRow,
  kvBytesPerLayer,
  layerWeightBytes,
} from "./mla_bench_setup.js";
import { ExpertCounter, lmHeadMs } from "./moe_bench_setup.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const list = (s: string) => s.split(",").filter(Boolean).map(Number);
const BLOCK = 16;
const CHUNK = 8192;
const batches = list(arg("batches", "1,32,128"));
const contexts = list(arg("contexts", "32768,131072"));
const indexerContexts = list(arg("indexer-contexts", "32768,131072,524288"));
const prefills = list(arg("prefill", "32768"));
const prefillForms = arg("prefill-forms", "expanded,absorbed").split(",").filter(Boolean);
const prefillScratchMiB = Number(arg("prefill-scratch-mib", "512"));

const full = loadModelConfig(arg("config", "configs/glm-5"));
const config = cutGlm5(full, Number(arg("num-layers", "8")), Number(arg("num-experts", "16")));
const N = config.numHiddenLayers;
const maxLen = Math.max(...contexts, ...prefills) + BLOCK;
const backend = new CudaBackend({ workspaceBytes: 8 * 2 ** 30 });
const counter = new ExpertCounter(backend, () => backend.graphs.isCapturing);
const t0 = performance.now();
const model = DeepseekV3ForCausalLM.load(
  config,
  new DummyWeights(config, { seed: 0, dtype: "bf16" }),
  backend,
  maxLen,
);
const loadS = (performance.now() - t0) / 1e3;
console.log(
  `loaded ${config.architecture}, ${N} of ${full.numHiddenLayers} layers, ${config.moe?.numExperts} routed experts (dummy) in ${loadS.toFixed(1)} s`,
);
const probe = backend.upload(new Int32Array(1), [1], "i32");
const sync = () => backend.toHost(probe);
const weights = Array.from({ length: N }, (_, l) => layerWeightBytes(config, l));
const headBytes = config.vocabSize * config.hiddenSize * 2;
const mlaAttention = new DenseMlaAttention(backend, BLOCK);
const gqa = new DensePagedAttention(backend, model.layout, BLOCK); // unused by MLA layers
/** Budget of per-layer caches before all layers share one (bytes). */
const KV_BUDGET = 60 * 2 ** 30;

interface DecodeRow {
  batch: number;
  context: number;
  sharedKv: boolean;
  experts: number;
  stepMs: number;
  headMs: number;
  layerMs: number;
  layerRooflineMs: number;
  pctRoofline: number;
}
const decodeRows: DecodeRow[] = [];
for (const C of contexts)
  for (const B of batches) {
    const caches = allocateCaches(backend, config, B * Math.ceil(C / BLOCK), BLOCK, KV_BUDGET);
    const runner = new CudaGraphRunner(
      backend,
      backend.graphs,
      model,
      caches.latent,
      () => gqa,
      BLOCK,
      C + BLOCK,
      B,
      () => ({ mlaAttention, indexerKeyCaches: caches.indexKeys }),
    );
    const inputs = decodeInputs(B, C, BLOCK, config.vocabSize);
    const counts = counter.count(() => runner.run(inputs)); // eager warm-up (counted), then capture
    for (let i = 0; i < 2; i++) runner.run(inputs);
    sync();
    const R = 10;
    const t = performance.now();
    for (let i = 0; i < R; i++) runner.run(inputs);
    sync();
    const stepMs = (performance.now() - t) / R;
    runner.dispose();
    caches.free();
    const experts = counts.length > 0 ? counts.reduce((a, b) => a + b, 0) / counts.length : 0;
    let bytes = 0;
    for (let l = 0; l < N; l++) bytes += weights[l]!.other + kvBytesPerLayer(config, B, C);
    bytes += experts * counts.length * weights[N - 1]!.expert;
    const hMs = lmHeadMs(backend, config, B, sync);
    const layerMs = (stepMs - hMs) / N;
    const layerRooflineMs = (bytes / N / HBM_BPS) * 1e3;
    decodeRows.push({
      batch: B,
      context: C,
      sharedKv: caches.shared,
      experts,
      stepMs,
      headMs: hMs,
      layerMs,
      layerRooflineMs,
      pctRoofline: (100 * layerRooflineMs) / layerMs,
    });
    console.log(`decode B=${B} C=${C}: ${stepMs.toFixed(2)} ms/step`);
  }

const indexerRows: IndexerRow[] = [];
for (const C of indexerContexts)
  for (const B of batches) {
    indexerRows.push(benchIndexer(backend, config, B, C, BLOCK));
    console.log(`indexer B=${B} C=${C}: done`);
  }

const prefillRows: { form: string; tokens: number; seconds: number; layerMs: number; tokPerS: number }[] = [];
const mlaOps = backend.mla as CudaMlaOps;
const defaultPrefill = { ...mlaOps.prefill };
for (const T of prefills)
  for (const form of prefillForms) {
    if (form !== "expanded" && form !== "absorbed") throw new Error(`--prefill-forms: unknown form ${form}`);
    mlaOps.prefill.minQueryLen = form === "absorbed" ? Number.POSITIVE_INFINITY : defaultPrefill.minQueryLen;
    mlaOps.prefill.scratchBytes = prefillScratchMiB * 2 ** 20;
    const nb = Math.ceil(T / BLOCK);
    const caches = allocateCaches(backend, config, nb, BLOCK, KV_BUDGET);
    const table = Int32Array.from({ length: nb }, (_, i) => i);
    const run = () => {
      let logits: Tensor | null = null;
      for (let start = 0; start < T; start += CHUNK) {
        const n = Math.min(CHUNK, T - start);
        backend.resetWorkspace();
        const positions = Int32Array.from({ length: n }, (_, i) => start + i);
        const meta = stageAttentionMetadata(backend, {
          queryStartLoc: Int32Array.from([0, n]),
          seqLens: Int32Array.from([start + n]),
          blockTables: table,
          maxBlocksPerReq: nb,
          slotMapping: Int32Array.from(positions, (p) => table[Math.floor(p / BLOCK)]! * BLOCK + (p % BLOCK)),
          positions,
          maxQueryLen: n,
          maxSeqLen: start + n,
        });
        const ids = backend.stage(
          Int32Array.from(positions, (p) => (p * 31) % config.vocabSize),
          [n],
          "i32",
        );
        const last = start + n >= T ? backend.stage(Int32Array.from([n - 1]), [1], "i32") : null;
        const ctx = {
          meta,
          attention: gqa,
          kvCaches: caches.latent,
          mlaAttention,
          indexerKeyCaches: caches.indexKeys,
        };
        logits = model.forward(ids, backend.stage(positions, [n], "i32"), ctx, last);
      }
      backend.toHost(logits!);
    };
    run(); // warm-up
    const t = performance.now();
    run();
    const seconds = (performance.now() - t) / 1e3;
    caches.free();
    prefillRows.push({ form, tokens: T, seconds, layerMs: (seconds * 1e3) / N, tokPerS: T / seconds });
    console.log(`prefill T=${T} ${form}: ${seconds.toFixed(2)} s`);
  }
Object.assign(mlaOps.prefill, defaultPrefill);

const ix = config.mla!.indexer!;
console.log(
  `\n### ${config.architecture} (GLM-5 per-layer shape, ${N} of ${full.numHiddenLayers} layers, ${config.moe?.numExperts} of ${full.moe?.numExperts} routed experts, top-${config.moe?.routing.topK}), dummy weights, H200`,
);
console.log(
  `MLA: ${config.numAttentionHeads} heads, kv_lora ${config.mla!.kvLoraRank} + rope ${config.mla!.qkRopeHeadDim}; indexer ${ix.numHeads} x ${ix.headDim}, top-${ix.topk}; roofline ${HBM_BPS / 1e12} TB/s of must-read bytes (lm_head ${(headBytes / 1e6).toFixed(0)} MB timed apart); load ${loadS.toFixed(1)} s`,
);
console.log(
  "\n#### decode (CUDA graph replay)\n\n| batch | context | step ms (N layers) | lm_head ms | per-layer ms | per-layer roofline ms | % of roofline | experts/layer | KV |\n|---|---|---|---|---|---|---|---|---|",
);
for (const r of decodeRows)
  console.log(
    `| ${r.batch} | ${r.context} | ${r.stepMs.toFixed(2)} | ${r.headMs.toFixed(3)} | ${r.layerMs.toFixed(3)} | ${r.layerRooflineMs.toFixed(4)} | ${r.pctRoofline.toFixed(1)}% | ${r.experts.toFixed(1)} | ${r.sharedKv ? "shared" : "per layer"} |`,
  );
console.log(
  "\n#### indexer per decode step, one full layer (logits over the paged keys + top-2048)\n\n| batch | context | logits ms | top-k ms | total ms | keys roofline ms | % of roofline |\n|---|---|---|---|---|---|---|",
);
for (const r of indexerRows) {
  const total = r.logitsMs + r.topkMs;
  console.log(
    `| ${r.batch} | ${r.context} | ${r.logitsMs.toFixed(3)} | ${r.topkMs.toFixed(3)} | ${total.toFixed(3)} | ${r.rooflineMs.toFixed(4)} | ${((100 * r.rooflineMs) / total).toFixed(1)}% |`,
  );
}
console.log(
  `\n#### prefill (chunks of ${CHUNK}, eager; expanded scratch bound ${prefillScratchMiB} MiB)\n\n| attention form | prompt tokens | seconds (N layers) | per-layer ms | tok/s (N layers) |\n|---|---|---|---|---|`,
);
for (const r of prefillRows)
  console.log(
    `| ${r.form} | ${r.tokens} | ${r.seconds.toFixed(2)} | ${r.layerMs.toFixed(1)} | ${r.tokPerS.toFixed(0)} |`,
  );
const json = arg("json", "");
if (json !== "")
  writeFileSync(
    json,
    JSON.stringify(
      { config: config.architecture, layers: N, loadS, decodeRows, indexerRows, prefillRows },
      null,
      2,
    ),
  );
backend.dispose();
