/**
 * The reference latencies of scripts/gpu/multiturn_bench.sh, measured against a running server
 * (hisparse serve, any backend) before its multi-turn sweep:
 * - `--prefill-lens 753,1024`: the TTFT of a cold prompt of each length (distinct random token
 *   ids, so nothing is a prefix hit; one output token; median of `--repeats`);
 * - `--preheat-doc 32768` (needs --enable-prefix-caching): POST /v1/preheat of a document of that
 *   many tokens (its wall time and the route's answer), then `--repeats` questions of
 *   `--question-len` new tokens after it (the median is "the first question's TTFT" of issue
 *   19), and one cold question over another document of the same length (no preheat).
 * TTFT here is the latency of a one-token, non-streamed completion: prefill, one sampled token,
 * the HTTP round trip on loopback.
 *   node dist/scripts/gpu/multiturn_probe.js --base-url http://127.0.0.1:8123 \
 *     --prefill-lens 753,1024 --preheat-doc 32768 --question-len 128 --json probe.json
 * Prints one line per figure; the JSON is {prefill_ttft_ms: {"753": ms, ...}, preheat: {...}}.
 * Exits 1 with a one-line message when a request fails.
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    "base-url": { type: "string", default: "http://127.0.0.1:8000" },
    "prefill-lens": { type: "string", default: "753,1024" },
    repeats: { type: "string", default: "3" },
    "preheat-doc": { type: "string" },
    "question-len": { type: "string", default: "128" },
    seed: { type: "string", default: "1" },
    json: { type: "string" },
  },
});
const baseUrl = values["base-url"]!;
const repeats = Number(values.repeats);
let nextSeed = Number(values.seed) * 7919;

/** `n` token ids in [100, 8100) from a fresh seeded walk (every call a different prompt). */
function freshIds(n: number): number[] {
  let x = (nextSeed++ * 2654435761 + 12345) >>> 0;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out.push(100 + (x % 8000));
  }
  return out;
}

/** POSTs JSON; returns the parsed answer and the wall time in ms. @throws Error on a non-2xx reply. */
async function post(path: string, body: unknown): Promise<{ json: unknown; ms: number }> {
  const t0 = performance.now();
  const r = await fetch(`${baseUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  const ms = performance.now() - t0;
  if (!r.ok) throw new Error(`${path} answered ${r.status}: ${text.slice(0, 300)}`);
  return { json: JSON.parse(text), ms };
}

/** Latency in ms of a one-token greedy completion of `prompt` (token ids). */
async function ttftMs(prompt: number[]): Promise<number> {
  return (await post("/v1/completions", { prompt, max_tokens: 1, temperature: 0 })).ms;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

async function main(): Promise<void> {
  const out: Record<string, unknown> = {};
  // Written after each figure, so that a run cut by a time limit keeps what it measured.
  const save = () => {
    if (values.json !== undefined) writeFileSync(values.json, `${JSON.stringify(out, null, 2)}\n`);
  };
  // A first request warms the server's paths (first prefill of a shape) outside the figures.
  await ttftMs(freshIds(64));
  const prefill: Record<string, number> = {};
  for (const len of values["prefill-lens"]!.split(",")
    .filter((s) => s !== "")
    .map(Number)) {
    const xs: number[] = [];
    for (let i = 0; i < repeats; i++) xs.push(await ttftMs(freshIds(len)));
    prefill[String(len)] = median(xs);
    console.log(`prefill ${len} tokens (cold): median TTFT ${median(xs).toFixed(1)} ms over ${repeats}`);
  }
  out.prefill_ttft_ms = prefill;
  save();
  if (values["preheat-doc"] !== undefined) {
    const docLen = Number(values["preheat-doc"]);
    const qLen = Number(values["question-len"]);
    const doc = freshIds(docLen);
    const heat = await post("/v1/preheat", { prompt: doc });
    console.log(`preheat ${docLen} tokens: ${heat.ms.toFixed(1)} ms, answer ${JSON.stringify(heat.json)}`);
    const hot: number[] = [];
    for (let i = 0; i < repeats; i++) hot.push(await ttftMs([...doc, ...freshIds(qLen)]));
    out.preheat = {
      doc_tokens: docLen,
      question_tokens: qLen,
      preheat_ms: heat.ms,
      answer: heat.json,
      question_ttft_ms: median(hot),
      question_ttft_ms_all: hot,
      cold_question_ttft_ms: null,
    };
    save();
    const cold = await ttftMs([...freshIds(docLen), ...freshIds(qLen)]);
    console.log(
      `question of ${qLen} tokens after the preheated document: median TTFT ${median(hot).toFixed(1)} ms ` +
        `(${hot.map((x) => x.toFixed(1)).join(", ")}); over a cold document: ${cold.toFixed(1)} ms`,
    );
    (out.preheat as Record<string, unknown>).cold_question_ttft_ms = cold;
    save();
  }
}

main().catch((e: unknown) => {
  console.error(`multiturn_probe: ${(e as Error).message}`);
  process.exit(1);
});
