/**
 * The hot-buffer hit rate of a trained reference model in long decodes (issue 18: the hit rate
 * the 8B-shape throughput benchmark's selection overlap p stands for), GPU machine:
 *   node dist/scripts/gpu/quest_hit_rate.js --model DIR --text FILE [--ctx 8192] [--windows 2]
 *     [--decode 2048] [--block-size 16] [--device cuda|cpu]
 * Per window of `ctx` tokens of real text: the first ctx - decode tokens are the prompt (a dense
 * prefill), then `decode` decode steps run Quest HiSparse (`on`, every page host-resident after
 * the prefill) with topk = ctx / 8, the default sinks, window and hot buffer (2 x topk): once
 * with forced tokens (the text's own continuation, the perplexity path) and once greedy (the
 * model's own continuation). Prints per run the resolver's hits and misses over the selected
 * host-resident pages (the hit rate bench/hisparse_throughput.ts prints too), misses per decode
 * step, and the perplexity of the forced run; last line "hit rate: forced X%, greedy Y%".
 * ref-base was trained at 8192 tokens (../shared/models/README.md), so ctx stays <= 8192.
 */
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { resolveHiSparseConfig } from "../../src/config/hisparse_config.js";
import { LLM } from "../../src/engine/llm.js";
import { Tokenizer } from "../../src/tokenizer/tokenizer.js";

const arg = (name: string, d: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : d;
};
const modelDir = arg("model", "");
const textFile = arg("text", "");
if (modelDir === "" || textFile === "")
  throw new Error("quest_hit_rate: --model DIR and --text FILE are required");
const CTX = Number(arg("ctx", "8192"));
const DECODE = Number(arg("decode", "2048"));
const WINDOWS = Number(arg("windows", "2"));
const BLOCK = Number(arg("block-size", "16"));
const TOPK = CTX / 8;
if (!(DECODE > 0 && DECODE < CTX) || TOPK % BLOCK !== 0)
  throw new Error(`quest_hit_rate: need 0 < decode < ctx and ctx / 8 a multiple of the block size`);

const tok = Tokenizer.fromDir(modelDir);
const ids = tok.encode(readFileSync(textFile, "utf8"), { addSpecialTokens: false });
if (ids.length < CTX)
  throw new Error(`quest_hit_rate: ${textFile} has ${ids.length} tokens, fewer than --ctx ${CTX}`);
const stride = Math.floor((ids.length - CTX) / Math.max(1, WINDOWS - 1));
const segs = Array.from({ length: WINDOWS }, (_, i) => ids.slice(i * stride, i * stride + CTX));
const prompts = segs.map((s) => s.slice(0, CTX - DECODE));
const forced = segs.map((s) => s.slice(CTX - DECODE));

/** One engine run over every window; @returns the hit rate. */
async function run(kind: "forced" | "greedy"): Promise<number> {
  // Device pool for every window at once (no spill is needed: `on` offloads after prefill), 1 GiB pinned.
  const hs = resolveHiSparseConfig({ mode: "on", topk: TOPK, minSparseTokens: 0, hostPoolBytes: 2 ** 30 });
  const llm = new LLM({
    model: modelDir,
    device: arg("device", "cuda") as "cuda" | "cpu",
    maxModelLen: CTX + 16,
    blockSize: BLOCK,
    numGpuBlocksOverride: WINDOWS * Math.ceil((CTX + 16) / BLOCK) + 16,
    extensions: { hisparse: hs },
  });
  const t0 = performance.now();
  try {
    const engine = await llm.getEngine();
    const params = prompts.map((_, i) => ({
      temperature: 0,
      maxTokens: DECODE,
      ignoreEos: true,
      ...(kind === "forced" ? { logprobs: 0, forcedTokenIds: forced[i]! } : {}),
    }));
    const res = await llm.generate(
      prompts.map((p) => ({ promptTokenIds: p })),
      params,
    );
    const st = engine.hisparse?.stats();
    if (st === undefined) throw new Error("quest_hit_rate: the engine has no HiSparse stats");
    const lps = res.flatMap((o) => (o.outputs[0]!.logprobs ?? []).map((l) => l.sampledLogprob));
    const ppl = lps.length > 0 ? Math.exp(-lps.reduce((a, b) => a + b, 0) / lps.length) : Number.NaN;
    const decoded = res.reduce((a, o) => a + o.outputs[0]!.tokenIds.length, 0);
    const rate = st.hitsTotal / Math.max(1, st.hitsTotal + st.missesTotal);
    console.log(
      `${kind}: ${WINDOWS} windows of ${CTX} tokens, ${decoded} decode steps, topk ${TOPK}, buffer ${hs.deviceBufferTokens}, sinks ${hs.sinkTokens}, window ${hs.windowTokens}: ` +
        `hits ${st.hitsTotal}, misses ${st.missesTotal}, hit rate ${(100 * rate).toFixed(2)}%, ` +
        `${(st.missesTotal / Math.max(1, decoded)).toFixed(1)} misses per decode step` +
        (kind === "forced" ? `, ppl ${ppl.toFixed(3)}` : "") +
        `, ${((performance.now() - t0) / 1000).toFixed(0)} s`,
    );
    return rate;
  } finally {
    await llm.shutdown();
  }
}

const f = await run("forced");
const g = await run("greedy");
console.log(`hit rate: forced ${(100 * f).toFixed(2)}%, greedy ${(100 * g).toFixed(2)}%`);
