/**
 * Streaming completions send a chunk for every step that produced a token, even when its text is
 * empty (vLLM's rule): a model served without a tokenizer (dummy weights from a bare config.json,
 * as the GPU benchmarks run) has empty text throughout, and its clients still see each token's
 * timing, so a benchmark's TTFT is the first token's, not the whole reply's.
 */
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { RunningServer } from "../../../src/server/server.js";
import { repoRoot } from "../../helpers/reference.js";
import { parseSse, postJson, startTestServer } from "./helpers.js";

describe("completion streams of a model without a tokenizer", () => {
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-bare-"));
  let server: RunningServer;
  before(async () => {
    const dir = join(tmp, "bare");
    mkdirSync(dir);
    copyFileSync(join(repoRoot, "models", "ref-small", "config.json"), join(dir, "config.json"));
    server = await startTestServer({ model: dir, loadFormat: "dummy" });
  });
  after(async () => {
    await server.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  it("has one chunk per generated token, then the usage chunk", async () => {
    const r = await postJson(`${server.url}/v1/completions`, {
      prompt: [1, 2, 3, 4],
      max_tokens: 6,
      min_tokens: 6,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.equal(r.status, 200, r.text);
    const events = parseSse(r.text);
    assert.equal(events.at(-1), "[DONE]");
    const chunks = events.filter(
      (e): e is { choices: { text: string; finish_reason: string | null }[] } =>
        typeof e === "object" && e !== null && (e as { choices?: unknown[] }).choices?.length === 1,
    );
    assert.equal(chunks.length, 6, "one chunk per token");
    assert.ok(chunks.every((c) => c.choices[0]!.text === ""));
    assert.equal(chunks.at(-1)!.choices[0]!.finish_reason, "length");
    const usage = events.at(-2) as { usage: { completion_tokens: number } };
    assert.equal(usage.usage.completion_tokens, 6);
  });
});
