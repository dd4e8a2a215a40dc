/**
 * The server driven by the official `openai` npm client (ref-small, CPU): completions and chat,
 * streamed and not; usage equal to the tokenizer's counts; greedy output equal to
 * `hisparse generate` for the same prompt; n > 1 with seeds; logprobs of both shapes; the
 * model list, /version, and /health turning 503 when the engine fails.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import OpenAI from "openai";
import { Gauge } from "prom-client";
import type { RunningServer } from "../../../src/server/server.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";
import {
  assertOpenAIError,
  assertPoolFullyFree,
  metric,
  postJson,
  request,
  scrapeMetrics,
  startTestServer,
} from "./helpers.js";

const run = promisify(execFile);
const MAX_MODEL_LEN = 512;

/** `hisparse generate` greedy, as a child process; returns its stdout. */
async function cliGenerate(prompt: string, extra: string[] = []): Promise<string> {
  const bin = join(repoRoot, "bin", "hisparse.js");
  const args = [
    bin,
    "generate",
    "--temperature",
    "0",
    "--max-tokens",
    "16",
    "--device",
    "cpu",
    ...extra,
    prompt,
  ];
  const { stdout } = await run(process.execPath, args, { cwd: repoRoot });
  return stdout;
}

describe("OpenAI client against hisparse serve (ref-small, CPU)", () => {
  let server: RunningServer;
  let client: OpenAI;
  let tok: Tokenizer;

  before(async () => {
    server = await startTestServer(
      { maxModelLen: MAX_MODEL_LEN },
      {
        // An extension's own series, refreshed before each scrape (the HiSparse hook).
        extendMetrics: (metrics) => {
          const g = new Gauge({ name: "test_extension_gauge", help: "test", registers: [metrics.registry] });
          metrics.addCollector(() => g.set(server.context.numActiveGroups + 42));
        },
      },
    );
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
  });
  after(() => server.close());

  it("lists the served model with its max_model_len; /version answers", async () => {
    const models = await client.models.list();
    assert.deepEqual(
      models.data.map((m) => [m.id, m.object, (m as unknown as { max_model_len: number }).max_model_len]),
      [["ref-small", "model", MAX_MODEL_LEN]],
    );
    const card = await client.models.retrieve("ref-small");
    assert.equal(card.id, "ref-small");
    await assert.rejects(client.models.retrieve("gpt-4"), (e: unknown) => e instanceof OpenAI.NotFoundError);
    const v = await request(`${server.url}/version`);
    assert.deepEqual(v.json, { version: "test" });
    const h = await request(`${server.url}/health`);
    assert.equal(h.status, 200);
    assert.equal(h.text, "");
  });

  it("greedy completion equals `hisparse generate`; usage equals the tokenizer's counts", async () => {
    const prompt = "The Linux kernel";
    const [res, cli] = await Promise.all([
      client.completions.create({ model: "ref-small", prompt, max_tokens: 16, temperature: 0, logprobs: 0 }),
      cliGenerate(prompt),
    ]);
    const choice = res.choices[0]!;
    assert.equal(`${choice.text}\n`, cli);
    assert.match(res.id, /^cmpl-[0-9a-f]{32}$/);
    assert.equal(res.object, "text_completion");
    assert.equal(res.model, "ref-small");
    assert.ok(Number.isInteger(res.created) && Math.abs(res.created - Date.now() / 1000) < 60);
    const generated = choice.logprobs!.tokens!.length;
    assert.deepEqual(res.usage, {
      prompt_tokens: tok.encode(prompt).length,
      completion_tokens: generated,
      total_tokens: tok.encode(prompt).length + generated,
    });
    assert.equal(choice.finish_reason, generated === 16 ? "length" : "stop");
  });

  it("greedy chat equals `hisparse generate --chat`; prompt_tokens is the templated prompt's length", async () => {
    const q = "What is PostgreSQL?";
    const [res, cli] = await Promise.all([
      client.chat.completions.create({
        model: "ref-small",
        messages: [{ role: "user", content: q }],
        max_completion_tokens: 16,
        temperature: 0,
        logprobs: true,
      }),
      cliGenerate(q, ["--chat"]),
    ]);
    const choice = res.choices[0]!;
    assert.equal(`${choice.message.content}\n`, cli);
    assert.equal(choice.message.role, "assistant");
    assert.match(res.id, /^chatcmpl-[0-9a-f]{32}$/);
    assert.equal(res.object, "chat.completion");
    const text = tok.applyChatTemplate([{ role: "user", content: q }], { addGenerationPrompt: true });
    const promptTokens = tok.encode(text, { addSpecialTokens: false }).length;
    const generated = choice.logprobs!.content!.length;
    assert.deepEqual(res.usage, {
      prompt_tokens: promptTokens,
      completion_tokens: generated,
      total_tokens: promptTokens + generated,
    });
  });

  it("streamed completion: chunks concatenate to the non-streamed text; include_usage adds a last usage chunk", async () => {
    const prompt = "def fibonacci(n):";
    const whole = await client.completions.create({
      prompt,
      model: "ref-small",
      max_tokens: 12,
      temperature: 0,
    });
    const stream = await client.completions.create({
      prompt,
      model: "ref-small",
      max_tokens: 12,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    const finish: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      if (chunk.choices.length === 0) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.text;
        finish.push(c.finish_reason);
      }
    }
    assert.equal(text, whole.choices[0]!.text);
    assert.equal(finish.at(-1), whole.choices[0]!.finish_reason);
    assert.ok(
      finish.slice(0, -1).every((f) => f === null),
      "only the last chunk has a finish_reason",
    );
    assert.deepEqual(usage, whole.usage);
  });

  it("streamed chat: role chunk first, content deltas, finish_reason last, usage chunk", async () => {
    const messages = [
      { role: "system" as const, content: "Answer from the document." },
      { role: "user" as const, content: "What is the Linux kernel?" },
    ];
    const whole = await client.chat.completions.create({
      model: "ref-small",
      messages,
      max_tokens: 10,
      temperature: 0,
    });
    const stream = await client.chat.completions.create({
      model: "ref-small",
      messages,
      max_tokens: 10,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const c of stream) chunks.push(c);
    assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: "assistant", content: "" });
    const content = chunks.flatMap((c) => c.choices.map((x) => x.delta.content ?? "")).join("");
    assert.equal(content, whole.choices[0]!.message.content);
    const last = chunks.at(-1)!;
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, whole.usage);
    const withChoices = chunks.filter((c) => c.choices.length > 0);
    assert.equal(withChoices.at(-1)!.choices[0]!.finish_reason, whole.choices[0]!.finish_reason);
    assert.ok(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0]!.id));
  });

  it("n = 3 with a seed: three choices, reproducible, choice i seeded with seed + i", async () => {
    const params = {
      model: "ref-small",
      prompt: "Once upon a time",
      max_tokens: 8,
      temperature: 1.0,
      seed: 7,
    };
    const a = await client.completions.create({ ...params, n: 3 });
    const b = await client.completions.create({ ...params, n: 3 });
    assert.deepEqual(
      a.choices.map((c) => c.index),
      [0, 1, 2],
    );
    assert.deepEqual(
      a.choices.map((c) => c.text),
      b.choices.map((c) => c.text),
    );
    // Choice 1 of seed 7 is the single choice of seed 8.
    const single = await client.completions.create({ ...params, seed: 8 });
    assert.equal(single.choices[0]!.text, a.choices[1]!.text);
    assert.equal(a.usage!.prompt_tokens, tok.encode("Once upon a time").length, "the prompt counts once");
  });

  it("batched prompts (text and token ids) give prompt × n choices in order", async () => {
    const ids = tok.encode("The Linux kernel");
    const batch = await client.completions.create({
      model: "ref-small",
      prompt: ["The Linux kernel", "Once upon a time"],
      n: 2,
      max_tokens: 4,
      temperature: 0,
    });
    assert.deepEqual(
      batch.choices.map((c) => c.index),
      [0, 1, 2, 3],
    );
    const byIds = await client.completions.create({
      model: "ref-small",
      prompt: ids,
      max_tokens: 4,
      temperature: 0,
    });
    assert.equal(byIds.choices[0]!.text, batch.choices[0]!.text);
    assert.equal(batch.choices[0]!.text, batch.choices[1]!.text, "greedy choices of one prompt agree");
    assert.equal(batch.usage!.prompt_tokens, ids.length + tok.encode("Once upon a time").length);
  });

  it("logprobs: completions top-N dict includes the sampled token; chat lists top_logprobs entries", async () => {
    const c = await client.completions.create({
      model: "ref-small",
      prompt: "The Linux kernel",
      max_tokens: 4,
      temperature: 0,
      logprobs: 3,
    });
    const lp = c.choices[0]!.logprobs!;
    assert.equal(lp.tokens!.length, 4);
    assert.equal(lp.tokens!.join(""), c.choices[0]!.text);
    assert.deepEqual(
      lp.text_offset,
      [0, 1, 2, 3].map((i) => lp.tokens!.slice(0, i).join("").length),
    );
    for (const [i, top] of lp.top_logprobs!.entries()) {
      assert.equal(Object.keys(top).length, 3, "greedy: the sampled token is the top one");
      assert.equal(Math.max(...Object.values(top)), lp.token_logprobs![i]);
    }
    const chat = await client.chat.completions.create({
      model: "ref-small",
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 3,
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
    });
    const entries = chat.choices[0]!.logprobs!.content!;
    assert.equal(entries.length, chat.usage!.completion_tokens);
    for (const e of entries) {
      assert.equal(e.top_logprobs.length, 2);
      assert.equal(e.top_logprobs[0]!.token, e.token);
      assert.equal(e.top_logprobs[0]!.logprob, e.logprob);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token, "utf8")]);
    }
  });

  it("the client raises its typed errors from the server's OpenAI-style bodies", async () => {
    await assert.rejects(
      client.completions.create({ model: "ref-small", prompt: "x", max_tokens: 1000 }),
      (e: unknown) =>
        e instanceof OpenAI.BadRequestError &&
        e.status === 400 &&
        e.param === "max_tokens" &&
        /^This model's maximum context length is 512 tokens\. However, you requested 1001 tokens/.test(
          (e.error as { message: string }).message,
        ),
    );
    await assert.rejects(
      client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }),
      (e: unknown) =>
        e instanceof OpenAI.NotFoundError &&
        (e.error as { message: string }).message === "The model `nope` does not exist.",
    );
  });

  it("stop strings end the text before the stop; stop_reason names it", async () => {
    const base = await client.completions.create({
      model: "ref-small",
      prompt: "The Linux kernel",
      max_tokens: 16,
      temperature: 0,
    });
    const text = base.choices[0]!.text;
    const stop = text.slice(5, 8);
    const r = await postJson(`${server.url}/v1/completions`, {
      prompt: "The Linux kernel",
      max_tokens: 16,
      temperature: 0,
      stop: [stop],
    });
    const choice = (r.json as { choices: { text: string; finish_reason: string; stop_reason: string }[] })
      .choices[0]!;
    assert.equal(choice.text, text.slice(0, text.indexOf(stop)));
    assert.equal(choice.finish_reason, "stop");
    assert.equal(choice.stop_reason, stop);
  });

  it("metrics count the prompt and generation tokens of the requests served; the pool ends fully free", async () => {
    const before = await scrapeMetrics(server.url);
    const prompt = "Perl is a highly capable language";
    const r = await client.completions.create({ model: "ref-small", prompt, max_tokens: 5, temperature: 0 });
    const m = await scrapeMetrics(server.url);
    const d = (name: string) => metric(m, name) - metric(before, name);
    assert.equal(d("vllm:prompt_tokens_total"), r.usage!.prompt_tokens);
    assert.equal(d("vllm:generation_tokens_total"), r.usage!.completion_tokens);
    assert.equal(d("vllm:e2e_request_latency_seconds_count"), 1);
    assert.equal(d("vllm:time_to_first_token_seconds_count"), 1);
    assert.equal(d("vllm:inter_token_latency_seconds_count"), r.usage!.completion_tokens - 1);
    // vLLM's phase histograms: one observation each; queue + prefill time = the server's TTFT.
    for (const h of ["queue", "prefill", "decode", "inference"])
      assert.equal(d(`vllm:request_${h}_time_seconds_count`), 1, h);
    const split = d("vllm:request_queue_time_seconds_sum") + d("vllm:request_prefill_time_seconds_sum");
    assert.ok(Math.abs(split - d("vllm:time_to_first_token_seconds_sum")) < 1e-9);
    assert.ok(d("vllm:request_decode_time_seconds_sum") > 0, "4 tokens after the first took steps");
    assert.equal(m.get("test_extension_gauge"), 42, "an extension's series is served");
    await assertPoolFullyFree(server.url);
  });

  it("after an engine failure /health answers 503 and new requests get 503", async () => {
    server.llm.emit("engineError", new Error("simulated worker crash"));
    const h = await request(`${server.url}/health`);
    assertOpenAIError(h, 503, "health");
    const r = await postJson(`${server.url}/v1/completions`, { prompt: "x", max_tokens: 1 });
    const e = assertOpenAIError(r, 503, "completion after failure");
    assert.match(e.message, /simulated worker crash/);
  });
});
