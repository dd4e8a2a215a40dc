/**
 * Prints the markdown table of scripts/gpu/multiturn_bench.sh from the result JSONs that
 * `hisparse bench serve --dataset multiturn --save-result` wrote (one file per engine
 * configuration, each an array over conversation counts, or one object).
 *   node dist/scripts/gpu/multiturn_table.js LABEL=FILE.json [LABEL=FILE.json ...]
 * A missing or unreadable file gives a row saying so (a run that timed out).
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
  turns: number;
  first_turn_len: number;
  later_turn_len: number;
  output_len: number;
}

const f = (v: number | null | undefined, d = 0) => (v === null || v === undefined ? "n/a" : v.toFixed(d));
const pct = (v: number | null | undefined) =>
  v === null || v === undefined ? "n/a" : `${(100 * v).toFixed(1)}%`;

const lines = [
  "| engine | conversations | median TTFT turn 1 (ms) | median TTFT turns 2+ (ms) | decode tok/s per request | output tok/s | prefix hit rate (host share) | preemptions | failed | duration (s) |",
  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
];
let shape = "";
for (const arg of process.argv.slice(2)) {
  const i = arg.indexOf("=");
  const [label, file] = i < 0 ? [arg, arg] : [arg.slice(0, i), arg.slice(i + 1)];
  let rows: Row[];
  try {
    const j = JSON.parse(readFileSync(file, "utf8")) as Row | Row[];
    rows = Array.isArray(j) ? j : [j];
  } catch (e) {
    lines.push(`| ${label} | – | no result (${(e as Error).message.split("\n")[0]}) | | | | | | | |`);
    continue;
  }
  for (const r of rows) {
    shape ||= `${r.turns} turns, first turn ${r.first_turn_len} tokens, later turns +${r.later_turn_len}, ${r.output_len} output tokens`;
    lines.push(
      `| ${label} | ${r.conversations} | ${f(r.median_ttft_ms_by_turn[0])} | ${f(r.median_ttft_ms_later_turns)} | ${f(r.mean_decode_tokens_per_s, 1)} | ${f(r.output_throughput, 1)} | ${pct(r.prefix_cache_hit_rate)} (${pct(r.prefix_cache_host_hit_rate)}) | ${r.num_preemptions ?? "n/a"} | ${r.failed} | ${f(r.duration, 1)} |`,
    );
  }
}
if (shape !== "") console.log(`Multi-turn workload: ${shape}.`);
for (const l of lines) console.log(l);
