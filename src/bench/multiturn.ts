/**
 * The multi-turn long-context workload (`hisparse bench serve --dataset multiturn`), shaped like
 * the vLLM Hybrid HiSparse blog's OpenHands-style benchmark: `conversations` conversations run at
 * once, each `turns` turns one after another; turn 1 sends a `firstLen`-token prompt, each later
 * turn sends the whole history (every earlier prompt and reply) plus `turnLen` new tokens, and
 * asks for `outputLen` tokens. With prefix caching a turn should prefill only its new tokens.
 *
 * Prompts go to /v1/completions as token ids, so the history's prompt part is resent exactly;
 * replies come back as text and are re-encoded with the client tokenizer (their tokens may
 * differ from the server's at a boundary, which costs at most the reply's pages a hit). A
 * server without a tokenizer (dummy weights from a bare config.json) streams no text: the reply
 * then enters the history as `usage.completion_tokens` filler ids, so the history keeps its
 * length, and only the reply's pages miss.
 * Reports per turn TTFT (median, mean), the median TTFT of turns 2.. (the blog's figure), decode
 * rate, and the server's own counters read from /metrics before and after the run: prefix-cache
 * hit rate (tokens, by tier when reported), preemptions, and the server-side split of TTFT into
 * queue time and prefill time (vLLM's `vllm:request_queue_time_seconds` and
 * `vllm:request_prefill_time_seconds`, vllm/v1/metrics/stats.py). Those histograms carry no turn,
 * so their means cover every request of the run, turn 1 included; the report says so and sets
 * them beside the client's mean TTFT over the same requests.
 */
import type { DatasetTokenizer } from "./datasets.js";
import { DatasetError } from "./datasets.js";
import {
  type BenchClock,
  HttpAgents,
  type RequestFuncOutput,
  sendStreamingRequest,
  systemClock,
} from "./request_func.js";
import type { Rng } from "./rng.js";
import { meanMs, readServerCounters, type ServerCounters, serverCountersDelta } from "./server_metrics.js";
import { mean, median } from "./stats.js";

/** Shape of the workload (the flags `--multiturn-*`, `--output-len`). */
export interface MultiTurnOptions {
  conversations: number;
  turns: number;
  /** Tokens of turn 1's prompt. */
  firstLen: number;
  /** New tokens of each later turn. */
  turnLen: number;
  /** Tokens asked for per turn (`max_tokens`). */
  outputLen: number;
}

/** The new tokens of each turn of each conversation: [conversation][turn] token ids. */
export function buildConversations(tok: DatasetTokenizer, o: MultiTurnOptions, rng: Rng): number[][][] {
  for (const [k, v] of Object.entries(o))
    if (!Number.isInteger(v) || v < 1)
      throw new DatasetError(`multiturn ${k} must be an integer >= 1, got ${v}`);
  const special = new Set(tok.specialTokenIds);
  const allowed: number[] = [];
  for (let id = 0; id < tok.vocabSize; id++) if (!special.has(id)) allowed.push(id);
  const chunk = (n: number) => Array.from({ length: n }, () => allowed[rng.integer(0, allowed.length - 1)]!);
  return Array.from({ length: o.conversations }, () =>
    Array.from({ length: o.turns }, (_, t) => chunk(t === 0 ? o.firstLen : o.turnLen)),
  );
}

/** `n` token ids in [100, 8100) from a seeded walk (a reply whose text the server did not send). */
function fillerIds(n: number, seed: number): number[] {
  const out: number[] = [];
  let x = (seed * 2654435761 + 1) >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out.push(100 + (x % 8000));
  }
  return out;
}

/** Settings of one multi-turn run. */
export interface MultiTurnConfig {
  /** Base URL of the server, e.g. http://127.0.0.1:8000. */
  baseUrl: string;
  model: string;
  ignoreEos: boolean;
  extraBody?: Record<string, unknown>;
  apiKey?: string;
  options: MultiTurnOptions;
}

/** What a multi-turn run measured (times in seconds). */
export interface MultiTurnResult {
  durationS: number;
  /** [turn] every conversation's output of that turn. */
  turns: RequestFuncOutput[][];
  /** Prompt tokens sent per turn, over the conversations. */
  promptTokens: number[];
  /** Server counters over the run (after − before), null when /metrics was not readable. */
  server: ServerCounters | null;
}

/**
 * Runs every conversation at once, each turn after the previous one's reply.
 * @param conversations from {@link buildConversations}
 */
export async function runMultiTurn(
  cfg: MultiTurnConfig,
  conversations: readonly (readonly number[][])[],
  encode: (text: string) => number[],
  clock: BenchClock = systemClock,
): Promise<MultiTurnResult> {
  const T = cfg.options.turns;
  const turns: RequestFuncOutput[][] = Array.from({ length: T }, () => []);
  const promptTokens = new Array<number>(T).fill(0);
  const agents = new HttpAgents();
  const before = await readServerCounters(cfg.baseUrl, cfg.apiKey);
  const start = clock.now();
  const runConversation = async (c: number) => {
    let history: number[] = [];
    for (let t = 0; t < T; t++) {
      const prompt = [...history, ...conversations[c]![t]!];
      const out = await sendStreamingRequest(
        {
          kind: "openai",
          apiUrl: `${cfg.baseUrl}/v1/completions`,
          model: cfg.model,
          prompt,
          promptLen: prompt.length,
          outputLen: cfg.options.outputLen,
          ignoreEos: cfg.ignoreEos,
          extraBody: cfg.extraBody,
          apiKey: cfg.apiKey,
          requestId: `multiturn-${c}-${t}`,
        },
        clock,
        agents,
      );
      turns[t]!.push(out);
      promptTokens[t]! += prompt.length;
      // A failed turn ends its conversation (the next turn would have no reply to build on).
      if (!out.success) return;
      let reply = encode(out.generatedText);
      if (reply.length === 0 && out.outputTokens > 0) reply = fillerIds(out.outputTokens, c * T + t);
      history = [...prompt, ...reply];
    }
  };
  try {
    await Promise.all(conversations.map((_, c) => runConversation(c)));
  } finally {
    agents.destroy();
  }
  const durationS = clock.now() - start;
  const after = await readServerCounters(cfg.baseUrl, cfg.apiKey);
  const server = before === null || after === null ? null : serverCountersDelta(after, before);
  return { durationS, turns, promptTokens, server };
}

/** Summary figures of a run (also the result JSON's fields). */
export interface MultiTurnSummary {
  conversations: number;
  completed: number;
  failed: number;
  duration: number;
  /** [turn] median and mean TTFT in ms of the successful requests (null when none). */
  median_ttft_ms_by_turn: (number | null)[];
  mean_ttft_ms_by_turn: (number | null)[];
  /** Median TTFT in ms over turns 2..T (every conversation). */
  median_ttft_ms_later_turns: number | null;
  /** Output tokens over the run's wall time. */
  output_throughput: number;
  /** Mean per-request decode rate: (output tokens − 1) / (E2EL − TTFT), tokens/s. */
  mean_decode_tokens_per_s: number | null;
  /** Server-reported prefix-cache hit rate over the run (hits / queries, tokens), and the host tier's share. */
  prefix_cache_hit_rate: number | null;
  prefix_cache_host_hit_rate: number | null;
  num_preemptions: number | null;
  /** Client mean TTFT in ms over every successful request (all turns: the population of the server split). */
  mean_ttft_ms_all_turns: number | null;
  /**
   * The server's split of TTFT, means in ms over every request the server finished during the run
   * (all turns; `server_requests` of them): TTFT at the engine = queue + prefill.
   */
  server_requests: number | null;
  mean_server_ttft_ms: number | null;
  mean_queue_time_ms: number | null;
  mean_prefill_time_ms: number | null;
}

/** Computes the summary. */
export function summarizeMultiTurn(r: MultiTurnResult, o: MultiTurnOptions): MultiTurnSummary {
  const ok = (xs: RequestFuncOutput[]) => xs.filter((x) => x.success);
  const ms = (xs: number[]) => (xs.length === 0 ? null : xs);
  const all = r.turns.flat();
  const later = r.turns.slice(1).flatMap((xs) => ok(xs).map((x) => x.ttft * 1000));
  const rates = ok(all)
    .filter((x) => x.outputTokens > 1 && x.latency > x.ttft)
    .map((x) => (x.outputTokens - 1) / (x.latency - x.ttft));
  const s = r.server;
  const rate = (num: number | null | undefined) =>
    s === null || num === null || num === undefined || s.prefixQueries === null || s.prefixQueries <= 0
      ? null
      : num / s.prefixQueries;
  return {
    conversations: o.conversations,
    completed: ok(all).length,
    failed: all.length - ok(all).length,
    duration: r.durationS,
    median_ttft_ms_by_turn: r.turns.map((xs) => {
      const v = ms(ok(xs).map((x) => x.ttft * 1000));
      return v === null ? null : median(v);
    }),
    mean_ttft_ms_by_turn: r.turns.map((xs) => {
      const v = ms(ok(xs).map((x) => x.ttft * 1000));
      return v === null ? null : mean(v);
    }),
    median_ttft_ms_later_turns: later.length === 0 ? null : median(later),
    output_throughput: ok(all).reduce((a, x) => a + x.outputTokens, 0) / Math.max(r.durationS, 1e-9),
    mean_decode_tokens_per_s: rates.length === 0 ? null : mean(rates),
    prefix_cache_hit_rate: rate(s?.prefixHits),
    prefix_cache_host_hit_rate: rate(s?.prefixHostHits),
    num_preemptions: s?.preemptions ?? null,
    mean_ttft_ms_all_turns: ok(all).length === 0 ? null : mean(ok(all).map((x) => x.ttft * 1000)),
    server_requests: s?.prefillTime?.count ?? null,
    mean_server_ttft_ms: meanMs(s?.ttft),
    mean_queue_time_ms: meanMs(s?.queueTime),
    mean_prefill_time_ms: meanMs(s?.prefillTime),
  };
}

/** The text report: one line per turn, then the run's figures. */
export function formatMultiTurnReport(
  sum: MultiTurnSummary,
  o: MultiTurnOptions,
  r: MultiTurnResult,
): string[] {
  const f = (v: number | null, d = 2) => (v === null ? "n/a" : v.toFixed(d));
  const pct = (v: number | null) => (v === null ? "n/a" : `${(100 * v).toFixed(1)}%`);
  const lines = [
    `============ Multi-turn Benchmark Result ============`,
    `Conversations: ${o.conversations}, turns: ${o.turns}, first turn: ${o.firstLen} tokens, later turns: +${o.turnLen}, output: ${o.outputLen}`,
    `Successful requests: ${sum.completed}, failed: ${sum.failed}`,
    `Benchmark duration (s): ${sum.duration.toFixed(2)}`,
    "turn  prompt tokens (mean)  median TTFT (ms)  mean TTFT (ms)",
  ];
  r.turns.forEach((xs, t) => {
    const n = Math.max(1, xs.length);
    lines.push(
      `${String(t + 1).padStart(4)}  ${String(Math.round(r.promptTokens[t]! / n)).padStart(20)}  ${f(sum.median_ttft_ms_by_turn[t] ?? null).padStart(16)}  ${f(sum.mean_ttft_ms_by_turn[t] ?? null).padStart(14)}`,
    );
  });
  lines.push(
    `Median TTFT of turns 2-${o.turns} (ms): ${f(sum.median_ttft_ms_later_turns)}`,
    `Output token throughput (tok/s): ${f(sum.output_throughput)}`,
    `Mean decode rate per request (tok/s): ${f(sum.mean_decode_tokens_per_s)}`,
    `Prefix cache hit rate (server): ${pct(sum.prefix_cache_hit_rate)} (host tier: ${pct(sum.prefix_cache_host_hit_rate)})`,
    `Preemptions (server): ${sum.num_preemptions ?? "n/a"}`,
    `TTFT split (server /metrics, all turns: ${sum.server_requests ?? "n/a"} requests; its histograms have no turn):`,
    `  Mean queue time (ms): ${f(sum.mean_queue_time_ms)}`,
    `  Mean prefill time (ms): ${f(sum.mean_prefill_time_ms)}`,
    `  Mean TTFT, server (ms): ${f(sum.mean_server_ttft_ms)}`,
    `  Mean TTFT, client, all turns (ms): ${f(sum.mean_ttft_ms_all_turns)}`,
    "=".repeat(52),
  );
  return lines;
}
