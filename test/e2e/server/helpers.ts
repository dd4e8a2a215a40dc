/**
 * Helpers of the server suites: a real server on loopback (ephemeral port, ref-small on the CPU
 * backend), raw HTTP calls, an SSE parser, and /metrics readings.
 */
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { makeEngineArgs } from "../../../src/config/engine_args.js";
import { type RunningServer, type ServerOptions, startServer } from "../../../src/server/server.js";

/** Starts a server on 127.0.0.1:<free port> with ref-small on the CPU and a silent logger. */
export async function startTestServer(
  engine: Parameters<typeof makeEngineArgs>[0] = {},
  opts: Omit<ServerOptions, "engineArgs"> = {},
): Promise<RunningServer> {
  return startServer({
    engineArgs: makeEngineArgs({ device: "cpu", maxModelLen: 512, ...engine }),
    host: "127.0.0.1",
    port: 0,
    statsIntervalSeconds: 0,
    logger: pino({ level: "silent" }),
    version: "test",
    ...opts,
  });
}

/** A raw HTTP reply: status, parsed JSON body (or null), and the text. */
export interface RawReply {
  status: number;
  headers: Headers;
  text: string;
  json: unknown;
}

/** Sends a request and reads the whole reply. */
export async function request(
  url: string,
  init: RequestInit & { headers?: Record<string, string> } = {},
): Promise<RawReply> {
  const res = await fetch(url, init);
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/** POSTs a JSON value (or a raw body when `body` is a string/Buffer). */
export function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<RawReply> {
  const raw = typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  return request(url, {
    method: "POST",
    body: raw,
    headers: { "content-type": "application/json", ...headers },
    signal,
  });
}

/** Splits an SSE body into its `data:` payloads (the JSON ones parsed, "[DONE]" kept as a string). */
export function parseSse(text: string): unknown[] {
  const events: unknown[] = [];
  for (const block of text.split("\n\n")) {
    if (block.trim() === "") continue;
    assert.ok(block.startsWith("data: "), `SSE event must start with "data: ": ${JSON.stringify(block)}`);
    const data = block.slice("data: ".length);
    events.push(data === "[DONE]" ? data : JSON.parse(data));
  }
  return events;
}

/** Shape every error reply must have. */
export interface ErrorReplyBody {
  error: { message: string; type: string; param: string | null; code: number | string | null };
}

/** Asserts an OpenAI-style error with the given status; returns its body. */
export function assertOpenAIError(r: RawReply, status: number, what: string): ErrorReplyBody["error"] {
  assert.equal(r.status, status, `${what}: status (body ${r.text.slice(0, 300)})`);
  const body = r.json as ErrorReplyBody;
  assert.ok(
    body !== null && typeof body === "object" && typeof body.error === "object",
    `${what}: error body`,
  );
  assert.equal(typeof body.error.message, "string", `${what}: message`);
  assert.ok(body.error.message.length > 0, `${what}: non-empty message`);
  assert.equal(typeof body.error.type, "string", `${what}: type`);
  assert.ok("param" in body.error && "code" in body.error, `${what}: param and code present`);
  return body.error;
}

/** Unlabelled-value view of a Prometheus text exposition: "name" or "name{labels}" -> value. */
export async function scrapeMetrics(baseUrl: string): Promise<Map<string, number>> {
  const r = await request(`${baseUrl}/metrics`);
  assert.equal(r.status, 200);
  const m = new Map<string, number>();
  for (const line of r.text.split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const i = line.lastIndexOf(" ");
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}

/** A series' value, with the model_name label filled in (and extra labels, in exposition order). */
export function metric(m: Map<string, number>, name: string, extraLabels = ""): number {
  const key = `${name}{${extraLabels === "" ? "" : `${extraLabels},`}model_name="ref-small"}`;
  const alt = `${name}{model_name="ref-small"${extraLabels === "" ? "" : `,${extraLabels}`}}`;
  return m.get(key) ?? m.get(alt) ?? 0;
}

/**
 * Waits until the engine is idle (no running or waiting request, every block free) as seen
 * through /metrics: aborts are processed by the engine's next step, so a disconnect shows up
 * within a few steps. Gives up after `timeoutMs` and returns the last reading either way.
 */
export async function waitForIdle(baseUrl: string, timeoutMs = 10_000): Promise<Map<string, number>> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const m = await scrapeMetrics(baseUrl);
    const idle =
      metric(m, "vllm:num_requests_running") === 0 &&
      metric(m, "vllm:num_requests_waiting") === 0 &&
      metric(m, "hisparse_kv_cache_free_blocks") === metric(m, "hisparse_kv_cache_total_blocks");
    if (idle || Date.now() > end) return m;
    await sleep(50);
  }
}

/** Asserts through /metrics that nothing runs or waits and the KV pool is fully free. */
export async function assertPoolFullyFree(baseUrl: string): Promise<void> {
  const m = await waitForIdle(baseUrl);
  assert.equal(metric(m, "vllm:num_requests_running"), 0, "running requests");
  assert.equal(metric(m, "vllm:num_requests_waiting"), 0, "waiting requests");
  const total = metric(m, "hisparse_kv_cache_total_blocks");
  assert.ok(total > 0, "the pool has blocks");
  assert.equal(metric(m, "hisparse_kv_cache_free_blocks"), total, "free blocks == total blocks");
  assert.equal(metric(m, "vllm:kv_cache_usage_perc"), 0, "KV cache usage");
}
