import { readFileSync } from "node:fs";
import { resolveHiSparseConfig } from "../src/config/hisparse_config.js";
import { LLM } from "../src/engine/llm.js";
import { Tokenizer } from "../src/tokenizer/tokenizer.js";

const tok = Tokenizer.fromDir("/work/main/models/ref-small");
const text = readFileSync("/usr/include/X11/Xtrans/Xtranssock.c", "utf8");
const ids = tok.encode(text, { addSpecialTokens: false });
const CONTEXT = 2048,
  PREFIX = 1536,
  NW = Number(process.env.NW ?? 2);
const step = Math.floor((ids.length - CONTEXT) / Math.max(1, NW - 1));
const segs = Array.from({ length: NW }, (_, i) => ids.slice(i * step, i * step + CONTEXT));
async function ppl(bs: number, hs: Record<string, unknown> | null) {
  const llm = new LLM({
    device: "cpu",
    maxModelLen: CONTEXT + 16,
    blockSize: bs,
    extensions: hs ? { hisparse: resolveHiSparseConfig({ mode: "on", minSparseTokens: 0, ...hs }) } : {},
  });
  const outs = await llm.generate(
    segs.map((s) => ({ promptTokenIds: s.slice(0, PREFIX) })),
    segs.map((s) => ({
      temperature: 0,
      maxTokens: CONTEXT - PREFIX,
      ignoreEos: true,
      logprobs: 0,
      forcedTokenIds: s.slice(PREFIX),
    })),
  );
  await llm.shutdown();
  const lps = outs.flatMap((o) => o.outputs[0]!.logprobs!.map((l) => l.sampledLogprob));
  return Math.exp(-lps.reduce((a, b) => a + b, 0) / lps.length);
}
const dense = await ppl(16, null);
console.log("dense", dense.toFixed(3));
for (const bs of (process.env.BS ?? "16,8,4").split(",").map(Number)) {
  const p = await ppl(bs, {
    topk: 256,
    sinkTokens: 64,
    windowTokens: 128,
    ...(process.env.EXTRA ? JSON.parse(process.env.EXTRA) : {}),
  });
  console.log(`bs ${bs}: ppl ${p.toFixed(3)} (${(100 * (p / dense - 1)).toFixed(2)}%)`);
}
