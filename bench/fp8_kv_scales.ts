/**
 * Where `--kv-cache-dtype fp8` loses perplexity, on the CPU backend (issue 18: dense fp8 KV within
 * 0.5% of bf16). Run: `npx tsx bench/fp8_kv_scales.ts [--model DIR] [--ctx N] [--windows N]
 * [--variants a,b,..] [--out FILE]`.
 *
 * Every variant runs the engine with an f32 cache and rewrites what reshape_and_cache wrote, so one
 * harness measures: the cache rounded to bf16 (the CUDA baseline), e4m3 with vLLM's default scale
 * 1.0 (today's `--kv-cache-dtype fp8`), e4m3 with vLLM's `--calculate-kv-scales` per-layer scales
 * (vllm/model_executor/layers/attention/attention.py calc_kv_scales: on the first real forward,
 * k_scale = amax|k| / K_SCALE_CONSTANT (200), v_scale = amax|v| / V_SCALE_CONSTANT (100), vllm/envs.py;
 * then fixed), e4m3 with amax / 448 (full-range per-tensor scales, as llm-compressor calibrates),
 * and K-only / V-only e4m3 (which half of the cache the loss comes from). The e4m3 rounding is
 * src/backends/fp8.ts roundToE4m3 (the CUDA kernels' order: e4m3(x * (1 / scale)) * scale).
 *
 * Perplexity: src/eval/ppl.ts's protocol (windows of `ctx` tokens, the first 3/4 prefilled, the
 * rest forced one decode step at a time), on /usr/include/*.h concatenated in name order (the
 * text scripts/gpu/hisparse_quality.sh scores on the H200). Code counts: the share of stored
 * elements whose code is subnormal (|x / scale| < 2^-6), zero, or saturated (>= 448).
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { QkvLayout, Tensor } from "../src/backends/backend.js";
import { CpuBackend } from "../src/backends/cpu/cpu_backend.js";
import type { CpuTensor } from "../src/backends/cpu/tensor.js";
import { roundToE4m3 } from "../src/backends/fp8.js";
import { LLM } from "../src/engine/llm.js";
import { pplWindows } from "../src/eval/ppl.js";
import { Tokenizer } from "../src/tokenizer/tokenizer.js";

const argv = process.argv.slice(2);
const arg = (name: string, dflt: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1]! : dflt);
const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const MODEL = arg("--model", "/work/shared/models/ref-base");
const CTX = Number(arg("--ctx", "1024"));
const WINDOWS = Number(arg("--windows", "4"));
const OUT = arg("--out", "");

/** How one half (K or V) of the cache is stored. */
type Store = "f32" | "bf16" | "fp8";
/** Per-tensor scale rule: 1.0, vLLM's amax / (200 | 100), amax / 448, or a fixed number. */
type ScaleRule = "one" | "vllm" | "max448" | number;
interface Variant {
  name: string;
  k: Store;
  v: Store;
  rule: ScaleRule;
  /** Only this layer (0-based) is stored as k / v say; the others are bf16. Absent: every layer. */
  layer?: number;
}
const ALL: Variant[] = [
  { name: "f32", k: "f32", v: "f32", rule: "one" },
  { name: "bf16", k: "bf16", v: "bf16", rule: "one" },
  { name: "fp8", k: "fp8", v: "fp8", rule: "one" },
  { name: "fp8_calib", k: "fp8", v: "fp8", rule: "vllm" },
  { name: "fp8_max448", k: "fp8", v: "fp8", rule: "max448" },
  { name: "fp8_k_only", k: "fp8", v: "bf16", rule: "one" },
  { name: "fp8_v_only", k: "bf16", v: "fp8", rule: "one" },
];
const pick = arg("--variants", ALL.map((v) => v.name).join(",")).split(",");
/** `fp8@L`: e4m3 (scale 1) in layer L only, bf16 elsewhere; `fp8_s=X`: every scale X. */
const VARIANTS = pick.map((name) => {
  const m = /^fp8@(\d+)$/.exec(name);
  if (m !== null) return { name, k: "fp8", v: "fp8", rule: "one", layer: Number(m[1]) } as Variant;
  const c = /^fp8_s=([\d.e+-]+)$/.exec(name);
  if (c !== null) return { name, k: "fp8", v: "fp8", rule: Number(c[1]) } as Variant;
  const v = ALL.find((x) => x.name === name);
  if (v === undefined) throw new Error(`unknown variant ${name}`);
  return v;
});

/** vLLM's divisors of amax (vllm/envs.py K_SCALE_CONSTANT, V_SCALE_CONSTANT). */
const K_SCALE_CONSTANT = 200;
const V_SCALE_CONSTANT = 100;
const E4M3_MIN_NORMAL = 2 ** -6;
const E4M3_MAX = 448;

/** Per-layer state of the current variant: scales fixed at the first call, code counts. */
interface LayerState {
  kScale: number;
  vScale: number;
  kAmax: number;
  vAmax: number;
}
interface Counts {
  n: number;
  /** Σ x^2 and Σ (read back - x)^2 over the stored elements (relative error energy). */
  sumSq: number;
  sumSqErr: number;
  zero: number;
  subnormal: number;
  saturated: number;
}
const newCounts = (): Counts => ({ n: 0, sumSq: 0, sumSqErr: 0, zero: 0, subnormal: 0, saturated: 0 });
let current: Variant = ALL[0]!;
let layers = new Map<Tensor, LayerState>();
let kCounts = newCounts();
let vCounts = newCounts();

const bf = new Float32Array(1);
const bfU = new Uint32Array(bf.buffer);
/** In place: a[start, end) rounded to bf16 (nearest, ties to even). */
function roundToBf16(a: Float32Array, start: number, end: number): void {
  for (let i = start; i < end; i++) {
    bf[0] = a[i]!;
    const u = bfU[0]!;
    bfU[0] = ((u + 0x7fff + ((u >>> 16) & 1)) & 0xffff0000) >>> 0;
    a[i] = bf[0]!;
  }
}

function count(c: Counts, a: Float32Array, start: number, end: number, scale: number): void {
  for (let i = start; i < end; i++) {
    const x = Math.abs(a[i]! / scale);
    c.n++;
    if (x === 0) c.zero++;
    else if (x < E4M3_MIN_NORMAL) c.subnormal++;
    else if (x >= E4M3_MAX) c.saturated++;
  }
}

/** amax of the K and V heads of qkv rows whose slot is not -1: [T, (Hq + 2 Hkv) D]. */
function amaxKv(q: Float32Array, slots: Int32Array, layout: QkvLayout): [number, number] {
  const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
  const row = (Hq + 2 * Hkv) * D;
  let k = 0;
  let v = 0;
  for (let t = 0; t < slots.length; t++) {
    if (slots[t] === -1) continue;
    const b = t * row + Hq * D;
    for (let i = 0; i < Hkv * D; i++) k = Math.max(k, Math.abs(q[b + i]!));
    for (let i = Hkv * D; i < 2 * Hkv * D; i++) v = Math.max(v, Math.abs(q[b + i]!));
  }
  return [k, v];
}

const original = CpuBackend.prototype.reshapeAndCache;
CpuBackend.prototype.reshapeAndCache = function (qkv, layout, kvCache, slotMapping, blockSize) {
  original.call(this, qkv, layout, kvCache, slotMapping, blockSize);
  const q = (qkv as CpuTensor).f32;
  const kv = (kvCache as CpuTensor).f32;
  const slots = (slotMapping as CpuTensor).i32;
  let st = layers.get(kvCache);
  if (st === undefined) {
    // The first batch this layer sees fixes its scales (vLLM: calc_kv_scales runs once).
    const [kAmax, vAmax] = amaxKv(q, slots, layout);
    const rule = current.rule;
    const fixed = rule === "one" ? 1 : typeof rule === "number" ? rule : null;
    const kScale = fixed ?? kAmax / (rule === "vllm" ? K_SCALE_CONSTANT : E4M3_MAX);
    const vScale = fixed ?? vAmax / (rule === "vllm" ? V_SCALE_CONSTANT : E4M3_MAX);
    st = { kScale: Math.fround(kScale), vScale: Math.fround(vScale), kAmax, vAmax };
    layers.set(kvCache, st);
  }
  const w = layout.numKvHeads * layout.headDim;
  const here = current.layer === undefined || current.layer === [...layers.keys()].indexOf(kvCache);
  for (let t = 0; t < slots.length; t++) {
    const slot = slots[t]!;
    if (slot === -1) continue;
    const block = Math.floor(slot / blockSize);
    const kDst = (block * 2 * blockSize + (slot % blockSize)) * w;
    const vDst = kDst + blockSize * w;
    for (const [store, dst, scale, c] of [
      [current.k, kDst, st.kScale, kCounts],
      [current.v, vDst, st.vScale, vCounts],
    ] as const) {
      if (!here) {
        roundToBf16(kv, dst, dst + w);
        continue;
      }
      if (store === "bf16") roundToBf16(kv, dst, dst + w);
      if (store !== "fp8") continue;
      count(c, kv, dst, dst + w, scale);
      const before = kv.slice(dst, dst + w);
      roundToE4m3(kv, dst, dst + w, scale);
      for (let i = 0; i < w; i++) {
        c.sumSq += before[i]! ** 2;
        c.sumSqErr += (kv[dst + i]! - before[i]!) ** 2;
      }
    }
  }
};

/**
 * Per scored token, log p of the forced token (src/eval/ppl.ts's protocol, kept per token): the
 * windows' forced tokens in order.
 */
async function scoreTokens(llm: LLM, windows: readonly number[][], prefixTokens: number): Promise<number[]> {
  const outs = await llm.generate(
    windows.map((w) => ({ promptTokenIds: w.slice(0, prefixTokens) })),
    windows.map((w) => ({
      temperature: 0,
      maxTokens: w.length - prefixTokens,
      ignoreEos: true,
      logprobs: 0,
      forcedTokenIds: w.slice(prefixTokens),
    })),
  );
  return outs.flatMap((o) => o.outputs[0]!.logprobs!.map((l) => l.sampledLogprob));
}

/**
 * Against a reference's per-token log p (same tokens): the perplexity change exp(mean d) - 1 with
 * d = ref - lp (NLL added per token) and its standard error (tokens taken as independent), and
 * the RMS of d (how far the variant moves each token's log p, whatever the sign), all in %.
 */
function pairedDelta(lp: number[], ref: number[]): string {
  const d = lp.map((x, i) => ref[i]! - x);
  const n = d.length;
  const mean = d.reduce((s, x) => s + x, 0) / n;
  const sd = Math.sqrt(d.reduce((s, x) => s + (x - mean) ** 2, 0) / Math.max(1, n - 1));
  const rms = Math.sqrt(d.reduce((s, x) => s + x * x, 0) / n);
  return `${(100 * (Math.exp(mean) - 1)).toFixed(3)}% +- ${((100 * sd) / Math.sqrt(n)).toFixed(3)}% | ${(100 * rms).toFixed(2)}%`;
}

const pct = (a: number, n: number) => (n === 0 ? "-" : `${((100 * a) / n).toFixed(3)}%`);

async function main(): Promise<void> {
  const dir = "/usr/include";
  const text = readdirSync(dir)
    .filter((f) => f.endsWith(".h"))
    .sort()
    .map((f) => readFileSync(join(dir, f), "utf8"))
    .join("");
  const tok = Tokenizer.fromDir(MODEL);
  const opts = { ctx: CTX, prefixTokens: (CTX * 3) / 4, maxWindows: WINDOWS };
  const windows = pplWindows(tok.encode(text, { addSpecialTokens: false }), opts);
  const llm = new LLM({ model: MODEL, device: "cpu", maxModelLen: CTX, inprocWorker: true });
  const lines: string[] = [];
  let base: number | null = null;
  let bf16: number | null = null;
  let bf16Tokens: number[] | null = null;
  const scaleLines: string[] = [];
  try {
    for (const v of VARIANTS) {
      current = v;
      layers = new Map();
      kCounts = newCounts();
      vCounts = newCounts();
      const t0 = Date.now();
      const lp = await scoreTokens(llm, windows, opts.prefixTokens);
      const ppl = Math.exp(-lp.reduce((x, y) => x + y, 0) / lp.length);
      const s = ((Date.now() - t0) / 1000).toFixed(0);
      if (v.name === "f32") base = ppl;
      if (v.name === "bf16") {
        bf16 = ppl;
        bf16Tokens = lp;
      }
      const paired = bf16Tokens === null ? "- | -" : pairedDelta(lp, bf16Tokens);
      const rel = (ref: number | null) => (ref === null ? "-" : `${(100 * (ppl / ref - 1)).toFixed(3)}%`);
      const codes = (c: Counts) =>
        `${pct(c.subnormal, c.n)} / ${pct(c.zero, c.n)} / ${pct(c.saturated, c.n)} / ${c.n === 0 ? "-" : `${(100 * Math.sqrt(c.sumSqErr / c.sumSq)).toFixed(3)}%`}`;
      const line = `| ${v.name} | ${ppl.toFixed(4)} | ${rel(base)} | ${rel(bf16)} | ${codes(kCounts)} | ${codes(vCounts)} | ${paired} | ${s} s |`;
      lines.push(line);
      console.log(line);
      if (v.rule !== "one" || v.name === "fp8") {
        const ls = [...layers.values()];
        scaleLines.push(
          `| ${v.name} | ${ls.map((l) => `${l.kAmax.toFixed(2)}/${l.vAmax.toFixed(2)}`).join(" ")} | ${ls.map((l) => `${l.kScale.toPrecision(3)}/${l.vScale.toPrecision(3)}`).join(" ")} |`,
        );
      }
    }
  } finally {
    await llm.shutdown();
  }
  const report = [
    `${windows.length} windows x ${CTX} tokens (${opts.prefixTokens} prefilled, ${CTX - opts.prefixTokens} scored), ${MODEL}`,
    "",
    "| variant | ppl | vs f32 | vs bf16 | K codes subnormal / zero / saturated / relative RMS error | V codes (same) | ppl vs bf16 +- s.e. (per token) | RMS per-token d NLL vs bf16 | time |",
    "|---|---|---|---|---|---|---|---|---|",
    ...lines,
    "",
    "| variant | per-layer amax K/V (first batch) | per-layer k_scale/v_scale |",
    "|---|---|---|",
    ...scaleLines,
  ].join("\n");
  console.log(`\n${report}`);
  if (OUT !== "") writeFileSync(join(root, OUT), `${report}\n`);
}

await main();
