/**
 * POST /v1/preheat on ref-small (CPU backend, a real server, HiSparse auto with prefix caching):
 * a preheated 2K-token document is answered as cached (whole pages, all on the device), the first
 * question about it then prefills only its own tokens (prefix-cache hits in /metrics, its TTFT
 * well below that of the same question over a cold document of the same length); bad bodies get
 * OpenAI-shaped 400s, and a server without prefix caching refuses the route. On a small device
 * pool, a document whose device copies were evicted is preheated again: the answer says which
 * pages were found on the device, which only in the host tier (loaded back), and what was
 * computed.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import type { RunningServer } from "../../../src/server/server.js";
import { assertOpenAIError, metric, postJson, scrapeMetrics, startTestServer } from "./helpers.js";

/** Token ids 100.. of a fixed pseudo-random walk. */
function ids(seed: number, n: number): number[] {
  const out: number[] = [];
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out.push(100 + (x % 8000));
  }
  return out;
}

const DOC_TOKENS = 2000;
const P = "/v1/preheat";

/** Latency in seconds of a one-token completion (its TTFT: prefill + the first token). */
async function ttft(url: string, prompt: number[]): Promise<number> {
  const t0 = performance.now();
  const r = await postJson(`${url}/v1/completions`, { prompt, max_tokens: 1, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  return (performance.now() - t0) / 1000;
}

describe("POST /v1/preheat", () => {
  let server: RunningServer;
  before(async () => {
    server = await startTestServer({
      maxModelLen: 2304,
      enablePrefixCaching: true,
      extensions: { hisparse: resolveHiSparseConfig({ mode: "auto" }) },
    });
  });
  after(() => server.close());

  it("caches a 2K document; the first question after it prefills only its own tokens", async () => {
    const doc = ids(3, DOC_TOKENS);
    const r = await postJson(`${server.url}${P}`, { prompt: doc });
    assert.equal(r.status, 200, r.text);
    const body = r.json as {
      prompt_tokens: number;
      cached_tokens: number;
      block_size: number;
      pages: unknown;
    };
    // 2000 tokens = 125 pages of 16, every one still on the device.
    assert.deepEqual(
      { ...body, id: undefined },
      {
        id: undefined,
        object: "preheat",
        model: "ref-small",
        prompt_tokens: 2000,
        cached_tokens: 2000,
        block_size: 16,
        pages: { device: 125, host: 0 },
        hit_tokens: { device: 0, host: 0 },
        computed_tokens: 2000,
      },
    );
    const before = await scrapeMetrics(server.url);
    const question = ids(5, 24);
    const hot = await ttft(server.url, [...doc, ...question]);
    const after = await scrapeMetrics(server.url);
    const hits = (m: Map<string, number>) => metric(m, "vllm:prefix_cache_hits_total", 'tier="device"');
    assert.equal(hits(after) - hits(before), 2000, "the document's 125 pages were hits");
    // The same question over a document of the same length that nobody preheated.
    const cold = await ttft(server.url, [...ids(4, DOC_TOKENS), ...question]);
    assert.ok(hot < cold / 3, `TTFT after preheat ${hot.toFixed(3)} s, cold ${cold.toFixed(3)} s`);
  });

  it("takes chat messages (the conversation prefix, without the assistant opener)", async () => {
    const messages = [
      { role: "system", content: "Answer from the document." },
      { role: "user", content: "The access code for the amber falcon vault is 48213. ".repeat(20) },
    ];
    const r = await postJson(`${server.url}${P}`, { messages });
    assert.equal(r.status, 200, r.text);
    const b = r.json as { prompt_tokens: number; cached_tokens: number };
    assert.ok(b.prompt_tokens > 100 && b.cached_tokens === Math.floor(b.prompt_tokens / 16) * 16, r.text);
  });

  it("refuses bad bodies with OpenAI-shaped 400s and an unknown model with 404", async () => {
    assertOpenAIError(await postJson(`${server.url}${P}`, {}), 400, "neither prompt nor messages");
    assertOpenAIError(
      await postJson(`${server.url}${P}`, { prompt: "x", messages: [{ role: "user", content: "y" }] }),
      400,
      "both",
    );
    assertOpenAIError(await postJson(`${server.url}${P}`, { prompt: [-1] }), 400, "negative token id");
    assertOpenAIError(await postJson(`${server.url}${P}`, { prompt: "" }), 400, "empty prompt");
    assertOpenAIError(
      await postJson(`${server.url}${P}`, { prompt: ids(1, 2400) }),
      400,
      "longer than the context",
    );
    assertOpenAIError(
      await postJson(`${server.url}${P}`, { prompt: "x", model: "gpt-4" }),
      404,
      "unknown model",
    );
  });
});

describe("POST /v1/preheat without prefix caching", () => {
  let server: RunningServer;
  before(async () => {
    server = await startTestServer();
  });
  after(() => server.close());

  it("is refused with 400", async () => {
    const e = assertOpenAIError(
      await postJson(`${server.url}${P}`, { prompt: "The Linux kernel" }),
      400,
      "off",
    );
    assert.match(e.message, /--enable-prefix-caching/);
  });
});

describe("POST /v1/preheat: a document partly left in the host tier", () => {
  // 30 device blocks of 16 tokens (the host tier: 2 x 30 = 60 blocks); a small hot buffer so
  // that a sparse request's minimum fits the pool (no request here spills: they fit).
  let server: RunningServer;
  before(async () => {
    server = await startTestServer({
      maxModelLen: 448,
      numGpuBlocksOverride: 30,
      enablePrefixCaching: true,
      extensions: {
        hisparse: resolveHiSparseConfig({
          mode: "auto",
          topk: 64,
          deviceBufferTokens: 64,
          sinkTokens: 16,
          windowTokens: 32,
        }),
      },
    });
  });
  after(() => server.close());

  it("narrates device hits, host hits loaded back, and the computed tail", async () => {
    const doc = ids(21, 320);
    // Step 1: the cold document: 20 pages computed, all left cached on the device (and their
    // host copies in the host tier).
    let r = await postJson(`${server.url}${P}`, { prompt: doc });
    assert.equal(r.status, 200, r.text);
    const body = (j: unknown) => {
      const { id: _, object: __, model: ___, ...rest } = j as Record<string, unknown>;
      return rest;
    };
    assert.deepEqual(body(r.json), {
      prompt_tokens: 320,
      cached_tokens: 320,
      block_size: 16,
      pages: { device: 20, host: 0 },
      hit_tokens: { device: 0, host: 0 },
      computed_tokens: 320,
    });
    // Step 2: an unrelated 400-token request needs 25 blocks: the 10 never used, then 15 of the
    // document's cached ones (freed tail first, so pages 19..5 lose their device copies). Its
    // host copies stay: pages 5..19 are now only in the host tier.
    const c = await postJson(`${server.url}/v1/completions`, {
      prompt: ids(22, 399),
      max_tokens: 1,
      temperature: 0,
    });
    assert.equal(c.status, 200, c.text);
    // Step 3: preheat the document again. The lookup leaves the last token to compute, so pages
    // 0..18 are hits: 0..4 with a device copy (80 tokens), 5..18 only in the host tier (224
    // tokens, loaded back into device blocks: device copies again), page 19 (16 tokens)
    // computed. That new page 19 is not registered (the cache keeps the first page of a hash,
    // here its host-only copy), so the cached run ends with one host page.
    r = await postJson(`${server.url}${P}`, { prompt: doc });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(body(r.json), {
      prompt_tokens: 320,
      cached_tokens: 320,
      block_size: 16,
      pages: { device: 19, host: 1 },
      hit_tokens: { device: 80, host: 224 },
      computed_tokens: 16,
    });
    const m = await scrapeMetrics(server.url);
    assert.equal(metric(m, "vllm:prefix_cache_hits_total", 'tier="host"'), 224);
  });
});
