/**
 * `bench serve --dataset multiturn` against a live server (ref-small on the CPU backend, HiSparse
 * auto with prefix caching): every turn of every conversation completes, each later turn resends
 * its history exactly (its earlier prompt's pages are prefix-cache hits: the server-reported hit
 * rate is the share of the history in the prompts), the summary's per-turn figures and the
 * text report are consistent with the outputs, and the server's TTFT split (queue + prefill, from
 * its /metrics, over all turns) adds up.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  buildConversations,
  formatMultiTurnReport,
  type MultiTurnOptions,
  runMultiTurn,
  summarizeMultiTurn,
} from "../../../src/bench/multiturn.js";
import { Rng } from "../../../src/bench/rng.js";
import { resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import type { RunningServer } from "../../../src/server/server.js";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";
import { startTestServer } from "../server/helpers.js";

const O: MultiTurnOptions = { conversations: 2, turns: 3, firstLen: 160, turnLen: 24, outputLen: 8 };

describe("bench serve --dataset multiturn", () => {
  let server: RunningServer;
  before(async () => {
    server = await startTestServer({
      maxModelLen: 512,
      enablePrefixCaching: true,
      extensions: { hisparse: resolveHiSparseConfig({ mode: "auto" }) },
    });
  });
  after(() => server.close());

  it("2 conversations of 3 turns: histories resent exactly, hits reported, per-turn TTFTs", async () => {
    const tok = Tokenizer.fromDir(join(repoRoot, "models", "ref-small"));
    const convs = buildConversations(tok, O, new Rng(1));
    assert.deepEqual(
      convs.map((c) => c.map((t) => t.length)),
      [
        [160, 24, 24],
        [160, 24, 24],
      ],
    );
    const r = await runMultiTurn(
      { baseUrl: server.url, model: "ref-small", ignoreEos: true, options: O },
      convs,
      (t) => tok.encode(t, { addSpecialTokens: false }),
    );
    const sum = summarizeMultiTurn(r, O);
    assert.equal(sum.completed, 6, JSON.stringify(r.turns.flat().map((x) => x.error)));
    assert.equal(sum.failed, 0);
    for (const t of r.turns) for (const x of t) assert.equal(x.outputTokens, 8);
    // Turn 1: 160 tokens each; later turns resend at least the previous prompt + 24 new tokens.
    assert.equal(r.promptTokens[0], 320);
    assert.ok(r.promptTokens[1]! >= 2 * (160 + 24) && r.promptTokens[2]! >= r.promptTokens[1]! + 48);
    // Hits: at least every full page of each earlier prompt, 16 tokens a page (turn 2: 160 of
    // its tokens, turn 3: floor(prompt 2 / 16) pages), over all tokens sent.
    const sent = r.promptTokens.reduce((a, b) => a + b, 0);
    const minHits = 2 * 160 + 16 * Math.floor(r.promptTokens[1]! / 2 / 16) * 2;
    assert.ok(r.server !== null && r.server.prefixQueries === sent, JSON.stringify(r.server));
    assert.ok(r.server.prefixHits! >= minHits, `${r.server.prefixHits} hits, at least ${minHits} expected`);
    assert.equal(sum.prefix_cache_hit_rate, r.server.prefixHits! / sent);
    assert.equal(sum.num_preemptions, 0);
    assert.equal(sum.median_ttft_ms_by_turn.length, 3);
    assert.ok(sum.median_ttft_ms_later_turns !== null && sum.median_ttft_ms_later_turns > 0);
    // The server's TTFT split over all 6 requests (its histograms have no turn): queue + prefill
    // = the server's TTFT, request by request, so the means add up too; the client sees more
    // (HTTP, tokenization, the step the request arrived during).
    assert.equal(sum.server_requests, 6);
    assert.ok(sum.mean_queue_time_ms !== null && sum.mean_queue_time_ms >= 0);
    assert.ok(sum.mean_prefill_time_ms !== null && sum.mean_prefill_time_ms > 0);
    assert.ok(Math.abs(sum.mean_queue_time_ms + sum.mean_prefill_time_ms - sum.mean_server_ttft_ms!) < 1e-6);
    assert.ok(sum.mean_ttft_ms_all_turns! >= sum.mean_server_ttft_ms!, JSON.stringify(sum));
    const report = formatMultiTurnReport(sum, O, r);
    assert.ok(
      report.includes("TTFT split (server /metrics, all turns: 6 requests; its histograms have no turn):"),
    );
    assert.ok(
      report.some((l) => /^ {2}Mean prefill time \(ms\): \d+\.\d\d$/.test(l)),
      report.join("\n"),
    );
    assert.ok(report.some((l) => l.startsWith("Median TTFT of turns 2-3 (ms): ")));
    assert.ok(
      report.some((l) => /^Prefix cache hit rate \(server\): \d+\.\d%/.test(l)),
      report.join("\n"),
    );
  });
});
