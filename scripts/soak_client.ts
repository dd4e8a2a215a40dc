/**
 * The helpers of scripts/soak.sh (loopback only, every loop bounded in time and count):
 *
 *   node --import tsx scripts/soak_client.ts chaos URL SECONDS MAX_REQUESTS
 *     bad inputs and disconnects, one at a time, until SECONDS or MAX_REQUESTS; prints one JSON
 *     line {sent, unexpected, cases, failures}: every bad input must get its expected status in
 *     OpenAI's error shape, every disconnect must be taken by the server.
 *   node --import tsx scripts/soak_client.ts probe URL PID
 *     waits (at most 60 s) until nothing runs or waits, then prints one JSON line
 *     {running, waiting, freeBlocks, totalBlocks, leakedBlocks, rssMiB} (RSS of process PID).
 *   node --import tsx scripts/soak_client.ts throughput RESULT_JSON
 *     prints a bench result's request_throughput (req/s) and completed/failed counts.
 */
import { readFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";

const LOOPBACK = /^http:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/;

/** One chaos case: a request and the status it must get (null: a disconnect, no status). */
interface Case {
  name: string;
  run(url: string): Promise<number | null>;
  expect: number | null;
}

const JSON_CT = { "content-type": "application/json" };
const post = (url: string, body: string, headers: Record<string, string> = JSON_CT, signal?: AbortSignal) =>
  fetch(url, { method: "POST", headers, body, signal });

/** Sends, reads the whole reply, checks the error shape for 4xx; returns the status. */
async function statusOf(p: Promise<Response>): Promise<number> {
  const r = await p;
  const text = await r.text();
  if (r.status >= 400) {
    const e = (JSON.parse(text) as { error?: { message?: unknown; type?: unknown } }).error;
    if (typeof e?.message !== "string" || typeof e.type !== "string")
      throw new Error(`not OpenAI's error shape: ${text.slice(0, 200)}`);
  }
  return r.status;
}

/**
 * The status of a POST announcing a body over the server's limit: the server refuses it from
 * its Content-Length alone, before reading it (413, then it closes the connection), so the
 * headers are sent, the answer awaited, and the body never written (a client still uploading
 * would see the close as EPIPE before it read the answer).
 */
function statusOfOversized(url: string, numBytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      { method: "POST", headers: { ...JSON_CT, "content-length": numBytes } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () => {
          req.destroy();
          const e = (JSON.parse(text) as { error?: { type?: unknown } }).error;
          if (typeof e?.type !== "string")
            reject(new Error(`not OpenAI's error shape: ${text.slice(0, 200)}`));
          else resolve(res.statusCode ?? 0);
        });
      },
    );
    req.on("error", reject);
    req.setTimeout(30_000, () => req.destroy(new Error("no answer to an oversized body within 30 s")));
    req.flushHeaders();
  });
}

/** A streamed completion read for `chunks` chunks, then dropped. */
async function streamThenDrop(url: string, chunks: number): Promise<null> {
  const ctl = new AbortController();
  const r = await post(
    `${url}/v1/completions`,
    JSON.stringify({ prompt: "The Linux kernel", max_tokens: 200, ignore_eos: true, stream: true }),
    JSON_CT,
    ctl.signal,
  );
  if (r.status !== 200) throw new Error(`stream got ${r.status}`);
  const reader = r.body!.getReader();
  for (let i = 0; i < chunks; i++) if ((await reader.read()).done) break;
  ctl.abort();
  return null;
}

/** A non-streamed request dropped after `ms`. */
async function dropAfter(url: string, ms: number): Promise<null> {
  const ctl = new AbortController();
  const p = post(
    `${url}/v1/completions`,
    JSON.stringify({ prompt: "PostgreSQL is", max_tokens: 200, ignore_eos: true }),
    JSON_CT,
    ctl.signal,
  );
  await sleep(ms);
  ctl.abort();
  await p
    .then(
      (r) => r.text(),
      () => null,
    )
    .catch(() => null);
  return null;
}

const CASES: Case[] = [
  {
    name: "malformed JSON",
    expect: 400,
    run: (u) => statusOf(post(`${u}/v1/completions`, '{"prompt": "x", ')),
  },
  {
    name: "text/plain JSON",
    expect: 415,
    run: (u) => statusOf(post(`${u}/v1/completions`, '{"prompt": "x"}', { "content-type": "text/plain" })),
  },
  {
    name: "form body",
    expect: 415,
    run: (u) =>
      statusOf(
        post(`${u}/v1/chat/completions`, "messages=x", {
          "content-type": "application/x-www-form-urlencoded",
        }),
      ),
  },
  {
    name: "3.9 MiB prompt (length bound)",
    expect: 400,
    run: (u) =>
      statusOf(
        post(`${u}/v1/completions`, JSON.stringify({ prompt: "x".repeat(3.9 * 2 ** 20), max_tokens: 4 })),
      ),
  },
  {
    name: "1 MiB chat message",
    expect: 400,
    run: (u) =>
      statusOf(
        post(
          `${u}/v1/chat/completions`,
          JSON.stringify({ messages: [{ role: "user", content: "y".repeat(2 ** 20) }] }),
        ),
      ),
  },
  {
    name: "60 KB prompt (tokenized, too long)",
    expect: 400,
    run: (u) =>
      statusOf(post(`${u}/v1/completions`, JSON.stringify({ prompt: "z".repeat(60_000), max_tokens: 4 }))),
  },
  {
    name: "5 MiB body",
    expect: 413,
    run: (u) => statusOfOversized(`${u}/v1/completions`, 5 * 2 ** 20),
  },
  {
    name: "negative max_tokens",
    expect: 400,
    run: (u) => statusOf(post(`${u}/v1/completions`, JSON.stringify({ prompt: "x", max_tokens: -1 }))),
  },
  {
    name: "unknown model",
    expect: 404,
    run: (u) => statusOf(post(`${u}/v1/completions`, JSON.stringify({ model: "gpt-4", prompt: "x" }))),
  },
  { name: "bad URL", expect: 400, run: (u) => statusOf(fetch(`${u}/v1/%zz`)) },
  { name: "stream dropped after 3 chunks", expect: null, run: (u) => streamThenDrop(u, 3) },
  { name: "request dropped after 300 ms", expect: null, run: (u) => dropAfter(u, 300) },
  {
    name: "valid request",
    expect: 200,
    run: (u) =>
      statusOf(post(`${u}/v1/completions`, JSON.stringify({ prompt: "The kernel", max_tokens: 4 }))),
  },
];

async function chaos(url: string, seconds: number, maxRequests: number): Promise<void> {
  const end = performance.now() + seconds * 1000;
  const cases: Record<string, number> = {};
  const failures: string[] = [];
  let sent = 0;
  while (performance.now() < end && sent < maxRequests) {
    const c = CASES[sent % CASES.length]!;
    sent++;
    cases[c.name] = (cases[c.name] ?? 0) + 1;
    try {
      const status = await c.run(url);
      if (status !== c.expect) failures.push(`${c.name}: got ${status}, expected ${c.expect}`);
    } catch (e) {
      failures.push(`${c.name}: ${(e as Error).message}`);
    }
    await sleep(200);
  }
  console.log(JSON.stringify({ sent, unexpected: failures.length, cases, failures: failures.slice(0, 20) }));
}

/** Value of an unlabelled-or-model-labelled series in a Prometheus exposition. */
function series(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  if (line === undefined) throw new Error(`no ${name} in /metrics`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1]);
  return Math.round((kb / 1024) * 10) / 10;
}

async function probe(url: string, pid: number): Promise<void> {
  const end = performance.now() + 60_000;
  let m = { running: -1, waiting: -1, freeBlocks: -1, totalBlocks: -1 };
  while (performance.now() < end) {
    const text = await (await fetch(`${url}/metrics`)).text();
    m = {
      running: series(text, "vllm:num_requests_running"),
      waiting: series(text, "vllm:num_requests_waiting"),
      freeBlocks: series(text, "hisparse_kv_cache_free_blocks"),
      totalBlocks: series(text, "hisparse_kv_cache_total_blocks"),
    };
    if (m.running === 0 && m.waiting === 0 && m.freeBlocks === m.totalBlocks) break;
    await sleep(250);
  }
  console.log(JSON.stringify({ ...m, leakedBlocks: m.totalBlocks - m.freeBlocks, rssMiB: rssMiB(pid) }));
}

function throughput(file: string): void {
  const j = JSON.parse(readFileSync(file, "utf8")) as {
    request_throughput: number;
    completed: number;
    failed: number;
  };
  console.log(
    JSON.stringify({ requestThroughput: j.request_throughput, completed: j.completed, failed: j.failed }),
  );
}

const [cmd, a, b, c] = process.argv.slice(2);
if ((cmd === "chaos" || cmd === "probe") && !LOOPBACK.test(a ?? "")) {
  console.error(`soak_client: ${a} is not a loopback URL (http://127.0.0.1:PORT)`);
  process.exit(2);
}
if (cmd === "chaos") await chaos(a!, Number(b), Number(c));
else if (cmd === "probe") await probe(a!, Number(b));
else if (cmd === "throughput") throughput(a!);
else {
  console.error("usage: soak_client.ts chaos URL SECONDS MAX | probe URL PID | throughput FILE");
  process.exit(2);
}
