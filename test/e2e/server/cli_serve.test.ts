/**
 * `hisparse serve` as users run it (a child process, ref-small on the CPU, ephemeral port):
 * it prints one ready line with its URL; the API key can come from $HISPARSE_API_KEY; /health
 * answers in under 100 ms while a prefill of about 2,000 tokens runs (the forward runs on a
 * worker thread, so the event loop stays free); the periodic stats line is logged; SIGTERM
 * shuts it down with exit code 0. With HiSparse on it first logs the settings in effect and the
 * pools' sizes; with HiSparse off it logs no such line.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";
import { assertOpenAIError, postJson, request } from "./helpers.js";

const KEY = "sk-from-env";
/** /health must answer within this while the engine computes (issue 3's acceptance bound). */
const HEALTH_LATENCY_BOUND_MS = 100;

/**
 * Milliseconds the main thread of process `pid` has spent runnable but waiting for a CPU
 * (Linux /proc/PID/task/PID/schedstat, second field); 0 where it cannot be read.
 */
function mainThreadRunQueueWaitMs(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[1]) / 1e6;
  } catch {
    return 0;
  }
}
const PROMPT_TOKENS_AT_LEAST = 2000;

/** Starts `hisparse serve` and resolves with its URL once the ready line appears. */
function spawnServe(
  args: string[],
  env: Record<string, string>,
): Promise<{ proc: ChildProcess; url: string; log: () => string }> {
  const proc = spawn(process.execPath, [join(repoRoot, "bin", "hisparse.js"), "serve", ...args], {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  proc.stdout!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  proc.stderr!.on("data", (d: Buffer) => {
    out += d.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not become ready:\n${out}`)), 60_000);
    const check = () => {
      const m = /hisparse serving ref-small on (http:\/\/127\.0\.0\.1:\d+) /.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        proc.stdout!.off("data", check);
        resolve({ proc, url: m[1]!, log: () => out });
      }
    };
    proc.stdout!.on("data", check);
    proc.on("exit", (code) => reject(new Error(`serve exited with ${code} before it was ready:\n${out}`)));
  });
}

/**
 * Flags of every server these tests start: one CPU-backend thread (on a 2-core machine, CI, two
 * compute threads would take both cores, and /health would then measure the OS scheduler, not
 * the event loop it checks), an ephemeral port, a 4096-token max_model_len.
 */
const BASE_ARGS = ["--device", "cpu", "--cpu-threads", "1", "--port", "0", "--max-model-len", "4096"];

describe("hisparse serve (child process, ref-small, CPU)", () => {
  let proc: ChildProcess;
  let url: string;
  let log: () => string;

  before(async () => {
    ({ proc, url, log } = await spawnServe([...BASE_ARGS, "--stats-interval", "1"], {
      HISPARSE_API_KEY: KEY,
    }));
  });
  after(() => {
    if (proc.exitCode === null) proc.kill("SIGKILL");
  });

  it("prints exactly one ready line with its URL; /v1 needs the key from $HISPARSE_API_KEY", async () => {
    assert.equal(log().match(/hisparse serving ref-small on http:\/\/127\.0\.0\.1:\d+ /g)?.length, 1);
    assert.doesNotMatch(log(), /HiSparse/);
    assertOpenAIError(await request(`${url}/v1/models`), 401, "no key");
    const ok = await request(`${url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(ok.status, 200);
  });

  it(`/health answers in < ${HEALTH_LATENCY_BOUND_MS} ms while a ${PROMPT_TOKENS_AT_LEAST}-token prefill runs`, async (t) => {
    const tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
    const sentence = "The kernel schedules tasks across processors and manages memory for user programs. ";
    let prompt = sentence;
    while (tok.encode(prompt).length < PROMPT_TOKENS_AT_LEAST) prompt += sentence;
    const numPromptTokens = tok.encode(prompt).length;

    let finished = false;
    const completion = postJson(
      `${url}/v1/completions`,
      { prompt, max_tokens: 1, temperature: 0 },
      { authorization: `Bearer ${KEY}` },
    ).finally(() => {
      finished = true;
    });
    const latencies: number[] = [];
    /** Per poll, how long the server's and this client's main threads waited for a CPU meanwhile. */
    const waits: number[] = [];
    while (!finished) {
      const w0 = mainThreadRunQueueWaitMs(proc.pid!) + mainThreadRunQueueWaitMs(process.pid);
      const t0 = performance.now();
      const h = await request(`${url}/health`);
      latencies.push(performance.now() - t0);
      waits.push(mainThreadRunQueueWaitMs(proc.pid!) + mainThreadRunQueueWaitMs(process.pid) - w0);
      assert.equal(h.status, 200);
      await sleep(20);
    }
    const r = await completion;
    assert.equal(r.status, 200);
    assert.equal((r.json as { usage: { prompt_tokens: number } }).usage.prompt_tokens, numPromptTokens);
    // The prefill takes seconds on the CPU backend: many polls overlapped it.
    assert.ok(latencies.length >= 10, `only ${latencies.length} health polls overlapped the prefill`);
    const worst = Math.max(...latencies);
    const at = latencies.indexOf(worst);
    const figures = `slowest /health: ${worst.toFixed(1)} ms over ${latencies.length} polls (the server's and the client's main threads waited ${waits[at]!.toFixed(1)} ms for a CPU meanwhile)`;
    // A slow answer is the server's fault unless the server's or this client's main thread
    // spent the excess waiting in the kernel's run queue (a machine overloaded by other
    // processes); if every slow answer is explained so, the latency could not be measured
    // here: skipped with the figures.
    const slow = latencies.map((l, i) => ({ l, w: waits[i]! })).filter((x) => x.l >= HEALTH_LATENCY_BOUND_MS);
    const unexplained = slow.filter((x) => x.l - x.w >= HEALTH_LATENCY_BOUND_MS);
    assert.equal(unexplained.length, 0, figures);
    if (slow.length > 0) t.skip(`every slow answer is the machine's (overloaded): ${figures}`);
  });

  it("logs the periodic stats line", async () => {
    for (let i = 0; i < 40 && !/Avg prompt throughput: [\d.]+ tokens\/s/.test(log()); i++) await sleep(100);
    assert.match(
      log(),
      /Avg prompt throughput: [\d.]+ tokens\/s, Avg generation throughput: [\d.]+ tokens\/s, Running: \d+ reqs, Waiting: \d+ reqs, CPU KV cache usage: [\d.]+%/,
    );
  });

  it("SIGTERM shuts down gracefully with exit code 0", async () => {
    const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
    proc.kill("SIGTERM");
    assert.equal(await exited, 0);
    assert.match(log(), /SIGTERM received: shutting down/);
  });
});

describe("hisparse serve --enable-hybrid-sparse on (child process, ref-small, CPU)", () => {
  it("logs the HiSparse settings and both pools before the ready line, then stops on SIGTERM", async () => {
    const { proc, log } = await spawnServe(
      [...BASE_ARGS, "--enable-hybrid-sparse", "on", "--hybrid-sparse-topk", "512", "--host-pool-gib", "0.5"],
      {},
    );
    try {
      // Host pool: 0.5 GiB / 32,768 B per page (2 sparse layers × 2 × 16 × 2 × 64 × 4 B) = 16,384
      // pages. Each page keeps on the device its 2 dense layers' KV (32,768 B) and the sparse
      // layers' digests (2 × 2 × 2 × 64 × 4 B = 2,048 B); the device pool gets the rest of the
      // default 1 GiB CPU KV budget: floor((2^30 − 16,384 × 34,816 B) / 32,768 B) = 15,360 blocks.
      const lines = log().split("\n");
      const summary = lines.findIndex((l) => l.includes("HiSparse on:"));
      const ready = lines.findIndex((l) => l.includes("hisparse serving ref-small on"));
      assert.ok(summary >= 0 && summary < ready, log());
      assert.match(
        lines[summary]!,
        /^INFO \S+ \S+ HiSparse on: residency host, topk 512, device_buffer_tokens 1024, min_sparse_tokens 1120; device pool 15360 blocks \(0\.47 GiB\) \+ 0\.53 GiB of dense-layer KV and digests, host pool 16384 pages \(0\.50 GiB\)$/,
      );
      assert.match(lines[ready]!, /, 15360 KV blocks\)$/);
    } finally {
      const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
      proc.kill("SIGTERM");
      assert.equal(await exited, 0);
    }
  });
});
