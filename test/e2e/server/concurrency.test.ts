/**
 * 64 concurrent streaming clients on ref-small (CPU) with --max-num-seqs 16: at most 16 run
 * while the rest wait; the 32 that stay all complete with their full output; the 32 killed
 * mid-stream are aborted; afterwards, through /metrics, no block has leaked.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../../src/server/server.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";
import { assertPoolFullyFree, metric, parseSse, scrapeMetrics, startTestServer } from "./helpers.js";

const NUM_CLIENTS = 64;
const MAX_NUM_SEQS = 16;
const KEPT_MAX_TOKENS = 12;
/** Killed clients ask for many tokens, so none can finish before it is killed. */
const KILLED_MAX_TOKENS = 200;

/** Resolves when `n` calls to the returned `arrive()` were made. */
function barrier(n: number): { arrive: () => void; all: Promise<void> } {
  let count = 0;
  let release!: () => void;
  const all = new Promise<void>((r) => {
    release = r;
  });
  return {
    arrive: () => {
      count += 1;
      if (count === n) release();
    },
    all,
  };
}

/**
 * Reads SSE events from a response until `stopAfter` complete events (or the end); returns the
 * text of those events.
 */
async function readEvents(res: Response, stopAfter = Number.POSITIVE_INFINITY): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text;
    text += decoder.decode(value, { stream: true });
    const events = text.split("\n\n").slice(0, -1);
    if (events.length >= stopAfter) {
      await reader.cancel();
      return `${events.slice(0, stopAfter).join("\n\n")}\n\n`;
    }
  }
}

describe("64 concurrent streaming clients, half killed mid-stream (ref-small, CPU)", () => {
  let server: RunningServer;
  let tok: Tokenizer;

  before(async () => {
    server = await startTestServer({ maxModelLen: 512, maxNumSeqs: MAX_NUM_SEQS });
    tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
  });
  after(() => server.close());

  it("all kept clients complete, killed ones are aborted, the queue caps running requests, no block leaks", async () => {
    const prompts = Array.from({ length: NUM_CLIENTS }, (_, i) => `Request ${i}: the Linux kernel schedules`);
    const submitted = barrier(NUM_CLIENTS);
    const clients = prompts.map(async (prompt, i) => {
      const killed = i % 2 === 1;
      const ctl = new AbortController();
      const res = await fetch(`${server.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          prompt,
          max_tokens: killed ? KILLED_MAX_TOKENS : KEPT_MAX_TOKENS,
          ignore_eos: true,
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
        }),
        signal: ctl.signal,
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
      // The reply headers come once the request is in the engine.
      submitted.arrive();
      if (!killed) return { killed, events: parseSse(await readEvents(res)) };
      await submitted.all;
      const text = await readEvents(res, 2);
      ctl.abort();
      return { killed, events: parseSse(text) };
    });

    await submitted.all;
    // Every request is in the engine and no killed one (200 tokens) can have finished: at least
    // 32 are unfinished, at most 16 of them run, the others wait.
    const during = await scrapeMetrics(server.url);
    assert.ok(metric(during, "vllm:num_requests_running") <= MAX_NUM_SEQS, "running <= max-num-seqs");
    assert.ok(metric(during, "vllm:num_requests_waiting") >= NUM_CLIENTS / 2 - MAX_NUM_SEQS, "the rest wait");

    const results = await Promise.all(clients);
    for (const [i, r] of results.entries()) {
      if (r.killed) {
        assert.equal(r.events.length, 2, `client ${i}: two chunks before the kill`);
        continue;
      }
      assert.equal(r.events.at(-1), "[DONE]", `client ${i}: [DONE] last`);
      const chunks = r.events.slice(0, -1) as {
        choices: { text: string; finish_reason: string | null }[];
        usage?: { prompt_tokens: number; completion_tokens: number };
      }[];
      const usage = chunks.at(-1)!.usage!;
      assert.deepEqual(chunks.at(-1)!.choices, [], `client ${i}: usage chunk has no choices`);
      assert.equal(usage.completion_tokens, KEPT_MAX_TOKENS, `client ${i}: completion tokens`);
      assert.equal(usage.prompt_tokens, tok.encode(prompts[i]!).length, `client ${i}: prompt tokens`);
      const withChoices = chunks.filter((c) => c.choices.length > 0);
      assert.equal(withChoices.at(-1)!.choices[0]!.finish_reason, "length", `client ${i}: finish reason`);
    }

    await assertPoolFullyFree(server.url);
    const m = await scrapeMetrics(server.url);
    assert.equal(metric(m, "vllm:request_success_total", 'finished_reason="abort"'), NUM_CLIENTS / 2);
    assert.equal(metric(m, "vllm:request_success_total", 'finished_reason="length"'), NUM_CLIENTS / 2);
    // Every client got a first token, so every prompt was counted once.
    const promptTokens = prompts.reduce((a, p) => a + tok.encode(p).length, 0);
    assert.equal(metric(m, "vllm:prompt_tokens_total"), promptTokens);
  });
});
