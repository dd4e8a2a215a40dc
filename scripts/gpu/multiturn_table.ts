/**
 * Prints the markdown tables of scripts/gpu/multiturn_bench.sh from the result JSONs that
 * `hisparse bench serve --dataset multiturn --save-result` wrote (one file per engine
 * configuration and conversation count, each one object or an array) and the reference
 * latencies of scripts/gpu/multiturn_probe.ts (one file per engine configuration):
 *   node dist/scripts/gpu/multiturn_table.js LABEL=RESULT.json ... probe:LABEL=PROBE.json ...
 * 1. per engine and conversation count: median TTFT of turns 2..T and its ratio to a cold
 *    753-token prefill on the same server (`--turn-ref`, default 753), decode rate, prefix hit
 *    rate, preemptions, and the TTFT split over all turns: the client's mean TTFT beside the
 *    server's mean queue time and mean prefill time (vllm:request_queue_time_seconds,
 *    vllm:request_prefill_time_seconds: their histograms have no turn, so every request of the run
 *    counts, turn 1 included); then the largest conversation count each engine ran without
 *    preemption;
 * 2. median TTFT per turn, with the cold prefill as the last column;
 * 3. the preheat figure (a probe with `preheat`): the first question's TTFT after a preheated
 *    document against a cold prefill of `--preheat-ref` tokens (default 1024).
 * A missing or unreadable file gives a row saying so (a run that timed out or was skipped).
 */
import { readFileSync } from "node:fs";

interface Row {
  conversations: number;
  completed: number;
  failed: number;
  duration: number;
  median_ttft_ms_by_turn: (number | null)[];
  median_ttft_ms_later_turns: number | null;
  output_throughput: number;
  mean_decode_tokens_per_s: number | null;
  prefix_cache_hit_rate: number | null;
  prefix_cache_host_hit_rate: number | null;
  num_preemptions: number | null;
  /** Absent in results written before the split existed. */
  mean_ttft_ms_all_turns?: number | null;
  mean_queue_time_ms?: number | null;
  mean_prefill_time_ms?: number | null;
  turns: number;
  first_turn_len: number;
  later_turn_len: number;
  output_len: number;
}

interface Probe {
  prefill_ttft_ms?: Record<string, number>;
  preheat?: {
    doc_tokens: number;
    question_tokens: number;
    preheat_ms: number;
    answer: unknown;
    question_ttft_ms: number;
    question_ttft_ms_all?: number[];
    cold_question_ttft_ms: number | null;
  };
}

const f = (v: number | null | undefined, d = 0) => (v === null || v === undefined ? "n/a" : v.toFixed(d));
const pct = (v: number | null | undefined) =>
  v === null || v === undefined ? "n/a" : `${(100 * v).toFixed(1)}%`;
const ratio = (a: number | null | undefined, b: number | null | undefined) =>
  a === null || a === undefined || b === null || b === undefined || b <= 0 ? "n/a" : `${(a / b).toFixed(2)}x`;

let turnRef = "753";
let preheatRef = "1024";
const results: { label: string; file: string; rows: Row[] | null; error?: string }[] = [];
const probes = new Map<string, Probe>();
const args = process.argv.slice(2);
for (let k = 0; k < args.length; k++) {
  const arg = args[k]!;
  if (arg === "--turn-ref" || arg === "--preheat-ref") {
    const v = args[++k] ?? "";
    if (arg === "--turn-ref") turnRef = v;
    else preheatRef = v;
    continue;
  }
  const isProbe = arg.startsWith("probe:");
  const a = isProbe ? arg.slice("probe:".length) : arg;
  const i = a.indexOf("=");
  const [label, file] = i < 0 ? [a, a] : [a.slice(0, i), a.slice(i + 1)];
  try {
    const j = JSON.parse(readFileSync(file, "utf8")) as unknown;
    if (isProbe) probes.set(label, j as Probe);
    else results.push({ label, file, rows: Array.isArray(j) ? (j as Row[]) : [j as Row] });
  } catch (e) {
    const why =
      (e as { code?: string }).code === "ENOENT"
        ? "skipped, failed or cut by the time limit"
        : (e as Error).message.split("\n")[0];
    if (!isProbe) results.push({ label, file, rows: null, error: why });
  }
}

const refOf = (label: string) => probes.get(label)?.prefill_ttft_ms?.[turnRef] ?? null;
const ok = results.flatMap((r) => (r.rows ?? []).map((row) => ({ label: r.label, row })));
const first = ok[0]?.row;
if (first !== undefined)
  console.log(
    `Multi-turn workload: ${first.turns} turns, first turn ${first.first_turn_len} tokens, later turns +${first.later_turn_len}, ${first.output_len} output tokens.`,
  );
console.log();
console.log(
  `| engine | conversations | median TTFT turns 2-${first?.turns ?? "T"} (ms) | vs cold ${turnRef}-token prefill | mean TTFT all turns (ms) | server queue / prefill, all turns (ms) | decode tok/s per request | output tok/s | prefix hit rate (host share) | preemptions | failed | duration (s) |`,
);
console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const r of results) {
  if (r.rows === null) {
    const c = /_c(\d+)\.json$/.exec(r.file)?.[1] ?? "–";
    console.log(`| ${r.label} | ${c} | no result (${r.error}) | | | | | | | | | |`);
    continue;
  }
  for (const row of r.rows)
    console.log(
      `| ${r.label} | ${row.conversations} | ${f(row.median_ttft_ms_later_turns)} | ${ratio(row.median_ttft_ms_later_turns, refOf(r.label))} | ${f(row.mean_ttft_ms_all_turns)} | ${f(row.mean_queue_time_ms)} / ${f(row.mean_prefill_time_ms)} | ${f(row.mean_decode_tokens_per_s, 1)} | ${f(row.output_throughput, 1)} | ${pct(row.prefix_cache_hit_rate)} (${pct(row.prefix_cache_host_hit_rate)}) | ${row.num_preemptions ?? "n/a"} | ${row.failed} | ${f(row.duration, 1)} |`,
    );
}

console.log();
console.log(
  "Mean TTFT all turns: the client's, over every request of the run; server queue / prefill: the server's means over the same requests (vllm:request_queue_time_seconds: arrival to first scheduled; vllm:request_prefill_time_seconds: first scheduled to first token, every step of the prompt, shared steps included), turn 1 included since the histograms have no turn; their sum is the server's TTFT.",
);

// The capacity target: most conversations run to the end with no preemption and no failure.
console.log();
for (const label of [...new Set(results.map((r) => r.label))]) {
  const clean = ok
    .filter((x) => x.label === label && x.row.num_preemptions === 0 && x.row.failed === 0)
    .map((x) => x.row.conversations);
  const ran = ok.filter((x) => x.label === label).map((x) => x.row.conversations);
  console.log(
    `- ${label}: most conversations without preemption: ${clean.length === 0 ? "none" : Math.max(...clean)} (ran: ${ran.join(", ") || "none"})`,
  );
}

const T = Math.max(0, ...ok.map((x) => x.row.median_ttft_ms_by_turn.length));
if (T > 0) {
  console.log();
  console.log(`Median TTFT per turn (ms); last column: a cold ${turnRef}-token prefill on the same server.`);
  console.log();
  const turns = Array.from({ length: T }, (_, t) => `t${t + 1}`);
  console.log(`| engine | conversations | ${turns.join(" | ")} | ${turnRef}-token prefill |`);
  console.log(`|---|---:|${turns.map(() => "---:|").join("")}---:|`);
  for (const { label, row } of ok)
    console.log(
      `| ${label} | ${row.conversations} | ${turns.map((_, t) => f(row.median_ttft_ms_by_turn[t])).join(" | ")} | ${f(refOf(label), 1)} |`,
    );
}

for (const [label, p] of probes) {
  const h = p.preheat;
  if (h === undefined) continue;
  const ref = p.prefill_ttft_ms?.[preheatRef] ?? null;
  const { id: _, object: __, model: ___, ...answer } = (h.answer ?? {}) as Record<string, unknown>;
  const each = (h.question_ttft_ms_all ?? []).map((x) => x.toFixed(1)).join(", ");
  console.log();
  console.log(
    `Preheat (${label}): a ${h.doc_tokens}-token document preheated in ${f(h.preheat_ms)} ms (answer ${JSON.stringify(answer)}); ` +
      `the first question (${h.question_tokens} new tokens) after it: TTFT ${f(h.question_ttft_ms, 1)} ms (median of ${each}), ` +
      `${ratio(h.question_ttft_ms, ref)} a cold ${preheatRef}-token prefill (${f(ref, 1)} ms; target <= 2x); ` +
      `the same question over a cold document: ${f(h.cold_question_ttft_ms, 1)} ms.`,
  );
}
