/**
 * Page-scorer study (evaluation only), CPU backend, ref-small: perplexity through the decode
 * path (forced tokens) on the C file of bench/hisparse_quality.ts, dense vs sparse with the page
 * ranking replaced by one scorer at a time. Scores are computed from the host tier's copy of the
 * keys (min / max / mean per page recomputed each step), so any digest can be tried without
 * changing the engine:
 *   npx tsx bench/hisparse_scorers.ts [--scorers a,b] [--topk 256] [--sink 64] [--window 128]
 *     [--block-size 16] [--segments 4]
 * Scorers, per page p and GQA group (q heads h, D head dim, c = 1/sqrt(D)):
 *   quest-sum   sum_h bound_h(p), bound_h = sum_i max(q_hi min_i, q_hi max_i) (the engine's former rule)
 *   quest-max   max_h bound_h(p) (the engine's rule since this study: quest.ts questScore)
 *   quest-subN  max_h max over the page's sub-pages of N tokens of bound_h(sub-page) (sub-page digests)
 *   quest-lse   sum_h exp(c (bound_h(p) - M_h)), M_h = max over candidate pages of bound_h
 *   mean-lse    sum_h exp(c (q_h . mean(p) - M_h))
 *   oracle      sum_h sum_t exp(c q_h . k_t) (exact mass, not normalized per head)
 *   oracle-norm sum_h sum_t exp(c (q_h . k_t - M_h)) / sum over pages (normalized per head)
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { QuestSelector } from "../src/attention/sparse/quest.js";
import { resolveHiSparseConfig } from "../src/config/hisparse_config.js";
import { LLM } from "../src/engine/llm.js";
import { Tokenizer } from "../src/tokenizer/tokenizer.js";
import { type QuestInternals, trackHostTier } from "./hisparse_oracle.js";

const argv = process.argv.slice(2);
const opt = (name: string, d: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1]! : d);
const SCORERS = opt("--scorers", "quest-sum,quest-max,quest-lse,mean-lse,oracle,oracle-norm").split(",");
const TOPK = Number(opt("--topk", "256"));
const SINK = Number(opt("--sink", "64"));
const WINDOW = Number(opt("--window", "128"));
const BS = Number(opt("--block-size", "16"));
const SEGMENTS = Number(opt("--segments", "4"));
const FILE = opt("--file", "/usr/include/X11/Xtrans/Xtranssock.c");
const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const MODEL = join(root, "models", "ref-small");
const CONTEXT = 2048;
const PREFIX = 1536;

const hostTier = trackHostTier();
let scorer = "quest-sum";
/** Label channels per (layer, kv head): the R channels with the largest mean |k| over the prefix (DoubleSparsity-style static choice). */
const R = Number(opt("--r", "8"));
const chanCache = new Map<string, number[]>();
let chanKeys: { keys: Float32Array; D: number; Hkv: number; bs: number; blocks: number[] } | null = null;
function channels(li: number, g: number): number[] {
  const key = `${li}:${g}`;
  const hit = chanCache.get(key);
  if (hit) return hit;
  const { keys, D, Hkv, bs, blocks } = chanKeys!;
  const m = new Float64Array(D);
  for (const hb of blocks)
    for (let o = 0; o < bs; o++)
      for (let i = 0; i < D; i++) m[i]! += Math.abs(keys[(hb * 2 * bs + o) * Hkv * D + g * D + i]!);
  const ch = Array.from({ length: D }, (_, i) => i)
    .sort((a, b) => m[b]! - m[a]!)
    .slice(0, R);
  chanCache.set(key, ch);
  return ch;
}
(QuestSelector.prototype as unknown as QuestInternals).selectOne = function (
  this: QuestInternals,
  li,
  x,
  batch,
  s,
  g,
  Hq,
  Hkv,
) {
  const { blockSize: bs, layout } = this.config;
  const D = layout.headDim;
  const G = Hq / Hkv;
  const c = 1 / Math.sqrt(D);
  const numPages = Math.ceil(batch.numTokens[s]! / bs);
  const all = Array.from({ length: numPages }, (_, p) => p);
  if (numPages <= this.budget.budgetPages) return all;
  const p0 = batch.pageStart[s]!;
  const keep = new Uint8Array(numPages);
  for (const p of all) if (p < this.budget.sinkPages || p >= numPages - this.budget.windowPages) keep[p] = 1;
  const k = this.budget.budgetPages - keep.reduce((a, b) => a + b, 0);
  if (k <= 0) return all.filter((p) => keep[p] === 1);
  const keys = hostTier()!.layers[li]! as Float32Array; // f32 pages: the study keeps host_kv_cache_dtype auto
  const row = (Hq + 2 * Hkv) * D;
  const q0 = batch.tokenIdx[s]! * row;
  const cand = all.filter((p) => keep[p] === 0);
  if (scorer.startsWith("label") && !chanCache.has(`${li}:${g}`))
    chanKeys = { keys, D, Hkv, bs, blocks: cand.map((p) => batch.hostBlockIds[p0 + p]!) };
  // per[h][j]: per-head statistic of candidate j
  const per = Array.from({ length: G }, () => new Float64Array(cand.length));
  cand.forEach((p, j) => {
    const hb = batch.hostBlockIds[p0 + p]!;
    const ko = (o: number) => (hb * 2 * bs + o) * Hkv * D + g * D;
    for (let hh = 0; hh < G; hh++) {
      const q = q0 + (g * G + hh) * D;
      if (scorer.startsWith("oracle") || scorer.startsWith("label")) {
        const chans = scorer.startsWith("label") ? channels(li, g) : null;
        const dots: number[] = [];
        for (let o = 0; o < bs; o++) {
          let d = 0;
          if (chans === null) for (let i = 0; i < D; i++) d += x[q + i]! * keys[ko(o) + i]!;
          else for (const i of chans) d += x[q + i]! * keys[ko(o) + i]!;
          dots.push(d);
        }
        const m = Math.max(...dots);
        per[hh]![j] = m + Math.log(dots.reduce((a, d) => a + Math.exp(c * (d - m)), 0)) / c; // logsumexp / c
        continue;
      }
      if (scorer.startsWith("quest-sub")) {
        // Sub-page digests: the page's bound is the largest of its sub-pages' bounds.
        const sub = Number(scorer.slice("quest-sub".length));
        let best = -Infinity;
        for (let o0 = 0; o0 < bs; o0 += sub) {
          let v = 0;
          for (let i = 0; i < D; i++) {
            let mn = Infinity;
            let mx = -Infinity;
            for (let o = o0; o < Math.min(o0 + sub, bs); o++) {
              const kv = keys[ko(o) + i]!;
              if (kv < mn) mn = kv;
              if (kv > mx) mx = kv;
            }
            const qi = x[q + i]!;
            v += Math.max(qi * mn, qi * mx);
          }
          if (v > best) best = v;
        }
        per[hh]![j] = best;
        continue;
      }
      let v = 0;
      for (let i = 0; i < D; i++) {
        let mn = Infinity;
        let mx = -Infinity;
        let sum = 0;
        for (let o = 0; o < bs; o++) {
          const kv = keys[ko(o) + i]!;
          if (kv < mn) mn = kv;
          if (kv > mx) mx = kv;
          sum += kv;
        }
        const qi = x[q + i]!;
        v += scorer === "mean-lse" ? (qi * sum) / bs : Math.max(qi * mn, qi * mx);
      }
      per[hh]![j] = v;
    }
  });
  const score = new Float64Array(cand.length);
  for (let hh = 0; hh < G; hh++) {
    const M = Math.max(...per[hh]!);
    for (let j = 0; j < cand.length; j++) {
      const b = per[hh]![j]!;
      if (scorer === "quest-sum") score[j]! += b;
      else if (scorer === "quest-max" || scorer.startsWith("quest-sub"))
        score[j] = hh === 0 ? b : Math.max(score[j]!, b);
      else if (scorer === "oracle" || scorer.startsWith("label-raw")) score[j]! += Math.exp(c * b);
      else score[j]! += Math.exp(c * (b - M)); // quest-lse, mean-lse, oracle-norm
    }
  }
  if (scorer === "oracle-norm" || scorer.startsWith("label-norm")) {
    // normalize per head: recompute with per-head totals
    score.fill(0);
    for (let hh = 0; hh < G; hh++) {
      const M = Math.max(...per[hh]!);
      let z = 0;
      for (let j = 0; j < cand.length; j++) z += Math.exp(c * (per[hh]![j]! - M));
      for (let j = 0; j < cand.length; j++) score[j]! += Math.exp(c * (per[hh]![j]! - M)) / z;
    }
  }
  const order = cand.map((p, j) => [score[j]!, p] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  for (let i = 0; i < k; i++) keep[order[i]![1]] = 1;
  return all.filter((p) => keep[p] === 1);
};

async function ppl(prompts: number[][], forced: number[][], sparse: boolean): Promise<number> {
  const llm = new LLM({
    model: MODEL,
    device: "cpu",
    maxModelLen: CONTEXT + 16,
    blockSize: BS,
    inprocWorker: true,
    extensions: sparse
      ? {
          hisparse: resolveHiSparseConfig({
            mode: "on",
            topk: TOPK,
            sinkTokens: SINK,
            windowTokens: WINDOW,
            minSparseTokens: 0,
          }),
        }
      : {},
  });
  try {
    const res = await llm.generate(
      prompts.map((p) => ({ promptTokenIds: p })),
      forced.map((f) => ({
        temperature: 0,
        maxTokens: f.length,
        ignoreEos: true,
        logprobs: 0,
        forcedTokenIds: f,
      })),
    );
    const lps = res.flatMap((o) => (o.outputs[0]!.logprobs ?? []).map((l) => l.sampledLogprob));
    return Math.exp(-lps.reduce((a, b) => a + b, 0) / lps.length);
  } finally {
    await llm.shutdown();
  }
}

const tok = Tokenizer.fromDir(MODEL);
const ids = tok.encode(readFileSync(FILE, "utf8"), { addSpecialTokens: false });
const stepW = Math.floor((ids.length - CONTEXT) / Math.max(1, SEGMENTS - 1));
const segs = Array.from({ length: SEGMENTS }, (_, i) => ids.slice(i * stepW, i * stepW + CONTEXT));
const prompts = segs.map((s) => s.slice(0, PREFIX));
const forced = segs.map((s) => s.slice(PREFIX));
const dense = await ppl(prompts, forced, false);
console.log(
  `file ${FILE} topk ${TOPK} sink ${SINK} window ${WINDOW} block ${BS}: dense ppl ${dense.toFixed(3)}`,
);
for (const sc of SCORERS) {
  scorer = sc;
  chanCache.clear();
  const p = await ppl(prompts, forced, true);
  console.log(`  ${sc.padEnd(12)} ppl ${p.toFixed(3)}  ${(100 * (p / dense - 1)).toFixed(2)}%`);
}
