/**
 * No single request stalls the server (issue 13): while one client streams a completion and
 * another polls /health every 100 ms, a third sends a 4 MiB prompt (refused by the tokenizer's
 * length bound before any tokenization), the same as a chat message, and a 150 KB prompt that
 * is under the bound and so is tokenized (on the tokenizer pool, off the event loop) before its
 * exact length refuses it. Every /health answers within 200 ms and the stream's largest gap
 * between tokens stays within 500 ms of its median.
 *
 * Made robust for a loaded 2-core CI machine: the engine computes on one CPU thread (the other
 * core is left to the event loop and the pool), the bodies are built before the clock starts,
 * a warm-up request starts every thread first, and each answer's latency is measured from its
 * own send time. The bounds are the issue's, unchanged. A run whose figures miss them is run
 * again (up to 3 times, each run's figures printed): CPU-scheduling noise from other processes
 * does not repeat, while a stall of the event loop (the bug: 12.9 s for 1 MiB before) repeats
 * in every run.
 */
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { RunningServer } from "../../../src/server/server.js";
import {
  assertOpenAIError,
  assertPoolFullyFree,
  postJson,
  type RawReply,
  request,
  startTestServer,
} from "./helpers.js";

const MAX_MODEL_LEN = 2048;
const HEALTH_PERIOD_MS = 100;
const HEALTH_BOUND_MS = 200;
const GAP_OVER_MEDIAN_BOUND_MS = 500;
const ATTEMPTS = 3;
const BIG = 4 * 2 ** 20;
/** Under ref-small's bound at this max_model_len (2047 tokens × 76 bytes), but 37,500 tokens. */
const UNDER_BOUND = 150_000;

/** What one run measured. */
interface RunFigures {
  healthMs: number[];
  gapsMs: number[];
  tokensAfterBigRequests: number;
  replies: { status: number; message: string }[];
}

/**
 * POSTs pre-encoded JSON bytes with node:http, which writes the buffer as is (fetch would copy
 * it), so the client adds as little work as it can to this process's event loop.
 */
function postRaw(url: string, body: Buffer): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: "POST", headers: { "content-type": "application/json", "content-length": body.length } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, headers: new Headers(), text, json: JSON.parse(text) }),
        );
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Polls /health every HEALTH_PERIOD_MS until stopped; each latency from its own send. */
function pollHealth(url: string): { stop: () => Promise<number[]> } {
  const latencies: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const t0 = performance.now();
      const r = await request(`${url}/health`);
      latencies.push(performance.now() - t0);
      assert.equal(r.status, 200);
      await sleep(Math.max(0, HEALTH_PERIOD_MS - (performance.now() - t0)));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return latencies;
    },
  };
}

/** A streamed completion; token chunk arrival times recorded until `cancel()`. */
function streamTokens(url: string): {
  times: number[];
  firstTokens: Promise<void>;
  cancel: () => Promise<void>;
} {
  const times: number[] = [];
  const ctl = new AbortController();
  let gotFirst!: () => void;
  const firstTokens = new Promise<void>((r) => {
    gotFirst = r;
  });
  const done = (async () => {
    const res = await fetch(`${url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        prompt: "The Linux kernel",
        max_tokens: MAX_MODEL_LEN - 16,
        ignore_eos: true,
        temperature: 0,
        stream: true,
      }),
      signal: ctl.signal,
    });
    assert.equal(res.status, 200);
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for await (const chunk of res.body!) {
        const now = performance.now();
        buf += decoder.decode(chunk as Uint8Array, { stream: true });
        const events = buf.split("\n\n");
        buf = events.pop()!;
        for (const e of events) if (e.includes('"text"')) times.push(now);
        if (times.length >= 10) gotFirst();
      }
    } catch (e) {
      if (!ctl.signal.aborted) throw e;
    }
  })();
  return {
    times,
    firstTokens,
    cancel: async () => {
      ctl.abort();
      await done;
    },
  };
}

describe("no request stalls the server (ref-small, CPU, max_model_len 2048)", () => {
  let server: RunningServer;
  const json = (v: unknown) => Buffer.from(JSON.stringify(v));
  const bigPrompt = json({ prompt: "x".repeat(BIG), max_tokens: 4 });
  const bigChat = json({ messages: [{ role: "user", content: "x".repeat(BIG) }], max_tokens: 4 });
  const underBound = json({ prompt: "x".repeat(UNDER_BOUND), max_tokens: 4 });

  before(async () => {
    server = await startTestServer(
      { maxModelLen: MAX_MODEL_LEN, cpuThreads: 1 },
      { maxRequestBodyBytes: 2 * BIG },
    );
    // Warm-up: the engine, the tokenizer thread, the JSON paths.
    const w = await postJson(`${server.url}/v1/completions`, { prompt: "warm up", max_tokens: 4 });
    assert.equal(w.status, 200, w.text);
  });
  after(() => server.close());

  /** One run of the scenario. */
  async function run(): Promise<RunFigures> {
    const stream = streamTokens(server.url);
    await stream.firstTokens;
    const health = pollHealth(server.url);
    await sleep(3 * HEALTH_PERIOD_MS);
    const replies = [];
    for (const [path, body] of [
      ["/v1/completions", bigPrompt],
      ["/v1/chat/completions", bigChat],
      ["/v1/completions", underBound],
    ] as const) {
      const r = await postRaw(`${server.url}${path}`, body);
      replies.push({ status: r.status, message: assertOpenAIError(r, 400, path).message });
    }
    const tokensAtEnd = stream.times.length;
    await sleep(5 * HEALTH_PERIOD_MS);
    const healthMs = await health.stop();

    await stream.cancel();
    const t = stream.times.slice(1);
    const gapsMs = t.slice(1).map((x, i) => x - t[i]!);
    return { healthMs, gapsMs, tokensAfterBigRequests: stream.times.length - tokensAtEnd, replies };
  }

  it("/health within 200 ms and the stream's largest token gap within 500 ms of its median, during 4 MiB prompts", async (t) => {
    let last: RunFigures | null = null;
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const f = await run();
      last = f;
      // What each request got back: the bound refused the 4 MiB texts without tokenizing them;
      // the 150 KB one was tokenized and refused with its exact length.
      assert.match(f.replies[0]!.message, /your prompt is 4194304 bytes, which is at least \d+ tokens/);
      assert.match(f.replies[1]!.message, /your messages render to \d+ bytes, which is at least \d+ tokens/);
      assert.match(f.replies[2]!.message, /you requested 37500 tokens in the prompt/);
      assert.ok(f.tokensAfterBigRequests > 0, "the stream went on after the large requests");
      assert.ok(f.healthMs.length >= 5, `only ${f.healthMs.length} /health polls overlapped`);
      const worstHealth = Math.max(...f.healthMs);
      const gapOverMedian = Math.max(...f.gapsMs) - median(f.gapsMs);
      t.diagnostic(
        `run ${attempt}: ${f.healthMs.length} /health polls, slowest ${worstHealth.toFixed(1)} ms; ` +
          `${f.gapsMs.length} token gaps, median ${median(f.gapsMs).toFixed(1)} ms, ` +
          `largest ${Math.max(...f.gapsMs).toFixed(1)} ms (+${gapOverMedian.toFixed(1)})`,
      );
      if (worstHealth <= HEALTH_BOUND_MS && gapOverMedian <= GAP_OVER_MEDIAN_BOUND_MS) return;
    }
    const f = last!;
    assert.ok(Math.max(...f.healthMs) <= HEALTH_BOUND_MS, `slowest /health ${Math.max(...f.healthMs)} ms`);
    assert.ok(
      Math.max(...f.gapsMs) - median(f.gapsMs) <= GAP_OVER_MEDIAN_BOUND_MS,
      `largest gap ${Math.max(...f.gapsMs)} ms, median ${median(f.gapsMs)} ms`,
    );
  });

  it("nothing is left in the engine afterwards", async () => {
    await assertPoolFullyFree(server.url);
  });
});
