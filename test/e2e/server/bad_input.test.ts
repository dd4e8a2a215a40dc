/**
 * Bad input: every case gets a 4xx error in OpenAI's shape (status, type, param and message
 * checked), an overloaded queue gets 503, clients that disconnect (streamed or not) abort their
 * requests; afterwards the server still answers and, through /metrics, nothing runs or waits and
 * every KV block is free.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { RunningServer } from "../../../src/server/server.js";
import {
  assertOpenAIError,
  assertPoolFullyFree,
  metric,
  postJson,
  request,
  scrapeMetrics,
  startTestServer,
  waitForIdle,
} from "./helpers.js";

const KEY = "sk-test-key";
const AUTH = { authorization: `Bearer ${KEY}` };
const MAX_MODEL_LEN = 128;
const BODY_LIMIT = 64 * 1024;
const MAX_WAITING = 16;

/** One bad request and what must come back. */
interface Case {
  name: string;
  path?: string;
  method?: string;
  body?: unknown;
  headers?: Record<string, string>;
  status: number;
  type?: string;
  param?: string | null;
  message?: RegExp | string;
}

const C = "/v1/completions";
const CHAT = "/v1/chat/completions";
const user = [{ role: "user", content: "Hello" }];
/** 10 valid token ids (the vocabulary has 16384). */
const ids10 = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000];

const CASES: Case[] = [
  { name: "malformed JSON", body: '{"prompt": "x", ', status: 400, message: /not valid JSON/ },
  { name: "JSON array body", body: "[1, 2]", status: 400, message: "the request body must be a JSON object" },
  { name: "JSON null body", body: "null", status: 400, message: "the request body must be a JSON object" },
  { name: "empty body", body: "", status: 400, message: /request body is empty/ },
  {
    name: "non-UTF-8 bytes",
    body: Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}')]),
    status: 400,
    message: "the request body is not valid UTF-8",
  },
  {
    name: "prototype poisoning",
    body: '{"prompt": "x", "__proto__": {"polluted": 1}}',
    status: 400,
    message: /not valid JSON/,
  },
  { name: "missing prompt", body: { max_tokens: 4 }, status: 400, param: "prompt" },
  { name: "prompt of wrong type", body: { prompt: 5 }, status: 400, param: "prompt" },
  { name: "empty prompt", body: { prompt: "" }, status: 400, param: "prompt", message: /at least one token/ },
  { name: "empty prompt list", body: { prompt: [] }, status: 400, param: "prompt" },
  { name: "mixed prompt list", body: { prompt: ["a", 1] }, status: 400, param: "prompt[1]" },
  {
    name: "token id out of vocabulary",
    body: { prompt: [99999999] },
    status: 400,
    message: /out of vocabulary/,
  },
  { name: "negative token id", body: { prompt: [-1, 5] }, status: 400, message: /out of vocabulary/ },
  { name: "fractional token id", body: { prompt: [1.5] }, status: 400, param: "prompt[0]" },
  {
    name: "max_tokens negative",
    body: { prompt: "x", max_tokens: -5 },
    status: 400,
    param: "max_tokens",
    message: "max_tokens must be at least 1, got -5.",
  },
  { name: "max_tokens zero", body: { prompt: "x", max_tokens: 0 }, status: 400, param: "max_tokens" },
  { name: "max_tokens as string", body: { prompt: "x", max_tokens: "16" }, status: 400, param: "max_tokens" },
  {
    name: "max_tokens too large",
    body: { prompt: ids10, max_tokens: 200 },
    status: 400,
    param: "max_tokens",
    message:
      "This model's maximum context length is 128 tokens. However, you requested 210 tokens (10 in the prompt, 200 in the completion). Please reduce the length of the prompt or completion.",
  },
  {
    name: "prompt over --max-model-len",
    body: { prompt: Array.from({ length: 200 }, (_, i) => 100 + i) },
    status: 400,
    param: "prompt",
    message:
      "This model's maximum context length is 128 tokens. However, you requested 200 tokens in the prompt. Please reduce the length of the prompt.",
  },
  {
    name: "unknown model",
    body: { model: "gpt-4", prompt: "x" },
    status: 404,
    type: "NotFoundError",
    param: "model",
    message: "The model `gpt-4` does not exist.",
  },
  { name: "negative temperature", body: { prompt: "x", temperature: -1 }, status: 400, param: "temperature" },
  { name: "top_p zero", body: { prompt: "x", top_p: 0 }, status: 400, param: "top_p" },
  { name: "top_p above one", body: { prompt: "x", top_p: 1.5 }, status: 400, param: "top_p" },
  { name: "n zero", body: { prompt: "x", n: 0 }, status: 400, param: "n" },
  { name: "n above 128", body: { prompt: "x", n: 129 }, status: 400, param: "n" },
  { name: "n fractional", body: { prompt: "x", n: 1.5 }, status: 400, param: "n" },
  {
    name: "n above the queue limit",
    body: { prompt: "x", n: 17 },
    status: 400,
    param: "n",
    message: /17 sequences/,
  },
  { name: "stop as number", body: { prompt: "x", stop: 5 }, status: 400, param: "stop" },
  { name: "stop with numbers", body: { prompt: "x", stop: [1, 2] }, status: 400, param: "stop[0]" },
  { name: "empty stop string", body: { prompt: "x", stop: [""] }, status: 400, param: "stop" },
  { name: "logprobs above 20", body: { prompt: "x", logprobs: 21 }, status: 400, param: "logprobs" },
  { name: "seed as string", body: { prompt: "x", seed: "abc" }, status: 400, param: "seed" },
  { name: "echo (unsupported)", body: { prompt: "x", echo: true }, status: 400, param: "echo" },
  { name: "suffix (unsupported)", body: { prompt: "x", suffix: "end" }, status: 400, param: "suffix" },
  { name: "best_of > n (unsupported)", body: { prompt: "x", best_of: 3 }, status: 400, param: "best_of" },
  {
    name: "logit_bias (unsupported)",
    body: { prompt: "x", logit_bias: { "5": 10 } },
    status: 400,
    param: "logit_bias",
  },
  {
    name: "stream_options without stream",
    body: { prompt: "x", stream_options: { include_usage: true } },
    status: 400,
    param: "stream_options",
  },
  { name: "chat: messages missing", path: CHAT, body: { max_tokens: 2 }, status: 400, param: "messages" },
  { name: "chat: empty messages", path: CHAT, body: { messages: [] }, status: 400, param: "messages" },
  {
    name: "chat: invalid role",
    path: CHAT,
    body: { messages: [{ role: "robot", content: "hi" }] },
    status: 400,
    param: "messages[0].role",
  },
  {
    name: "chat: content of wrong type",
    path: CHAT,
    body: { messages: [{ role: "user", content: 42 }] },
    status: 400,
    param: "messages[0].content",
  },
  {
    name: "chat: image content part",
    path: CHAT,
    body: { messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x" } }] }] },
    status: 400,
    param: "messages[0].content[0].type",
    message: /only text content parts are supported/,
  },
  {
    name: "chat: user message without content",
    path: CHAT,
    body: { messages: [{ role: "user", content: null }] },
    status: 400,
    param: "messages[0].content",
  },
  {
    name: "chat: tools (unsupported)",
    path: CHAT,
    body: { messages: user, tools: [{ type: "function", function: { name: "f" } }] },
    status: 400,
    param: "tools",
  },
  {
    name: "chat: top_logprobs without logprobs",
    path: CHAT,
    body: { messages: user, top_logprobs: 2 },
    status: 400,
    param: "top_logprobs",
  },
  {
    name: "chat: logprobs not a bool",
    path: CHAT,
    body: { messages: user, logprobs: "yes" },
    status: 400,
    param: "logprobs",
  },
  {
    name: "chat: response_format json (unsupported)",
    path: CHAT,
    body: { messages: user, response_format: { type: "json_object" } },
    status: 400,
    param: "response_format",
  },
  {
    name: "chat: max_completion_tokens too large",
    path: CHAT,
    body: { messages: user, max_completion_tokens: 1000 },
    status: 400,
    param: "max_completion_tokens",
    message:
      /^This model's maximum context length is 128 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 1000 in the completion\)/,
  },
  {
    name: "wrong API key",
    body: { prompt: "x" },
    headers: { authorization: "Bearer sk-wrong" },
    status: 401,
    type: "invalid_request_error",
    message: "Incorrect API key provided.",
  },
  { name: "missing API key", body: { prompt: "x" }, headers: { authorization: "" }, status: 401 },
  {
    name: "Basic instead of Bearer",
    body: { prompt: "x" },
    headers: { authorization: `Basic ${KEY}` },
    status: 401,
  },
  { name: "unknown route", path: "/v1/nope", body: {}, status: 404, type: "NotFoundError" },
  { name: "wrong method", path: C, method: "GET", status: 405, type: "MethodNotAllowedError" },
  {
    name: "GET /v1/preheat",
    path: "/v1/preheat",
    method: "GET",
    status: 405,
    message: "GET /v1/preheat is not allowed: use POST.",
  },
];

describe("bad input (ref-small, CPU, --api-key, --max-model-len 128)", () => {
  let server: RunningServer;

  before(async () => {
    server = await startTestServer(
      { maxModelLen: MAX_MODEL_LEN, maxNumSeqs: 2 },
      { apiKey: KEY, maxRequestBodyBytes: BODY_LIMIT, maxWaitingRequests: MAX_WAITING },
    );
  });
  after(() => server.close());

  it(`${CASES.length} bad requests each get their 4xx OpenAI-style error`, async () => {
    assert.ok(CASES.length >= 30);
    for (const c of CASES) {
      const headers: Record<string, string> = { ...AUTH, ...c.headers };
      if (headers.authorization === "") delete headers.authorization;
      const url = `${server.url}${c.path ?? C}`;
      const r = c.method === "GET" ? await request(url, { headers }) : await postJson(url, c.body, headers);
      const e = assertOpenAIError(r, c.status, c.name);
      if (c.type !== undefined) assert.equal(e.type, c.type, `${c.name}: type`);
      if (c.param !== undefined) assert.equal(e.param, c.param, `${c.name}: param`);
      if (typeof c.message === "string") assert.equal(e.message, c.message, `${c.name}: message`);
      else if (c.message !== undefined) assert.match(e.message, c.message, `${c.name}: message`);
    }
  });

  it("a path served under another method gets 405 with Allow; an unknown one 404 without", async () => {
    for (const path of ["/v1/preheat", C, CHAT]) {
      const r = await request(`${server.url}${path}`, { headers: AUTH });
      assertOpenAIError(r, 405, `GET ${path}`);
      assert.equal(r.headers.get("allow"), "POST", path);
    }
    const models = await postJson(`${server.url}/v1/models`, {}, AUTH);
    assertOpenAIError(models, 405, "POST /v1/models");
    assert.equal(models.headers.get("allow"), "GET, HEAD");
    const nope = await request(`${server.url}/v1/nope`, { headers: AUTH });
    assertOpenAIError(nope, 404, "GET /v1/nope");
    assert.equal(nope.headers.get("allow"), null);
  });

  it("a body over --max-request-body-bytes gets 413", async () => {
    const huge = JSON.stringify({ prompt: "a".repeat(BODY_LIMIT + 1000) });
    const r = await postJson(`${server.url}${C}`, huge, AUTH);
    const e = assertOpenAIError(r, 413, "huge body");
    assert.equal(e.type, "RequestEntityTooLargeError");
  });

  it("/health and /metrics need no key; /v1/models does", async () => {
    assert.equal((await request(`${server.url}/health`)).status, 200);
    assert.equal((await request(`${server.url}/metrics`)).status, 200);
    assertOpenAIError(await request(`${server.url}/v1/models`), 401, "models without key");
    assert.equal((await request(`${server.url}/v1/models`, { headers: AUTH })).status, 200);
  });

  it("503 when the waiting queue would overflow (--max-waiting-requests)", async () => {
    // max-num-seqs 2: of 16 sequences, 14 wait while 2 generate 100 tokens each.
    const ctl = new AbortController();
    const res = await fetch(`${server.url}${C}`, {
      method: "POST",
      headers: { ...AUTH, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x", n: 16, max_tokens: 100, ignore_eos: true, stream: true }),
      signal: ctl.signal,
    });
    assert.equal(res.status, 200);
    const r = await postJson(`${server.url}${C}`, { prompt: "x", n: 3, max_tokens: 2 }, AUTH);
    const e = assertOpenAIError(r, 503, "overloaded");
    assert.equal(e.type, "ServiceUnavailableError");
    assert.match(e.message, /overloaded/);
    ctl.abort();
    await res.body?.cancel().catch(() => {});
    await waitForIdle(server.url);
  });

  it("concurrent disconnects (streamed and not) abort their requests", async () => {
    await waitForIdle(server.url);
    const abortsBefore = metric(
      await scrapeMetrics(server.url),
      "vllm:request_success_total",
      'finished_reason="abort"',
    );
    const body = (stream: boolean) =>
      JSON.stringify({ prompt: "The Linux kernel", max_tokens: 100, ignore_eos: true, stream });
    const open = (stream: boolean, ctl: AbortController) =>
      fetch(`${server.url}${C}`, {
        method: "POST",
        headers: { ...AUTH, "content-type": "application/json" },
        body: body(stream),
        signal: ctl.signal,
      });
    // Two non-streamed requests: abort them once the engine holds both.
    const plain = [new AbortController(), new AbortController()];
    const plainDone = plain.map((ctl) => open(false, ctl).catch((e: Error) => e.name));
    for (let i = 0; i < 200; i++) {
      const m = await scrapeMetrics(server.url);
      if (metric(m, "vllm:num_requests_running") + metric(m, "vllm:num_requests_waiting") >= 2) break;
      await sleep(10);
    }
    for (const ctl of plain) ctl.abort();
    assert.deepEqual(await Promise.all(plainDone), ["AbortError", "AbortError"]);
    // Six streams at once, each dropped after its first chunk.
    const streams = Array.from({ length: 6 }, async () => {
      const ctl = new AbortController();
      const res = await open(true, ctl);
      const reader = res.body!.getReader();
      const first = await reader.read();
      assert.match(new TextDecoder().decode(first.value), /^data: \{/);
      ctl.abort();
      await reader.cancel().catch(() => {});
    });
    await Promise.all(streams);
    const m = await waitForIdle(server.url);
    assert.equal(metric(m, "vllm:request_success_total", 'finished_reason="abort"') - abortsBefore, 8);
  });

  it("after the suite the server still answers and the KV pool is fully free", async () => {
    assert.equal((await request(`${server.url}/health`)).status, 200);
    const r = await postJson(
      `${server.url}${C}`,
      { prompt: "The Linux kernel", max_tokens: 3, temperature: 0 },
      AUTH,
    );
    assert.equal(r.status, 200);
    assert.equal((r.json as { usage: { completion_tokens: number } }).usage.completion_tokens, 3);
    await assertPoolFullyFree(server.url);
  });
});
