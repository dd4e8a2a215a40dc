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
 * in every run. What the test needs to know is whether a late answer was our code holding the
 * event loop or the machine giving the process no CPU, so it reads how long this process's
 * threads waited in the kernel's run queue (Linux /proc/self/task/N/schedstat) during each
 * answer and gap: a miss covered by that wait is the machine's ("starved"). If every run missed
 * only by starvation (a machine with dozens of runnable threads per core), the test is skipped
 * with the figures; a miss the run queue does not explain fails it.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
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

/**
 * Milliseconds each thread of this process has spent runnable but waiting for a CPU (second
 * field of /proc/self/task/TID/schedstat), by thread id; empty where the file does not exist.
 */
function runQueueWaitMs(): Map<string, number> {
  const out = new Map<string, number>();
  try {
    for (const tid of readdirSync("/proc/self/task")) {
      try {
        const f = readFileSync(`/proc/self/task/${tid}/schedstat`, "utf8").split(" ");
        out.set(tid, Number(f[1]) / 1e6);
      } catch {
        // the thread ended meanwhile
      }
    }
  } catch {
    // not Linux: no starvation evidence, every miss counts
  }
  return out;
}

/** Longest run-queue wait of one thread between two readings (the main thread's when `tid` given). */
function waitBetween(a: Map<string, number>, b: Map<string, number>, tid?: string): number {
  if (tid !== undefined) return (b.get(tid) ?? 0) - (a.get(tid) ?? 0);
  let m = 0;
  for (const [t, w] of b) m = Math.max(m, w - (a.get(t) ?? w));
  return m;
}

const MAIN_TID = String(process.pid);

/** One measured interval: its length and the run-queue wait that may explain it. */
interface Interval {
  ms: number;
  waitMs: number;
}

/** What one run measured. */
interface RunFigures {
  health: Interval[];
  gaps: Interval[];
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

/**
 * Polls /health every HEALTH_PERIOD_MS until stopped; each latency from its own send, with the
 * main thread's run-queue wait meanwhile (only the main thread answers /health).
 */
function pollHealth(url: string): { stop: () => Promise<Interval[]> } {
  const latencies: Interval[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const w0 = runQueueWaitMs();
      const t0 = performance.now();
      const r = await request(`${url}/health`);
      latencies.push({ ms: performance.now() - t0, waitMs: waitBetween(w0, runQueueWaitMs(), MAIN_TID) });
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

/**
 * A streamed completion; token chunk arrival times recorded until `cancel()`, each with a
 * run-queue reading (a gap needs the engine's thread and the main thread: the longer wait of
 * any one thread is the one that may explain it).
 */
function streamTokens(url: string): {
  times: number[];
  waits: Map<string, number>[];
  firstTokens: Promise<void>;
  cancel: () => Promise<void>;
} {
  const times: number[] = [];
  const waits: Map<string, number>[] = [];
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
        const w = runQueueWaitMs();
        for (const e of events) {
          if (!e.includes('"text"')) continue;
          times.push(now);
          waits.push(w);
        }
        if (times.length >= 10) gotFirst();
      }
    } catch (e) {
      if (!ctl.signal.aborted) throw e;
    }
  })();
  return {
    times,
    waits,
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
    const healthIntervals = await health.stop();
    await stream.cancel();
    // Gaps from the second token on (the first follows the prefill).
    const gaps: Interval[] = [];
    for (let i = 2; i < stream.times.length; i++) {
      gaps.push({
        ms: stream.times[i]! - stream.times[i - 1]!,
        waitMs: waitBetween(stream.waits[i - 1]!, stream.waits[i]!),
      });
    }
    return {
      health: healthIntervals,
      gaps,
      tokensAfterBigRequests: stream.times.length - tokensAtEnd,
      replies,
    };
  }

  /**
   * How a run did: "pass" (both bounds met), "starved" (every miss is covered by the time its
   * threads waited for a CPU), or "fail" (a miss our own code must have caused).
   */
  function judge(f: RunFigures): { verdict: "pass" | "starved" | "fail"; line: string } {
    const med = median(f.gaps.map((g) => g.ms));
    const misses: { excess: number; waitMs: number }[] = [];
    for (const h of f.health)
      if (h.ms > HEALTH_BOUND_MS) misses.push({ excess: h.ms - HEALTH_BOUND_MS, waitMs: h.waitMs });
    for (const g of f.gaps) {
      const excess = g.ms - med - GAP_OVER_MEDIAN_BOUND_MS;
      if (excess > 0) misses.push({ excess, waitMs: g.waitMs });
    }
    const worstHealth = f.health.reduce((a, h) => (h.ms > a.ms ? h : a));
    const worstGap = f.gaps.reduce((a, g) => (g.ms > a.ms ? g : a));
    const line =
      `${f.health.length} /health polls, slowest ${worstHealth.ms.toFixed(1)} ms (main thread waited ${worstHealth.waitMs.toFixed(1)} ms for a CPU); ` +
      `${f.gaps.length} token gaps, median ${med.toFixed(1)} ms, largest ${worstGap.ms.toFixed(1)} ms ` +
      `(+${(worstGap.ms - med).toFixed(1)}; a thread waited ${worstGap.waitMs.toFixed(1)} ms)`;
    if (misses.length === 0) return { verdict: "pass", line };
    return { verdict: misses.every((m) => m.waitMs >= m.excess) ? "starved" : "fail", line };
  }

  it("/health within 200 ms and the stream's largest token gap within 500 ms of its median, during 4 MiB prompts", async (t) => {
    const verdicts: string[] = [];
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const f = await run();
      // What each request got back: the bound refused the 4 MiB texts without tokenizing them;
      // the 150 KB one was tokenized and refused with its exact length.
      assert.match(f.replies[0]!.message, /your prompt is 4194304 bytes, which is at least \d+ tokens/);
      assert.match(f.replies[1]!.message, /your messages render to \d+ bytes, which is at least \d+ tokens/);
      assert.match(f.replies[2]!.message, /you requested 37500 tokens in the prompt/);
      assert.ok(f.tokensAfterBigRequests > 0, "the stream went on after the large requests");
      assert.ok(f.health.length >= 5, `only ${f.health.length} /health polls overlapped`);
      const { verdict, line } = judge(f);
      t.diagnostic(`run ${attempt}: ${verdict}: ${line}`);
      if (verdict === "pass") return;
      verdicts.push(`${verdict}: ${line}`);
    }
    const failed = verdicts.filter((v) => v.startsWith("fail"));
    assert.equal(failed.length, 0, `runs the run queue does not explain:\n${failed.join("\n")}`);
    t.skip(
      `every run missed only while this process waited for a CPU (the machine is overloaded): ${verdicts.join(" | ")}`,
    );
  });

  it("a client that leaves while its prompt is tokenized cancels it; the pool serves the next one", async () => {
    const ctl = new AbortController();
    const gone = fetch(`${server.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: underBound,
      signal: ctl.signal,
    }).catch((e: Error) => e.name);
    await sleep(50);
    ctl.abort();
    assert.equal(await gone, "AbortError");
    const r = await postJson(`${server.url}/v1/completions`, { prompt: "The Linux kernel", max_tokens: 2 });
    assert.equal(r.status, 200, r.text);
    assert.equal((r.json as { usage: { completion_tokens: number } }).usage.completion_tokens, 2);
  });

  it("nothing is left in the engine afterwards", async () => {
    await assertPoolFullyFree(server.url);
  });
});
