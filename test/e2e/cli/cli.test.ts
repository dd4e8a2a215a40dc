/**
 * `hisparse` as a user runs it (a child process through bin/hisparse.js): a continuation is
 * printed, and every bad input ends with one line on stderr, no stack trace, a non-zero exit.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, cpSync, mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { repoRoot } from "../../helpers/reference.js";

const bin = join(repoRoot, "bin", "hisparse.js");
const run = (...args: string[]) =>
  spawnSync(process.execPath, [bin, ...args], {
    encoding: "utf8",
    env: { ...process.env, HISPARSE_DEBUG: "" },
  });

/** Asserts a failed run printed exactly one line to stderr, prefixed "hisparse:", with no stack. */
function assertOneLineError(r: ReturnType<typeof run>, pattern: RegExp): void {
  assert.notEqual(r.status, 0, `exit code should be non-zero; stdout: ${r.stdout}`);
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one line expected, got:\n${r.stderr}`);
  assert.match(lines[0]!, /^hisparse: /);
  assert.match(lines[0]!, pattern);
  assert.doesNotMatch(r.stderr, /\n\s+at /, "no stack trace");
}

describe("hisparse generate", () => {
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-cli-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it("prints a continuation with the bundled model", () => {
    const r = run(
      "generate",
      "--device",
      "cpu",
      "--temperature",
      "0",
      "--max-tokens",
      "12",
      "The Linux kernel",
    );
    assert.equal(r.status, 0, r.stderr);
    assert.ok(r.stdout.trim().length > 0, "some text is printed");
  });

  it("greedy output is deterministic", () => {
    const a = run(
      "generate",
      "--device",
      "cpu",
      "--temperature",
      "0",
      "--max-tokens",
      "12",
      "int main(void) {",
    );
    const b = run(
      "generate",
      "--device",
      "cpu",
      "--temperature",
      "0",
      "--max-tokens",
      "12",
      "int main(void) {",
    );
    assert.equal(a.status, 0, a.stderr);
    assert.equal(a.stdout, b.stdout);
  });

  it("a missing model directory", () => {
    assertOneLineError(run("generate", "--model", join(tmp, "nope"), "x"), /does not exist/);
  });

  it("a corrupt config.json", () => {
    const dir = join(tmp, "corrupt");
    mkdirSync(dir);
    writeFileSync(join(dir, "config.json"), "{not json");
    assertOneLineError(run("generate", "--model", dir, "x"), /config\.json is not valid JSON/);
  });

  it("an unsupported architecture", () => {
    const dir = join(tmp, "gpt2");
    mkdirSync(dir);
    writeFileSync(join(dir, "config.json"), JSON.stringify({ architectures: ["GPT2LMHeadModel"] }));
    assertOneLineError(run("generate", "--model", dir, "x"), /GPT2LMHeadModel is not supported/);
  });

  it("a truncated safetensors file", () => {
    const dir = join(tmp, "truncated");
    cpSync(join(repoRoot, "models", "ref-small"), dir, { recursive: true });
    const shard = join(dir, "model-00001-of-00002.safetensors");
    chmodSync(shard, 0o644);
    truncateSync(shard, 5_000_000);
    assertOneLineError(run("generate", "--device", "cpu", "--model", dir, "x"), /truncated/);
  });

  it("a prompt longer than --max-model-len", () => {
    const r = run(
      "generate",
      "--device",
      "cpu",
      "--max-model-len",
      "8",
      "a prompt that is certainly longer than eight tokens",
    );
    assertOneLineError(r, /maximum model length is 8/);
  });

  it("--max-tokens 0", () => {
    assertOneLineError(
      run("generate", "--max-tokens", "0", "hi"),
      /--max-tokens must be an integer >= 1, got 0$/,
    );
    assertOneLineError(
      run("generate", "--max-tokens", "0", "--top-p", "0", "hi"),
      /--max-tokens must be an integer >= 1, got 0; --top-p must be in \(0, 1\], got 0$/,
    );
  });

  it("a negative temperature", () => {
    assertOneLineError(run("generate", "--temperature", "-1", "hi"), /temperature must be >= 0/);
  });

  it("a non-numeric flag value and an unknown flag (usage errors, exit 2)", () => {
    const a = run("generate", "--max-tokens", "abc", "hi");
    assertOneLineError(a, /must be an integer/);
    assert.equal(a.status, 2);
    const b = run("generate", "--bogus", "hi");
    assertOneLineError(b, /unknown option '--bogus'/);
    assert.equal(b.status, 2);
  });
});

describe("a KV cache smaller than one --max-model-len request: serve, generate, eval refuse to start", () => {
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-cli-kv-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));
  // Bundled ref-small on the CPU; 2 blocks of 16 tokens hold 32 of the 64.
  const small = ["--device", "cpu", "--num-gpu-blocks-override", "2", "--max-model-len", "64"];
  const expected =
    "hisparse: the model's max seq len (64) is larger than the maximum number of tokens that can be stored in the KV cache (32: 2 blocks of 16 tokens); increase --cpu-kv-cache-gib or --num-gpu-blocks-override, or decrease --max-model-len";
  /** Exit 1, the refusal as the last stderr line (eval announces its variant first), no stack. */
  const assertRefused = (r: ReturnType<typeof run>, linesBefore: number) => {
    assert.equal(r.status, 1, r.stderr);
    const lines = r.stderr.trim().split("\n");
    assert.equal(lines.length, linesBefore + 1, r.stderr);
    assert.equal(lines.at(-1), expected);
    assert.equal(r.stdout, "");
  };

  it("generate", () => {
    assertRefused(run("generate", ...small, "hi"), 0);
  });

  it("serve (exits instead of listening)", () => {
    assertRefused(run("serve", ...small, "--port", "0"), 0);
  });

  it("serve --max-num-seqs 0 is reported under its own name (not as the waiting limit it derives)", () => {
    const r = run("serve", "--device", "cpu", "--max-num-seqs", "0", "--port", "0");
    assert.equal(r.status, 1, r.stderr);
    assert.equal(r.stderr.trim(), "hisparse: invalid configuration: --max-num-seqs must be >= 1, got 0");
  });

  it("eval ppl (after its variant line)", () => {
    const file = join(tmp, "text.txt");
    writeFileSync(file, "The quick brown fox jumps over the lazy dog. ".repeat(20));
    const r = run("eval", "ppl", ...small, "--file", file, "--ctx", "32");
    assertRefused(r, 1);
    assert.match(r.stderr, /^\[eval\] variant /);
  });
});

describe("hisparse info", () => {
  it("summarises the bundled model", () => {
    const r = run("info");
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /LlamaForCausalLM, 7\.34 M parameters, 4 layers, hidden 256/);
    assert.match(r.stdout, /backend: (cpu|cuda)/);
  });

  it("a refused split exits non-zero with one sentence, after the summary (text and --json)", () => {
    for (const json of [[], ["--json"]]) {
      const r = run("info", "--tensor-parallel-size", "3", ...json);
      assertOneLineError(
        r,
        /^hisparse: --tensor-parallel-size 3 is refused for this model: the model's 4 attention heads/,
      );
      assert.match(r.stdout, json.length > 0 ? /"reasons": \[/ : /tensor parallel: 3 ranks .*: refused: /);
    }
    assert.equal(run("info", "--tensor-parallel-size", "2").status, 0);
  });
});
