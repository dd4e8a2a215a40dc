/**
 * `runBenchmark` against a scripted loopback server with a virtual clock: every metric of
 * vLLM's result JSON equals the value computed by hand from the script (to float rounding).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatReport } from "../../../src/bench/report.js";
import { type BenchmarkConfig, resultJson, runBenchmark } from "../../../src/bench/serve.js";
import { FakeOpenAIServer, type ScriptedRequest } from "./fake_server.js";

/** Equal up to float rounding (1e-9 relative). */
function close(actual: unknown, expected: number, what: string): void {
  assert.equal(typeof actual, "number", what);
  const a = actual as number;
  assert.ok(Math.abs(a - expected) <= 1e-9 * Math.max(1, Math.abs(expected)), `${what}: ${a} vs ${expected}`);
}

/**
 * Four requests sent at once (rate inf). Times are in seconds; chunks are token chunks.
 * - p0: chunks at 0.25 0.5 0.625 1.0, usage 10 prompt / 4 completion tokens
 *       ttft 0.25, itl [0.25, 0.125, 0.375], e2el 1.0, tpot (1.0 − 0.25)/3 = 0.25
 * - p1: chunks at 0.5 1.5, usage 20 / 2:        ttft 0.5, itl [1.0], e2el 1.5, tpot 1.0
 * - p2: chunk at 0.75, usage 30 / 1:            ttft 0.75, itl [], e2el 0.75, no tpot (1 token)
 * - p3: chunks "a" " b" " c" at 0.125 0.25 2.0, no usage: prompt length = the client's 40,
 *       output = countTokens("a b c") = 3 words; ttft 0.125, itl [0.125, 1.75], e2el 2.0,
 *       tpot (2.0 − 0.125)/2 = 0.9375
 * Duration: 0 → 2.0 (last chunk).
 */
const SCRIPT: ScriptedRequest[] = [
  {
    prompt: "p0",
    chunks: [0.25, 0.5, 0.625, 1.0].map((t) => ({ t, text: "x" })),
    usage: { prompt_tokens: 10, completion_tokens: 4 },
  },
  {
    prompt: "p1",
    chunks: [0.5, 1.5].map((t) => ({ t, text: "y" })),
    usage: { prompt_tokens: 20, completion_tokens: 2 },
  },
  { prompt: "p2", chunks: [{ t: 0.75, text: "z" }], usage: { prompt_tokens: 30, completion_tokens: 1 } },
  {
    prompt: "p3",
    chunks: [
      { t: 0.125, text: "a" },
      { t: 0.25, text: " b" },
      { t: 2.0, text: " c" },
    ],
    usage: null,
  },
];

function config(apiUrl: string, over: Partial<BenchmarkConfig> = {}): BenchmarkConfig {
  return {
    kind: "openai",
    apiUrl,
    model: "fake-model",
    requests: SCRIPT.map((s, i) => ({ prompt: s.prompt, promptLen: 10 * (i + 1), expectedOutputLen: 4 })),
    requestRate: Number.POSITIVE_INFINITY,
    burstiness: 1,
    maxConcurrency: null,
    numWarmups: 0,
    ignoreEos: true,
    selectedMetrics: ["ttft", "tpot", "itl", "e2el"],
    selectedPercentiles: [50, 90, 99],
    goodput: {},
    seed: 0,
    ...over,
  };
}

const countWords = (t: string) => t.split(/\s+/).filter((w) => w.length > 0).length;

describe("bench serve metrics on a scripted server", () => {
  it("four concurrent requests: every vLLM field equals the hand-computed value", async () => {
    const server = new FakeOpenAIServer(SCRIPT);
    const base = await server.listen();
    try {
      const cfg = config(`${base}/v1/completions`, { goodput: { ttft: 500, tpot: 950 }, numWarmups: 2 });
      const r = await runBenchmark(cfg, { clock: server.clock, countTokens: countWords });
      const j = resultJson(r, info(), cfg, true);
      assert.equal(j.duration, 2.0);
      assert.equal(j.completed, 4);
      assert.equal(j.failed, 0);
      // p3 reported no usage: its prompt length is the client's (40), its output counted (3).
      assert.equal(j.total_input_tokens, 10 + 20 + 30 + 40);
      assert.equal(j.total_output_tokens, 4 + 2 + 1 + 3);
      assert.equal(j.request_throughput, 4 / 2.0);
      assert.equal(j.output_throughput, 10 / 2.0);
      assert.equal(j.total_token_throughput, 110 / 2.0);
      // Goodput (ttft <= 500 ms and tpot <= 950 ms): p0 (250, 250) and p3 (125, 937.5) pass;
      // p1 fails tpot (1000), p2 fails ttft (750). 2 good / 2 s.
      assert.equal(j.request_goodput, 1.0);
      // TTFT [0.25, 0.5, 0.75, 0.125]: mean 0.40625; sorted [.125 .25 .5 .75]: median at
      // position 1.5 = 0.375, P90 at 2.7 = 0.675, P99 at 2.97 = 0.7425; population std
      // sqrt(mean of squared deviations [.15625² .09375² .34375² .28125²]) = sqrt(0.0576171875).
      close(j.mean_ttft_ms, 406.25, "mean ttft");
      close(j.median_ttft_ms, 375, "median ttft");
      close(j.p50_ttft_ms, 375, "p50 ttft");
      close(j.p90_ttft_ms, 675, "p90 ttft");
      close(j.p99_ttft_ms, 742.5, "p99 ttft");
      close(j.std_ttft_ms, Math.sqrt(0.0576171875) * 1000, "std ttft");
      // TPOT [0.25, 1.0, 0.9375] (p2 has one token): mean 2.1875/3; sorted [.25 .9375 1]:
      // median 0.9375, P99 at 1.98 = 0.9375 + 0.98 × 0.0625 = 0.99875.
      close(j.mean_tpot_ms, (2.1875 / 3) * 1000, "mean tpot");
      close(j.median_tpot_ms, 937.5, "median tpot");
      close(j.p99_tpot_ms, 998.75, "p99 tpot");
      const tm = 2.1875 / 3;
      close(
        j.std_tpot_ms,
        Math.sqrt(((0.25 - tm) ** 2 + (1 - tm) ** 2 + (0.9375 - tm) ** 2) / 3) * 1000,
        "std tpot",
      );
      // ITL pooled [.25 .125 .375 1.0 .125 1.75]: mean 3.625/6; sorted
      // [.125 .125 .25 .375 1 1.75]: median (0.25 + 0.375)/2 = 0.3125; P99 at 4.95 = 1.7125.
      close(j.mean_itl_ms, (3.625 / 6) * 1000, "mean itl");
      close(j.median_itl_ms, 312.5, "median itl");
      close(j.p99_itl_ms, 1712.5, "p99 itl");
      // E2EL [1.0 1.5 0.75 2.0]: mean 1.3125, median 1.25, P99 at 2.97 = 1.5 + 0.97 × 0.5.
      close(j.mean_e2el_ms, 1312.5, "mean e2el");
      close(j.median_e2el_ms, 1250, "median e2el");
      close(j.p99_e2el_ms, 1985, "p99 e2el");
      // Token chunks per 1-second bucket: [0,1): 7, [1,2): 2 (1.0, 1.5), [2,3): 1.
      assert.equal(j.max_output_tokens_per_s, 7);
      assert.equal(j.max_concurrent_requests, 4);
      assert.deepEqual(j.ttfts, [0.25, 0.5, 0.75, 0.125]);
      assert.deepEqual(j.itls, [[0.25, 0.125, 0.375], [1.0], [], [0.125, 1.75]]);
      assert.deepEqual(j.output_lens, [4, 2, 1, 3]);
      assert.deepEqual(j.input_lens, [10, 20, 30, 40]);
      assert.deepEqual(j.generated_texts, ["xxxx", "yy", "z", "a b c"]);
      // Warm-ups came first; every request streamed with usage and ignore_eos, as vLLM sends.
      const ids = server.received.map((q) => String(q.headers["x-request-id"]));
      assert.deepEqual(ids.slice(0, 2).sort(), ["warmup-0", "warmup-1"]);
      assert.deepEqual(server.received[2]!.body, {
        model: "fake-model",
        stream: true,
        stream_options: { include_usage: true },
        ignore_eos: true,
        prompt: server.received[2]!.body.prompt,
        max_tokens: 4,
      });
    } finally {
      await server.close();
    }
  });

  it("a finite request rate spaces the sends (real sleeps) without changing the server-side timeline", async () => {
    const server = new FakeOpenAIServer(SCRIPT);
    const base = await server.listen();
    try {
      // 1000 req/s: Poisson gaps rescaled so the 4th request leaves 4 ms after the start.
      const cfg = config(`${base}/v1/completions`, { requestRate: 1000, seed: 3 });
      const r = await runBenchmark(cfg, { clock: server.clock, countTokens: countWords });
      const j = resultJson(r, { ...info(), requestRate: 1000 }, cfg, false);
      assert.equal(j.request_rate, 1000);
      assert.equal(j.completed, 4);
      assert.equal(j.total_output_tokens, 10);
      assert.equal(j.duration, 2.0);
      assert.equal(j.ttfts, undefined, "per-request arrays only with --save-detailed");
    } finally {
      await server.close();
    }
  });

  it("max concurrency 1 serialises the requests: each starts when the previous one ends", async () => {
    // Same chunk gaps as above, each request shifted to start at the previous one's end.
    const script: ScriptedRequest[] = [
      {
        prompt: "a",
        chunks: [0.5, 1.0].map((t) => ({ t, text: "." })),
        usage: { prompt_tokens: 5, completion_tokens: 2 },
      },
      {
        prompt: "b",
        chunks: [1.25, 2.0].map((t) => ({ t, text: "." })),
        usage: { prompt_tokens: 5, completion_tokens: 2 },
      },
      {
        prompt: "c",
        chunks: [2.5, 4.0].map((t) => ({ t, text: "." })),
        usage: { prompt_tokens: 5, completion_tokens: 2 },
      },
    ];
    const server = new FakeOpenAIServer(script, 1);
    const base = await server.listen();
    try {
      const cfg = config(`${base}/v1/completions`, {
        maxConcurrency: 1,
        requests: script.map((s) => ({ prompt: s.prompt, promptLen: 5, expectedOutputLen: 2 })),
      });
      const r = await runBenchmark(cfg, { clock: server.clock });
      // Starts 0, 1.0, 2.0: TTFTs 0.5, 0.25, 0.5; E2ELs 1.0, 1.0, 2.0; one request at a time.
      assert.deepEqual(
        r.outputs.map((o) => [o.startTime, o.ttft, o.latency]),
        [
          [0, 0.5, 1.0],
          [1.0, 0.25, 1.0],
          [2.0, 0.5, 2.0],
        ],
      );
      assert.equal(r.durationS, 4.0);
      assert.equal(r.metrics.maxConcurrentRequests, 1);
      // TPOT = (E2EL − TTFT)/(2 − 1): 0.5, 0.75, 1.5 → mean 2.75/3 s.
      close(r.metrics.latency.tpot.mean, (2.75 / 3) * 1000, "mean tpot");
      const report = formatReport(r, { ...cfg, hasGoodput: false }).join("\n");
      assert.match(report, /Maximum request concurrency:\s+1\n/);
      assert.match(report, /Benchmark duration \(s\):\s+4\.00\n/);
      assert.match(report, /Mean TPOT \(ms\):\s+916\.67\n/);
    } finally {
      await server.close();
    }
  });

  it("a failed request counts as failed with the server's message; chat deltas are timed alike", async () => {
    const script: ScriptedRequest[] = [
      {
        prompt: "ok",
        chunks: [0.25, 0.75].map((t) => ({ t, text: "hi" })),
        usage: { prompt_tokens: 7, completion_tokens: 2 },
      },
      { prompt: "bad", chunks: [], usage: null, status: 500 },
    ];
    const server = new FakeOpenAIServer(script);
    const base = await server.listen();
    try {
      const cfg = config(`${base}/v1/chat/completions`, {
        kind: "openai-chat",
        requests: script.map((s) => ({ prompt: s.prompt, promptLen: 3, expectedOutputLen: 2 })),
      });
      const r = await runBenchmark(cfg, { clock: server.clock });
      const j = resultJson(r, info(), cfg, true);
      assert.equal(j.completed, 1);
      assert.equal(j.failed, 1);
      assert.deepEqual(j.errors, ["", "HTTP 500: scripted failure"]);
      assert.deepEqual(j.output_lens, [2, 0]);
      assert.equal(j.total_input_tokens, 7);
      assert.equal(j.duration, 0.75);
      close(j.mean_tpot_ms, 500, "tpot of the chat request");
      assert.deepEqual(j.generated_texts, ["hihi", ""]);
      const chatBody = server.received.find((q) => q.url === "/v1/chat/completions")!.body;
      assert.equal(chatBody.max_completion_tokens, 2);
    } finally {
      await server.close();
    }
  });
});

function info() {
  return {
    backend: "openai" as const,
    modelId: "fake-model",
    tokenizerId: "ref-small",
    numPrompts: 4,
    requestRate: Number.POSITIVE_INFINITY,
    burstiness: 1,
    maxConcurrency: null,
    datasetName: "random",
  };
}
