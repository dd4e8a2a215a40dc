/**
 * The peer table of bench/peers on the figures the kit recorded on the H200 (issue 20's table:
 * hisparse from cuda_bench.js, node-llama-cpp 3.21.1 from nlc_bench.mjs), and the table CLI's
 * one-line errors on a wrong file.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  type HisparseBench,
  hisparseBenchSchema,
  type NlcSummary,
  nlcSummarySchema,
  peerMarkdown,
  peerRows,
} from "../../../bench/peers/peer_table.js";

const decode = (batch: number, context: number, tokPerS: number | null) => ({
  path: "new",
  batch,
  context,
  stepMs: tokPerS === null ? null : (batch * 1000) / tokPerS,
  tokPerS,
});
/** cuda_bench.js --json as it writes it (issue 20's hisparse column). */
const hs: HisparseBench = hisparseBenchSchema.parse({
  config: "LlamaForCausalLM",
  loadSeconds: 43.4,
  decodeRows: [
    decode(1, 1024, 208),
    decode(32, 1024, 5410),
    decode(64, 1024, 9033),
    decode(1, 8192, 202),
    decode(32, 8192, 2451),
    decode(64, 8192, 3204),
    decode(1, 32768, 151),
    decode(32, 32768, null),
    decode(64, 32768, null),
  ],
  gemmTflops: 811,
  prefillRows: [
    { tokens: 8192, seconds: 0.24, tokPerS: 34074, tflops: 557, pctGemm: 68.7 },
    { tokens: 32768, seconds: 1.67, tokPerS: 19664, tflops: 500, pctGemm: 56 },
  ],
});
/** nlc_bench.mjs --summary as it writes it (issue 20's node-llama-cpp column). */
const single = (P: number, prefill: number, decodeTokS: number) => ({
  kind: "single",
  P,
  N: 128,
  prefill_s: P / prefill,
  prefill_tok_s: prefill,
  decode_tok_s: decodeTokS,
});
const batched = (P: number, B: number, decodeTokS: number) => ({
  kind: "batched",
  P,
  B,
  N: 128,
  decode_tok_s: decodeTokS,
});
const nlcRaw = {
  summary: true,
  engine: "node-llama-cpp",
  version: "3.21.1",
  llamaCpp: { repo: "ggml-org/llama.cpp", release: "v0.4.0" },
  gpuNames: ["NVIDIA H200"],
  single: [single(1024, 40000, 165), single(8192, 18159, 154), single(32768, 11557, 120)],
  batched: [
    batched(1024, 32, 2146),
    batched(1024, 64, 2673),
    batched(8192, 32, 1338),
    batched(8192, 64, 1593),
  ],
  phases: [
    { phase: "getLlama", s: 0.4 },
    { phase: "loadModel", s: 3.9, size_gib: 14.96 },
  ],
};
const nlc: NlcSummary = nlcSummarySchema.parse(nlcRaw);

describe("peer table", () => {
  it("pairs every shape of issue 20 and gives the ratio hisparse / node-llama-cpp", () => {
    const rows = peerRows(hs, nlc);
    const r = (label: string) => rows.find((x) => x.label.startsWith(label))!;
    assert.equal(rows.length, 10);
    assert.deepEqual(
      rows.map((x) => (x.ratio === null ? null : Math.round(x.ratio * 100) / 100)),
      [1.26, 1.31, 1.26, 2.52, 1.83, 3.38, 2.01, 1.88, 1.7, 0.09],
    );
    assert.equal(r("decode, batch 1, 8K").hisparse, 202);
    assert.equal(r("decode, batch 1, 8K").peer, 154);
    assert.equal(r("decode, 64 sequences x 8K").peer, 1593);
    assert.equal(r("prefill 32K").peer, 11557);
    // targets: batch 1 >= 1.45x (not met), 64 x 8K >= 2x (met), prefill 32K >= 2x (not met)
    assert.deepEqual(
      rows.filter((x) => x.shape.minRatio !== undefined).map((x) => x.met),
      [false, false, false, true, false],
    );
    assert.equal(r("model load").unit, "s");
  });

  it("says why a side has no figure instead of inventing one", () => {
    const skipped = nlcSummarySchema.parse({
      ...nlcRaw,
      single: [
        single(1024, 40000, 165),
        { kind: "single", P: 32768, N: 128, skipped: "estimated 9 s > 2 s left" },
      ],
      batched: [{ kind: "batched", P: 8192, B: 64, N: 128, error: "Error: out of memory\n at x" }],
    });
    const rows = peerRows(hs, skipped);
    const b32k = rows.find((x) => x.label === "decode, batch 1, 32K context")!;
    assert.equal(b32k.peer, null);
    assert.equal(b32k.ratio, null);
    assert.match(b32k.note, /node-llama-cpp: estimated 9 s > 2 s left/);
    const b64 = rows.find((x) => x.label.startsWith("decode, 64 sequences x 8K"))!;
    assert.equal(b64.met, null);
    assert.match(b64.note, /node-llama-cpp: Error: out of memory$/);
    assert.match(rows.find((x) => x.label.startsWith("decode, 32 sequences x 8K"))!.note, /not measured/);
    const noFit = peerRows(hs, nlc, [{ kind: "decode", batch: 32, context: 32768 }])[0]!;
    assert.equal(noFit.hisparse, null);
    assert.match(noFit.note, /hisparse: does not fit/);
  });

  it("writes a markdown table with both figures, the ratio and the targets met", () => {
    const md = peerMarkdown(peerRows(hs, nlc), hs, nlc, ["cuda_bench.json", "nlc_summary.json"]);
    assert.match(md, /^\| shape \| hisparse \| node-llama-cpp \| ratio \| target \(issue 20\) \| note \|$/m);
    assert.match(
      md,
      /^\| decode, batch 1, 1K context \| 208 \| 165 \| 1\.26x \| >= 1\.45x: NOT met \| {2}\|$/m,
    );
    assert.match(
      md,
      /^\| decode, 64 sequences x 8K \(all sequences\) \| 3204 \| 1593 \| 2\.01x \| >= 2x: met \| {2}\|$/m,
    );
    assert.match(md, /^\| model load to first use \(s\) \| 43\.40 \| 3\.90 \| 0\.09x \|/m);
    assert.match(md, /^Targets met: 1 of 5\.$/m);
    assert.match(md, /node-llama-cpp 3\.21\.1 \(llama\.cpp v0\.4\.0, NVIDIA H200\)/);
  });

  it("the CLI writes the markdown file, and names the bad field of a wrong file in one line", () => {
    const dir = mkdtempSync(join(tmpdir(), "peer-table-"));
    writeFileSync(join(dir, "hs.json"), JSON.stringify(hs));
    writeFileSync(join(dir, "nlc.json"), JSON.stringify(nlcRaw));
    const run = (...args: string[]) =>
      spawnSync(process.execPath, ["--import", "tsx", "bench/peers/table.ts", ...args], { encoding: "utf8" });
    const ok = run(
      "--hisparse",
      join(dir, "hs.json"),
      "--nlc",
      join(dir, "nlc.json"),
      "--out",
      join(dir, "t.md"),
    );
    assert.equal(ok.status, 0, ok.stderr);
    assert.equal(readFileSync(join(dir, "t.md"), "utf8"), ok.stdout);
    writeFileSync(join(dir, "bad.json"), JSON.stringify({ ...nlcRaw, single: [{ kind: "single" }] }));
    const bad = run("--hisparse", join(dir, "hs.json"), "--nlc", join(dir, "bad.json"));
    assert.equal(bad.status, 2);
    assert.match(bad.stderr.trim(), /^peer table: .*bad\.json: single\.0\.P: /);
    assert.equal(bad.stderr.trim().split("\n").length, 1);
    const missing = run("--hisparse", join(dir, "nope.json"), "--nlc", join(dir, "nlc.json"));
    assert.equal(missing.status, 2);
    assert.match(missing.stderr, /^peer table: cannot read .*nope\.json/);
  });
});
