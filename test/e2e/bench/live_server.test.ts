/**
 * `bench serve` against a live `hisparse serve` (ref-small on the CPU backend, loopback): every
 * request completes, token counts equal what the server's usage reports and what the client
 * tokenizer counted, and the per-request metrics are consistent with their definitions
 * (TTFT + ITLs = E2EL; TPOT = (E2EL − TTFT)/(n − 1); throughput = completed / duration).
 * Skips with a message when this checkout has no `serve` command yet (branch wip/server).
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { getSamples } from "../../../src/bench/datasets.js";
import { Rng } from "../../../src/bench/rng.js";
import { resultJson, runBenchmark } from "../../../src/bench/serve.js";
import { fetchFirstModel } from "../../../src/bench/server_info.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";

const BIN = join(repoRoot, "bin", "hisparse.js");
const hasServe = spawnSync(process.execPath, [BIN, "serve", "--help"], { encoding: "utf8" }).stdout.includes(
  "Usage: hisparse serve",
);

/** Seconds to wait for the server to load and listen. */
const STARTUP_TIMEOUT_S = 120;

/**
 * Starts `hisparse serve --port 0` and resolves with its URL, read from the first log line that
 * names one ("... on http://127.0.0.1:PORT ...").
 * @throws Error with the server's output when it exits or does not come up in time.
 */
function startServe(args: string[]): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [BIN, "serve", "--device", "cpu", "--port", "0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`hisparse serve did not start in ${STARTUP_TIMEOUT_S} s:\n${log}`));
    }, STARTUP_TIMEOUT_S * 1000);
    const onData = (c: Buffer) => {
      log += c.toString();
      const m = /(https?:\/\/[\w.[\]:-]+:\d+)/.exec(log);
      if (m !== null) {
        clearTimeout(timer);
        resolve({ url: m[1]!, child });
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`hisparse serve exited with ${code}:\n${log}`));
    });
  });
}

describe("bench serve against a live hisparse serve", {
  skip: !hasServe && "this checkout has no `hisparse serve` command yet (wip/server)",
}, () => {
  let server: { url: string; child: ChildProcess } | null = null;
  before(async () => {
    server = await startServe(["--max-model-len", "256", "--stats-interval", "0"]);
  });
  after(async () => {
    if (server === null) return;
    const child = server.child;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  });

  it("6 random prompts, 3 at a time: counts from usage, metrics consistent per request", async () => {
    const tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
    const url = server!.url;
    const model = await fetchFirstModel(url);
    assert.equal(typeof model, "string");
    const requests = getSamples(
      tok,
      { name: "random", numPrompts: 6, inputLen: 24, outputLen: 6, rangeRatio: 0.5, lognormalSigma: 0.5 },
      new Rng(0),
    );
    const cfg = {
      kind: "openai" as const,
      apiUrl: `${url}/v1/completions`,
      model: model!,
      requests,
      requestRate: Number.POSITIVE_INFINITY,
      burstiness: 1,
      maxConcurrency: 3,
      numWarmups: 1,
      ignoreEos: true,
      selectedMetrics: ["ttft", "tpot", "itl", "e2el"] as const,
      selectedPercentiles: [50, 99],
      goodput: {},
      seed: 0,
    };
    const r = await runBenchmark({ ...cfg, selectedMetrics: [...cfg.selectedMetrics] }, {});
    const errors = r.outputs.map((o) => o.error).filter((e) => e.length > 0);
    assert.deepEqual(errors, []);
    const j = resultJson(
      r,
      {
        backend: "openai",
        modelId: model!,
        tokenizerId: "ref-small",
        numPrompts: 6,
        requestRate: Infinity,
        burstiness: 1,
        maxConcurrency: 3,
        datasetName: "random",
      },
      { ...cfg, selectedMetrics: [...cfg.selectedMetrics] },
      true,
    );
    assert.equal(j.completed, 6);
    // ignore_eos: every request produced exactly its max_tokens, as the server's usage says.
    assert.deepEqual(
      j.output_lens,
      requests.map((q) => q.expectedOutputLen),
    );
    // The server tokenizes with the same tokenizer (ref-small adds no BOS): same prompt lengths.
    assert.deepEqual(
      j.input_lens,
      requests.map((q) => q.promptLen),
    );
    assert.ok((j.max_concurrent_requests as number) <= 3);
    for (const [i, o] of r.outputs.entries()) {
      const sum = o.ttft + o.itl.reduce((a, b) => a + b, 0);
      assert.ok(Math.abs(sum - o.latency) < 1e-9, `request ${i}: TTFT + ITLs = E2EL`);
      assert.ok(o.itl.length <= o.outputTokens - 1, `request ${i}: at most one chunk per token`);
    }
    const tpots = r.outputs.map((o) => (o.latency - o.ttft) / (o.outputTokens - 1));
    assert.ok(Math.abs((j.mean_tpot_ms as number) - (tpots.reduce((a, b) => a + b, 0) / 6) * 1000) < 1e-6);
    assert.equal(j.request_throughput, 6 / r.durationS);
  });
});
