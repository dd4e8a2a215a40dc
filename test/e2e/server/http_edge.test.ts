/**
 * The HTTP edge: POST routes take `Content-Type: application/json` only (text/plain and form
 * bodies, which browsers send cross-origin without a preflight, get 415 and start nothing), and
 * errors raised by fastify or Node's HTTP parser (a URL that does not decode, malformed or
 * oversized headers) come back in OpenAI's shape like every other error.
 */
import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../../src/server/server.js";
import {
  assertOpenAIError,
  assertPoolFullyFree,
  metric,
  request,
  scrapeMetrics,
  startTestServer,
} from "./helpers.js";

/** Writes raw bytes to the server and reads everything it answers until it closes. */
function rawHttp(url: string, bytes: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: hostname, port: Number(port) }, () => s.write(bytes));
    let out = "";
    s.setEncoding("utf8");
    s.on("data", (d) => {
      out += d;
    });
    s.on("end", () => resolve(out));
    s.on("error", reject);
    s.setTimeout(10_000, () => {
      s.destroy();
      reject(new Error(`no complete answer to ${JSON.stringify(bytes.slice(0, 60))}: ${out}`));
    });
  });
}

/** Status and parsed JSON body of a raw HTTP/1.1 answer. */
function parseRaw(text: string): { status: number; json: unknown; text: string } {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
  const body = text.slice(text.indexOf("\r\n\r\n") + 4);
  return { status, json: JSON.parse(body), text: body };
}

describe("HTTP edge: Content-Type and framework errors (ref-small, CPU)", () => {
  let server: RunningServer;
  const body = JSON.stringify({ prompt: "The Linux kernel", max_tokens: 2 });

  before(async () => {
    server = await startTestServer({ maxModelLen: 128 });
  });
  after(() => server.close());

  for (const [name, contentType, payload] of [
    ["text/plain holding JSON", "text/plain", body],
    ["text/plain with a charset", "text/plain;charset=UTF-8", body],
    ["a form body", "application/x-www-form-urlencoded", `${body}=`],
    ["a multipart form", "multipart/form-data; boundary=x", `--x\r\n\r\n${body}\r\n--x--`],
    ["a lookalike type", "application/jsonx", body],
  ] as const) {
    for (const path of ["/v1/completions", "/v1/chat/completions"]) {
      it(`POST ${path} with ${name} gets 415 and generates nothing`, async () => {
        const promptTokens = metric(await scrapeMetrics(server.url), "vllm:prompt_tokens_total");
        const r = await request(`${server.url}${path}`, {
          method: "POST",
          headers: { "content-type": contentType },
          body: payload,
        });
        const e = assertOpenAIError(r, 415, name);
        assert.equal(e.type, "UnsupportedMediaTypeError");
        assert.equal(e.code, 415);
        assert.match(e.message, /must be sent with Content-Type: application\/json \(got [^)]+\)/);
        assert.equal(
          metric(await scrapeMetrics(server.url), "vllm:prompt_tokens_total"),
          promptTokens,
          "no prompt reached the engine",
        );
      });
    }
  }

  it("a POST without any body or Content-Type gets 415 naming none", async () => {
    const r = await request(`${server.url}/v1/completions`, { method: "POST" });
    const e = assertOpenAIError(r, 415, "no body");
    assert.match(e.message, /\(got none\)/);
  });

  it("application/json with parameters (charset) is accepted", async () => {
    const r = await request(`${server.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "Application/JSON; charset=utf-8" },
      body,
    });
    assert.equal(r.status, 200, r.text);
    assert.equal((r.json as { object: string }).object, "text_completion");
  });

  it("GET /v1/%zz (a URL that does not decode) gets 400 in OpenAI's shape", async () => {
    const r = await request(`${server.url}/v1/%zz`);
    const e = assertOpenAIError(r, 400, "bad URL");
    assert.equal(e.type, "BadRequestError");
    assert.equal(e.code, 400);
    assert.equal(e.param, null);
    assert.match(e.message, /URL is not valid/);
    assert.ok(!r.text.includes("FST_ERR"), `no fastify error code in ${r.text}`);
  });

  it("a malformed header line gets 400 in OpenAI's shape", async () => {
    const raw = await rawHttp(server.url, "GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n");
    const r = parseRaw(raw);
    assert.equal(r.status, 400, raw);
    const e = (r.json as { error: { type: string; message: string; code: number } }).error;
    assert.equal(e.type, "BadRequestError");
    assert.equal(e.code, 400);
    assert.match(e.message, /not valid HTTP/);
  });

  it("headers over Node's size limit get 431 in OpenAI's shape", async () => {
    const raw = await rawHttp(
      server.url,
      `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`,
    );
    const r = parseRaw(raw);
    assert.equal(r.status, 431, raw.slice(0, 200));
    const e = (r.json as { error: { type: string; code: number } }).error;
    assert.equal(e.type, "RequestHeaderFieldsTooLargeError");
    assert.equal(e.code, 431);
  });

  it("/v1/models shows the model as given (here: none, so the bundled name), not its resolved path", async () => {
    const r = await request(`${server.url}/v1/models`);
    assert.equal(r.status, 200);
    const card = (r.json as { data: { id: string; root: string }[] }).data[0]!;
    assert.equal(card.id, "ref-small");
    assert.equal(card.root, "ref-small");
  });

  it("the server still answers and nothing is left in the engine", async () => {
    assert.equal((await request(`${server.url}/health`)).status, 200);
    await assertPoolFullyFree(server.url);
  });
});
