/**
 * How often the exact two-level Quest check (bench/quest_two_level_lib.ts) passes on
 * real activations (issue 18): ref-small on the CPU backend, forced decoding over a C file as in
 * bench/hisparse_scorers.ts, 4-token sub-page digests (S = 4 at 16-token pages), bf16 and fp8.
 * Every sparse selection (request, layer, kv head) runs the engine's QuestSelector as usual and,
 * beside it, the two-level top-k for each candidate factor c (M = c * k candidates); a passing
 * check must give the same pages as the engine (it exits 1 otherwise). Prints per c: the check's
 * pass rate, and the exact rescoring work as a share of the full score's (M / pages scored, plus
 * the page bounds: 1 / S of a full score), where a failing check adds a full score; and M*, the
 * fewest candidates with which the check would pass, per selection (median, p10, p90).
 *   npx tsx bench/quest_two_level.ts [--context 4096] [--decode 256] [--topk 512] [--segments 2]
 *     [--c 1.5,2,3,4] [--dtypes bf16,fp8] [--file PATH]
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { QuestSelector } from "../src/attention/sparse/quest.js";
import { type DigestDtype, resolveHiSparseConfig } from "../src/config/hisparse_config.js";
import { LLM } from "../src/engine/llm.js";
import { Tokenizer } from "../src/tokenizer/tokenizer.js";
import type { QuestInternals } from "./hisparse_oracle.js";
import { questPageBound, questSubPageScore, twoLevelTopK } from "./quest_two_level_lib.js";

const argv = process.argv.slice(2);
const opt = (name: string, d: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1]! : d);
const CONTEXT = Number(opt("--context", "4096"));
const DECODE = Number(opt("--decode", "256"));
const TOPK = Number(opt("--topk", String(CONTEXT / 8)));
const SEGMENTS = Number(opt("--segments", "2"));
const FACTORS = opt("--c", "1.5,2,3,4").split(",").map(Number);
const DTYPES = opt("--dtypes", "bf16,fp8").split(",") as DigestDtype[];
const FILE = opt("--file", "/usr/include/X11/Xlib.h");
const MODEL = opt("--model", "/work/shared/models/ref-small");
const BS = 16;
const DIGEST_TOKENS = 4;

/** Per candidate factor: selections checked, checks passed, exact pages rescored, pages in all. */
interface Tally {
  checks: number;
  passed: number;
  candidates: number;
  pages: number;
}
let tallies: Tally[] = [];
/**
 * Per selection, M* = the pages whose bound reaches T* (the k-th largest exact score of all): the
 * check passes exactly when M >= M* (fewer candidates leave a page with U >= T* >= T outside).
 * As shares of the pages scored, and as multiples of k.
 */
let needShare: number[] = [];
let needPerK: number[] = [];

/** QuestSelector internals read here (see QuestInternals): the digests and the query gather. */
type Internals = QuestInternals & {
  digests: Float32Array[];
  groupQuery(x: Float32Array, t: number, g: number, Hq: number, Hkv: number): Float32Array;
};
const proto = QuestSelector.prototype as unknown as Internals;
const engineSelectOne = proto.selectOne;
proto.selectOne = function (this: Internals, li, x, batch, s, g, Hq, Hkv) {
  const want = engineSelectOne.call(this, li, x, batch, s, g, Hq, Hkv);
  const { blockSize: bs, layout } = this.config;
  const D = layout.headDim;
  const S = this.budget.digestsPerPage;
  const numPages = Math.ceil(batch.numTokens[s]! / bs);
  if (numPages <= this.budget.budgetPages) return want;
  const p0 = batch.pageStart[s]!;
  const windowStart = numPages - this.budget.windowPages;
  const forced = (p: number) => p < this.budget.sinkPages || p >= windowStart || batch.pinned[p0 + p] === 1;
  const rest: number[] = [];
  for (let p = 0; p < numPages; p++) if (!forced(p)) rest.push(p);
  const k = this.budget.budgetPages - (numPages - rest.length);
  if (k <= 0) return want;
  const q = this.groupQuery(x, batch.tokenIdx[s]!, g, Hq, Hkv);
  const dg = this.digests[li]!;
  const box = new Float32Array(2 * Hkv * D);
  const hb = (p: number) => batch.hostBlockIds[p0 + p]!;
  const U = new Map(rest.map((p) => [p, questPageBound(q, Hq / Hkv, dg, hb(p), S, g, Hkv, D, box)]));
  const exact = (p: number) => questSubPageScore(q, Hq / Hkv, dg, hb(p), S, g, Hkv, D);
  const wantSet = new Set(want);
  const exactAll = rest.map(exact).sort((a, b) => b - a);
  const tStar = exactAll[k - 1]!;
  const mStar = rest.filter((p) => U.get(p)! >= tStar).length;
  needShare.push(mStar / rest.length);
  needPerK.push(mStar / k);
  FACTORS.forEach((c, i) => {
    const r = twoLevelTopK(rest, (p) => U.get(p)!, exact, k, Math.ceil(c * k));
    const t = tallies[i]!;
    t.checks++;
    t.candidates += r.numCandidates;
    t.pages += rest.length;
    if (r.top === null) return;
    t.passed++;
    if (r.top.length !== k || r.top.some((p) => !wantSet.has(p))) {
      console.error(`two-level selection differs from the engine's: layer ${li} head ${g} c ${c}`);
      process.exit(1);
    }
  });
  return want;
};

async function run(prompts: number[][], forcedIds: number[][], digestDtype: DigestDtype): Promise<void> {
  const llm = new LLM({
    model: MODEL,
    device: "cpu",
    maxModelLen: CONTEXT + 16,
    blockSize: BS,
    inprocWorker: true,
    extensions: {
      hisparse: resolveHiSparseConfig({
        mode: "on",
        topk: TOPK,
        minSparseTokens: 0,
        digestTokens: DIGEST_TOKENS,
        digestDtype,
      }),
    },
  });
  try {
    await llm.generate(
      prompts.map((p) => ({ promptTokenIds: p })),
      forcedIds.map((f) => ({ temperature: 0, maxTokens: f.length, ignoreEos: true, forcedTokenIds: f })),
    );
  } finally {
    await llm.shutdown();
  }
}

const tok = Tokenizer.fromDir(MODEL);
const ids = tok.encode(readFileSync(FILE, "utf8"), { addSpecialTokens: false });
if (ids.length < CONTEXT) throw new Error(`${FILE}: ${ids.length} tokens, fewer than --context ${CONTEXT}`);
const stepW = Math.floor((ids.length - CONTEXT) / Math.max(1, SEGMENTS - 1));
const segs = Array.from({ length: SEGMENTS }, (_, i) => ids.slice(i * stepW, i * stepW + CONTEXT));
const prompts = segs.map((sg) => sg.slice(0, CONTEXT - DECODE));
const forcedIds = segs.map((sg) => sg.slice(CONTEXT - DECODE));
console.log(
  `${join(MODEL)} on ${FILE}: ${SEGMENTS} x ${CONTEXT} tokens (${DECODE} decoded), pages of ${BS}, ` +
    `${DIGEST_TOKENS}-token digests, topk ${TOPK}`,
);
for (const dtype of DTYPES) {
  tallies = FACTORS.map(() => ({ checks: 0, passed: 0, candidates: 0, pages: 0 }));
  needShare = [];
  needPerK = [];
  const t0 = Date.now();
  await run(prompts, forcedIds, dtype);
  console.log(`digest dtype ${dtype} (${((Date.now() - t0) / 1000).toFixed(0)} s):`);
  const S = BS / DIGEST_TOKENS;
  const q = (v: number[], f: number) => [...v].sort((a, b) => a - b)[Math.floor(f * (v.length - 1))] ?? 0;
  console.log(
    `  M* (candidates the check needs): median ${(100 * q(needShare, 0.5)).toFixed(1)}% of the pages ` +
      `(p10 ${(100 * q(needShare, 0.1)).toFixed(1)}%, p90 ${(100 * q(needShare, 0.9)).toFixed(1)}%), ` +
      `median ${q(needPerK, 0.5).toFixed(1)} x k`,
  );
  FACTORS.forEach((c, i) => {
    const t = tallies[i]!;
    const pass = t.passed / Math.max(1, t.checks);
    // Work in full-score units: bounds (1/S), candidates rescored, and a full score on failure.
    const work = 1 / S + t.candidates / Math.max(1, t.pages) + (1 - pass);
    console.log(
      `  c ${String(c).padEnd(4)} checks ${t.checks}  passed ${(100 * pass).toFixed(1)}%  ` +
        `candidates ${((100 * t.candidates) / Math.max(1, t.pages)).toFixed(1)}% of pages  ` +
        `work ${work.toFixed(2)} x the full score`,
    );
  });
}
