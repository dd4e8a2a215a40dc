/**
 * `hisparse bench serve` as users run it (child process): one-line errors for bad arguments,
 * a run against a loopback server writing vLLM's JSON, and a concurrency sweep writing its SVG.
 * Timings are real here, so only counts and structure are asserted (the exact metric values are
 * checked with a virtual clock in test/unit/bench/serve.test.ts).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { repoRoot } from "../../helpers/reference.js";
import { ECHO_PROMPT_TOKENS, startEchoServer } from "./echo_server.js";

/** Runs the CLI without blocking the event loop (the test's server answers meanwhile). */
function hisparse(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(repoRoot, "bin", "hisparse.js"), ...args], {
    env: { ...process.env, HISPARSE_DEBUG: "" },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c) => {
    stdout += c;
  });
  child.stderr.on("data", (c) => {
    stderr += c;
  });
  return new Promise((resolve) => child.on("close", (status) => resolve({ status, stdout, stderr })));
}

/** A loopback port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe("hisparse bench serve (CLI)", () => {
  let server: Awaited<ReturnType<typeof startEchoServer>>;
  let dir: string;
  before(async () => {
    server = await startEchoServer();
    dir = mkdtempSync(join(tmpdir(), "hisparse-bench-"));
  });
  after(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("bad arguments give one line on stderr and a non-zero exit", async () => {
    const cases: [string[], number, RegExp][] = [
      [
        ["--dataset-name", "nope"],
        2,
        /^hisparse: option '--dataset-name <name>' argument 'nope' is invalid\. Allowed choices are random, lognormal, file, sharegpt, multiturn\.$/,
      ],
      [
        ["--request-rate", "0"],
        2,
        /^hisparse: option '--request-rate <r>' argument '0' is invalid\. must be a number > 0 or inf\.$/,
      ],
      [["--goodput", "ttft=3", "--base-url", server.url], 1, /^hisparse: --goodput takes KEY:VALUE pairs/],
      [
        ["--dataset-name", "file", "--base-url", server.url],
        1,
        /^hisparse: --dataset-name file needs --dataset-path FILE$/,
      ],
    ];
    const port = await closedPort();
    cases.push([
      ["--base-url", `http://127.0.0.1:${port}`],
      1,
      new RegExp(`^hisparse: cannot reach http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\)$`),
    ]);
    for (const [args, status, re] of cases) {
      const r = await hisparse(["bench", "serve", "--num-prompts", "2", ...args]);
      assert.equal(r.status, status, `${args.join(" ")}: ${r.stderr}`);
      const lines = r.stderr.trim().split("\n");
      assert.equal(lines.length, 1, `one line for ${args.join(" ")}: ${r.stderr}`);
      assert.match(lines[0]!, re);
    }
  });

  it("a run writes vLLM's result JSON with the server's usage counts", async () => {
    const r = await hisparse([
      "bench",
      "serve",
      "--base-url",
      server.url,
      "--num-prompts",
      "3",
      "--input-len",
      "16",
      "--output-len",
      "4",
      "--ignore-eos",
      "--percentile-metrics",
      "ttft,tpot,itl,e2el",
      "--metric-percentiles",
      "50,99",
      "--goodput",
      "e2el:600000",
      "--save-result",
      "--save-detailed",
      "--result-dir",
      dir,
      "--result-filename",
      "run.json",
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout,
      /=+ Serving Benchmark Result =+\nSuccessful requests:\s+3\nFailed requests:\s+0\n/,
    );
    // stderr is not a terminal: progress comes as plain lines, a first and a last one at least.
    assert.match(r.stderr, /^\[bench\] 0\/3 requests done, [\d.]+ s$/m);
    assert.match(r.stderr, /^\[bench\] 3\/3 requests done, [\d.]+ s$/m);
    const j = JSON.parse(readFileSync(join(dir, "run.json"), "utf8"));
    assert.equal(j.completed, 3);
    assert.equal(j.total_output_tokens, 12);
    assert.equal(j.total_input_tokens, 3 * ECHO_PROMPT_TOKENS);
    assert.equal(j.model_id, "echo-model");
    assert.equal(j.request_rate, "inf");
    assert.equal(j.request_goodput, j.request_throughput, "every request meets a 600 s E2EL");
    assert.equal(j.request_throughput, 3 / j.duration);
    for (const m of ["ttft", "tpot", "itl", "e2el"])
      for (const s of ["mean", "median", "std", "p50", "p99"])
        assert.equal(typeof j[`${s}_${m}_ms`], "number", `${s}_${m}_ms`);
    assert.deepEqual(j.output_lens, [4, 4, 4]);
    assert.equal(j.itls.length, 3);
    for (const [i, itl] of j.itls.entries()) {
      assert.equal(itl.length, 3, "4 chunks: 3 gaps");
      const sum = j.ttfts[i] + itl.reduce((a: number, b: number) => a + b, 0);
      assert.ok(Math.abs(sum - j.latencies[i]) < 1e-9, "TTFT + ITLs = E2EL");
    }
    // Requests as vLLM sends them: streamed, with usage, ignore_eos, max_tokens = output length.
    const body = server.bodies.at(-1)!;
    assert.equal(body.stream, true);
    assert.deepEqual(body.stream_options, { include_usage: true });
    assert.equal(body.ignore_eos, true);
    assert.equal(body.max_tokens, 4);
  });

  it("--sweep-concurrency runs once per cap and plots them", async () => {
    const svg = join(dir, "sweep.svg");
    const r = await hisparse([
      "bench",
      "serve",
      "--base-url",
      server.url,
      "--num-prompts",
      "4",
      "--input-len",
      "8",
      "--output-len",
      "3",
      "--sweep-concurrency",
      "1,2,4",
      "--plot",
      svg,
      "--save-result",
      "--result-dir",
      dir,
      "--result-filename",
      "sweep.json",
    ]);
    assert.equal(r.status, 0, r.stderr);
    const runs = JSON.parse(readFileSync(join(dir, "sweep.json"), "utf8"));
    assert.deepEqual(
      runs.map((x: { max_concurrency: number; completed: number }) => [x.max_concurrency, x.completed]),
      [
        [1, 4],
        [2, 4],
        [4, 4],
      ],
    );
    const text = readFileSync(svg, "utf8");
    // Throughput, median + P99 TTFT, median + P99 TPOT.
    assert.equal((text.match(/<polyline/g) ?? []).length, 5);
    assert.match(r.stdout, /Sweep plot written to /);
  });
});
