/**
 * `hisparse eval`: --compare argument handling, variant flags merged over the command line's
 * engine flags, and both commands end to end (child process, ref-small, tiny sizes).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  expandCompareArgs,
  parseDepths,
  parseNeedleRange,
  resolveVariants,
  variantEngineArgs,
} from "../../../src/cli/eval.js";
import { needleOptionReasons } from "../../../src/eval/needle.js";
import { pplOptionReasons } from "../../../src/eval/ppl.js";
import { repoRoot } from "../../helpers/reference.js";

function hisparse(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(repoRoot, "bin", "hisparse.js"), ...args], {
    env: { ...process.env, HISPARSE_DEBUG: "" },
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c) => {
    stdout += c;
  });
  child.stderr.on("data", (c) => {
    stderr += c;
  });
  return new Promise((resolve) => child.on("close", (status) => resolve({ status, stdout, stderr })));
}

describe("hisparse eval (CLI)", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "hisparse-eval-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("--compare values may start with --; a lone flag ends the list", () => {
    assert.deepEqual(
      expandCompareArgs([
        "eval",
        "ppl",
        "--compare",
        "dense",
        "--enable-hybrid-sparse on --hybrid-sparse-topk 256",
        "--ctx",
        "64",
      ]),
      [
        "eval",
        "ppl",
        "--compare=dense",
        "--compare=--enable-hybrid-sparse on --hybrid-sparse-topk 256",
        "--ctx",
        "64",
      ],
    );
    assert.deepEqual(expandCompareArgs(["--compare", "--ctx", "5"]), ["--compare", "--ctx", "5"]);
  });

  it("a variant's flags override the command line's; the rest stays", () => {
    const base = { blockSize: 16, maxNumSeqs: 8, device: "cpu", enableChunkedPrefill: true, seed: 3 };
    const a = variantEngineArgs(base, {
      name: "v",
      argv: ["--block-size", "8", "--no-enable-chunked-prefill"],
    });
    assert.equal(a.blockSize, 8);
    assert.equal(a.enableChunkedPrefill, false);
    assert.equal(a.maxNumSeqs, 8);
    assert.equal(a.device, "cpu");
    assert.equal(a.seed, 3);
    assert.throws(
      () => variantEngineArgs(base, { name: "v", argv: ["--bogus"] }),
      /^Error: --compare variant "v": unknown option '--bogus'$/,
    );
    assert.throws(
      () => variantEngineArgs(base, { name: "v", argv: ["--model", "x"] }),
      /give --model outside --compare/,
    );
  });

  it("--depths takes a count or percentages; --needles a count or range", () => {
    assert.deepEqual(parseDepths("3"), [0, 0.5, 1]);
    assert.deepEqual(parseDepths("10,50%,90"), [0.1, 0.5, 0.9]);
    assert.throws(() => parseDepths("120,5"), /percentages in \[0, 100\]/);
    assert.deepEqual(parseNeedleRange("1-4"), [1, 4]);
    assert.deepEqual(parseNeedleRange("2"), [2, 2]);
    assert.throws(() => parseNeedleRange("3-1"), /a count or a range/);
  });

  it("eval needle: one table with a column per variant, and JSON", async () => {
    const filler = join(dir, "filler.txt");
    writeFileSync(
      filler,
      Array.from({ length: 300 }, (_, i) => `Section ${i} explains how the pages are freed.`).join("\n"),
    );
    const json = join(dir, "needle.json");
    const r = await hisparse([
      "eval",
      "needle",
      "--device",
      "cpu",
      "--max-model-len",
      "512",
      "--lengths",
      "160",
      "--depths",
      "2",
      "--trials",
      "1",
      "--filler-file",
      filler,
      "--compare",
      "dense",
      "--block-size 8",
      "--json",
      json,
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^\| length \| depth \| +dense \| --block-size 8 \|$/m);
    assert.match(r.stderr, /^\[eval\] variant dense: 2\/2 documents done, [\d.]+ s$/m);
    assert.match(r.stdout, /^\| 160 +\| 0% +\|/m);
    assert.match(r.stdout, /^\| all +\| all +\|/m);
    const j = JSON.parse(readFileSync(json, "utf8"));
    assert.equal(j.task, "needle");
    assert.deepEqual(j.fillerFiles, [filler]);
    assert.deepEqual(
      j.variants.map((v: { name: string; flags: string[] }) => [v.name, v.flags]),
      [
        ["dense", []],
        ["--block-size 8", ["--block-size", "8"]],
      ],
    );
    assert.equal(j.variants[0].trials.length, 2);
    assert.deepEqual(
      j.variants[0].cells.map((c: { length: number | null; depth: number | null; trials: number }) => [
        c.length,
        c.depth,
        c.trials,
      ]),
      [
        [160, 0, 1],
        [160, 1, 1],
        [160, null, 2],
        [null, null, 2],
      ],
    );
  });

  it("length preconditions of ppl and needle are reasons, before any engine starts", () => {
    const src = "--max-model-len (200)";
    assert.deepEqual(pplOptionReasons({ ctx: 256, prefixTokens: 128, maxWindows: null }, 200, src), [
      "--ctx (256) must be <= --max-model-len (200)",
    ]);
    assert.deepEqual(pplOptionReasons({ ctx: 200, prefixTokens: 100, maxWindows: 1 }, 200, src), []);
    assert.deepEqual(pplOptionReasons({ ctx: 64, prefixTokens: 64, maxWindows: 0 }, 200, src), [
      "--prefix-tokens must be in [1, --ctx − 1], got 64 with --ctx 64",
      "--max-windows must be >= 1, got 0",
    ]);
    assert.deepEqual(needleOptionReasons({ lengths: [512, 1024], trials: 1, maxTokens: 8 }, 1024, "X"), [
      "--lengths 1024 + --max-tokens 8 must be <= X",
    ]);
    assert.deepEqual(needleOptionReasons({ lengths: [1016], trials: 1, maxTokens: 8 }, 1024, "X"), []);
    assert.deepEqual(needleOptionReasons({ lengths: [16], trials: 0, maxTokens: 0 }, 1024, "X"), [
      "--trials must be >= 1, got 0",
      "--max-tokens must be >= 1, got 0",
    ]);
  });

  it("every --compare variant is checked before any runs, each bad one named", () => {
    const base = { device: "cpu", blockSize: 16, maxNumSeqs: 8, seed: 0 };
    const ctx = (len: number, source: string) =>
      pplOptionReasons({ ctx: 64, prefixTokens: 32, maxWindows: null }, len, source);
    assert.throws(
      () =>
        resolveVariants(
          {
            ...base,
            compare: [
              "dense",
              "sp: --enable-hybrid-sparse on --hybrid-sparse-topk 8 --enable-prefix-caching",
              "short: --max-model-len 32",
              "big: --max-model-len 99999",
            ],
          },
          ctx,
        ),
      {
        message:
          '--compare variant "sp": invalid configuration: topk must be an integer >= 16, got 8; ' +
          '--compare variant "short": invalid configuration: --ctx (64) must be <= --max-model-len (32); ' +
          '--compare variant "big": --max-model-len 99999 exceeds the model\'s max_position_embeddings (16384)',
      },
    );
    // Without --compare the one variant is not named; the model's length applies by default.
    assert.throws(
      () =>
        resolveVariants({ ...base }, (len, source) =>
          pplOptionReasons({ ctx: 20000, prefixTokens: 32, maxWindows: null }, len, source),
        ),
      {
        message:
          "invalid configuration: --ctx (20000) must be <= the model's max_position_embeddings (16384)",
      },
    );
    assert.throws(() => resolveVariants({ ...base }, () => ["--trials must be >= 1, got 0"]), {
      name: "ConfigError",
      message: "invalid configuration: --trials must be >= 1, got 0",
    });
    const ok = resolveVariants({ ...base, compare: ["a", "b: --max-model-len 64"] }, ctx);
    assert.deepEqual(
      ok.map((v) => [v.spec.name, v.args.maxModelLen]),
      [
        ["a", undefined],
        ["b", 64],
      ],
    );
  });

  it("eval ppl: the table and JSON, and one-line errors", async () => {
    const text = join(dir, "text.txt");
    writeFileSync(text, "int main(void) { return 0; }\n".repeat(30));
    const json = join(dir, "ppl.json");
    const r = await hisparse([
      "eval",
      "ppl",
      "--device",
      "cpu",
      "--max-model-len",
      "256",
      "--file",
      text,
      "--ctx",
      "64",
      "--max-windows",
      "2",
      "--compare",
      "a",
      "b: --max-num-seqs 1",
      "--json",
      json,
    ]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /2 windows of 64 tokens, 32 prefilled, 32 scored by forced decoding/);
    // Each variant reports its progress between its start and done lines (at least the last).
    assert.match(r.stderr, /^\[eval\] variant a: 2\/2 windows done, [\d.]+ s$/m);
    assert.match(r.stderr, /^\[eval\] variant b: 2\/2 windows done, [\d.]+ s$/m);
    assert.match(r.stdout, /^\| perplexity +\| +[\d.]+ \| +[\d.]+ \|$/m);
    const j = JSON.parse(readFileSync(json, "utf8"));
    assert.equal(j.variants.length, 2);
    assert.equal(j.variants[0].numScoredTokens, 64);
    // Batching one request at a time computes the same logprobs.
    assert.ok(Math.abs(j.variants[0].perplexity - j.variants[1].perplexity) < 1e-9);
    for (const [args, re] of [
      [["--file", join(dir, "missing.txt")], /^hisparse: cannot read .*missing\.txt \(ENOENT\)$/],
      [
        ["--file", text, "--ctx", "4096"],
        /^hisparse: the text has \d+ tokens, fewer than one --ctx window of 4096$/,
      ],
      [
        ["--file", text, "--ctx", "256", "--max-model-len", "200"],
        /^hisparse: invalid configuration: --ctx \(256\) must be <= --max-model-len \(200\)$/,
      ],
      [
        ["--file", text, "--compare", "x: --nope"],
        /^hisparse: --compare variant "x": unknown option '--nope'$/,
      ],
    ] as const) {
      const e = await hisparse(["eval", "ppl", "--device", "cpu", ...args]);
      assert.equal(e.status, 1, e.stderr);
      assert.equal(e.stderr.trim().split("\n").length, 1, e.stderr);
      assert.match(e.stderr.trim(), re);
    }
  });
});
