/**
 * A short HiSparse run on CUDA for `compute-sanitizer --tool memcheck` (scripts/gpu/hisparse_check.sh):
 * ref-small, three prompts, 40 greedy tokens each, on the worker's own thread, in three
 * configurations: `on` with every request host-resident after prefill (CUDA graphs: selection,
 * resolver with UVA swap-in from pinned memory, per-head attention, side-stream mirrors), the same
 * with --enforce-eager (the eager path, mixed batches included), and `auto` under pressure
 * (spills). A small topk (24 tokens: sink, window and one scored page) makes the selection real.
 * Run (compiled): node dist/scripts/gpu/hisparse_sequence.js  -> prints "hisparse-sequence: ok ..." and exits 0.
 */
import { resolveHiSparseConfig } from "../../src/config/hisparse_config.js";
import { LLM } from "../../src/engine/llm.js";
import { loadFixture, refModelDir } from "../../test/helpers/reference.js";

const dir = refModelDir("ref-small");
if (dir === null) throw new Error("ref-small not found");
const prompts = loadFixture("ref-small")
  .slice(0, 3)
  .map((c) => ({ promptTokenIds: c.input_ids }));
const sparse = { topk: 24, deviceBufferTokens: 32, sinkTokens: 8, windowTokens: 8 };
const runs = [
  { name: "on graphs", numGpuBlocksOverride: 128, enforceEager: false, mode: "on" as const },
  { name: "on eager", numGpuBlocksOverride: 128, enforceEager: true, mode: "on" as const },
  { name: "auto pressure", numGpuBlocksOverride: 14, enforceEager: false, mode: "auto" as const },
  // fp8 host pages: the mirror quantises, the resolver's copy pass and the loads dequantise.
  { name: "on fp8 host", numGpuBlocksOverride: 128, enforceEager: false, mode: "on" as const, fp8Host: true },
];
const summary: string[] = [];
/** Prompts of at most 13 tokens + 40 outputs: up to 7 pages of 8, of which Quest scores 5. */
const MAX_TOKENS = 40;
for (const r of runs) {
  const llm = new LLM({
    model: dir,
    device: "cuda",
    inprocWorker: true,
    maxModelLen: 64,
    blockSize: 8,
    maxNumSeqs: 4,
    gpuMemoryUtilization: 0.3,
    numGpuBlocksOverride: r.numGpuBlocksOverride,
    enforceEager: r.enforceEager,
    extensions: {
      hisparse: resolveHiSparseConfig({
        ...sparse,
        mode: r.mode,
        minSparseTokens: 0,
        hostKvCacheDtype: "fp8Host" in r ? "fp8" : "auto",
      }),
    },
  });
  try {
    const engine = await llm.getEngine();
    const outs = await llm.generate(prompts, { temperature: 0, maxTokens: MAX_TOKENS, ignoreEos: true });
    const st = engine.hisparse!.stats();
    summary.push(
      `${r.name}: ${outs.reduce((n, o) => n + o.outputs[0]!.tokenIds.length, 0)} tokens, spilled ${st.spilledPagesTotal}, hits ${st.hitsTotal}, misses ${st.missesTotal}`,
    );
  } finally {
    await llm.shutdown();
  }
}
console.log(`hisparse-sequence: ok (${summary.join("; ")})`);
