/**
 * Engine-level checks of the CUDA backend (GPU machine):
 *   node dist/scripts/gpu/engine_checks.js [--model DIR]
 * 1. batch invariance: 8 prompts of different lengths generated together, in a block pool small
 *    enough to force chunked prefill and preemption, against each prompt generated alone. bf16
 *    GEMMs and attention reduce in an order that depends on the batch shape (cuBLAS picks kernels
 *    by M; decode attention splits by batch size; recompute after preemption uses the prefill
 *    kernel), so a sequence may part at a bf16 near-tie: accepted only where the solo run's top-2
 *    logprobs are within NEAR_TIE; every divergence is printed with its gap;
 * 2. CUDA graphs: greedy tokens with decode graphs equal those of --enforce-eager;
 * 3. seeded sampling on the device sampler is reproducible across runs.
 * Prints one line per check and RESULT: PASS/FAIL.
 */
import type { TokenLogprobs } from "../../src/core/sched/output.js";
import { LLM, type LLMOptions } from "../../src/engine/llm.js";

/** A divergence counts as a bf16 near-tie below this top-2 logprob gap (as compare_hf.ts). */
const NEAR_TIE = 0.1;

const modelArg = process.argv.indexOf("--model");
const model = modelArg >= 0 ? process.argv[modelArg + 1] : undefined;
const base: LLMOptions = { ...(model ? { model } : {}), device: "cuda", gpuMemoryUtilization: 0.3 };
const prompts = [
  "The Linux kernel",
  "int main(int argc, char **argv) {",
  "PostgreSQL is a powerful, open source object-relational database system that uses and extends the SQL language",
  "Once upon a time",
  "def fibonacci(n):",
  "The access code for the amber falcon vault is 48213. Remember it well, because the door will not open without it.",
  "#include <stdio.h>\n#include <stdlib.h>\n",
  "Perl is a highly capable, feature-rich programming language with over 30 years of development.",
];
const greedy = { temperature: 0, maxTokens: 24, ignoreEos: true, logprobs: 2 };
let failed = 0;

async function tokens(opts: LLMOptions, ps: string[], params: object): Promise<number[][]> {
  return (await run(opts, ps, params)).map((o) => o.ids);
}

async function run(
  opts: LLMOptions,
  ps: string[],
  params: object,
): Promise<{ ids: number[]; lps: TokenLogprobs[] }[]> {
  const llm = new LLM(opts);
  try {
    return (await llm.generate(ps, params)).map((o) => ({
      ids: o.outputs[0]!.tokenIds,
      lps: o.outputs[0]!.logprobs ?? [],
    }));
  } finally {
    await llm.shutdown();
  }
}

/** Compares runs token by token; a divergence passes only at a near-tie of the reference run. */
function reportTieAware(
  name: string,
  got: { ids: number[] }[],
  ref: { ids: number[]; lps: TokenLogprobs[] }[],
  extra: string,
): void {
  let exact = 0;
  let ties = 0;
  let bad = 0;
  for (const [i, r] of ref.entries()) {
    const g = got[i]!.ids;
    const k = r.ids.findIndex((t, j) => g[j] !== t);
    if (k < 0) {
      exact++;
      continue;
    }
    const top = r.lps[k]!.topLogprobs;
    const gap = top[0]! - top[1]!;
    if (gap < NEAR_TIE) ties++;
    else bad++;
    console.log(
      `     prompt ${i}: diverges at token ${k} (${g[k]} vs ${r.ids[k]}), solo top-2 gap ${gap.toFixed(4)}`,
    );
  }
  if (bad > 0) failed++;
  console.log(
    `${bad === 0 ? "ok  " : "FAIL"} ${name}: ${exact}/${ref.length} identical, ${ties} part at a near-tie, ${bad} not ${extra}`,
  );
}

function report(name: string, a: number[][], b: number[][], extra = ""): void {
  const same = a.filter((x, i) => JSON.stringify(x) === JSON.stringify(b[i])).length;
  const ok = same === a.length;
  if (!ok) failed++;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${same}/${a.length} identical ${extra}`);
}

const alone: { ids: number[]; lps: TokenLogprobs[] }[] = [];
for (const p of prompts) alone.push((await run({ ...base, maxModelLen: 256 }, [p], greedy))[0]!);
const tightOpts: LLMOptions = {
  ...base,
  maxModelLen: 64,
  blockSize: 16,
  numGpuBlocksOverride: 6,
  maxNumBatchedTokens: 16,
};
const llm = new LLM(tightOpts);
const engine = await llm.getEngine();
const together = (await llm.generate(prompts, greedy)).map((o) => ({ ids: o.outputs[0]!.tokenIds }));
const preemptions = engine.scheduler.makeStats().numPreemptions;
await llm.shutdown();
reportTieAware("batch invariance (8 together vs alone)", together, alone, `(preemptions: ${preemptions})`);
if (preemptions === 0) {
  failed++;
  console.log("FAIL the tight pool did not preempt");
}

const eager = await tokens({ ...base, maxModelLen: 256, enforceEager: true }, prompts, greedy);
const graphs = await tokens({ ...base, maxModelLen: 256 }, prompts, greedy);
report("CUDA graphs vs --enforce-eager", graphs, eager);

const seeded = { temperature: 0.8, topP: 0.95, topK: 50, maxTokens: 24, seed: 7, ignoreEos: true };
const s1 = await tokens({ ...base, maxModelLen: 256 }, prompts, seeded);
const s2 = await tokens({ ...base, maxModelLen: 256 }, prompts, seeded);
report("seeded device sampling reproducible", s1, s2);

console.log(failed === 0 ? "RESULT: PASS" : `RESULT: FAIL (${failed})`);
process.exit(failed === 0 ? 0 : 1);
