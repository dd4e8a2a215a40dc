/**
 * `hisparse generate --prompt-token-ids` as a user runs it (a child process): a prompt of token
 * ids gives the greedy continuation of the text they encode; a model without a tokenizer prints
 * the generated ids; bad ids and conflicting prompts end with one line on stderr.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { Tokenizer } from "../../../src/tokenizer/tokenizer.js";
import { repoRoot } from "../../helpers/reference.js";

const bin = join(repoRoot, "bin", "hisparse.js");
const run = (...args: string[]) =>
  spawnSync(process.execPath, [bin, ...args], {
    encoding: "utf8",
    env: { ...process.env, HISPARSE_DEBUG: "" },
  });
const GREEDY = ["generate", "--device", "cpu", "--temperature", "0", "--max-tokens", "8"];

/** Asserts a failed run printed exactly one line to stderr, prefixed "hisparse:". */
function assertOneLineError(r: ReturnType<typeof run>, pattern: RegExp, status: number): void {
  assert.equal(r.status, status, `stdout: ${r.stdout}\nstderr: ${r.stderr}`);
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one line expected, got:\n${r.stderr}`);
  assert.match(lines[0]!, /^hisparse: /);
  assert.match(lines[0]!, pattern);
}

describe("hisparse generate --prompt-token-ids", () => {
  const tmp = mkdtempSync(join(tmpdir(), "hisparse-ids-"));
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it("the ids of a text give the text's greedy continuation, as a list or a JSON array", () => {
    const text = "The Linux kernel";
    const ids = Tokenizer.fromDir(join(repoRoot, "models", "ref-small")).encode(text);
    const fromText = run(...GREEDY, text);
    assert.equal(fromText.status, 0, fromText.stderr);
    const fromList = run(...GREEDY, "--prompt-token-ids", ids.join(","));
    assert.equal(fromList.status, 0, fromList.stderr);
    assert.equal(fromList.stdout, fromText.stdout);
    const fromJson = run(...GREEDY, "--prompt-token-ids", JSON.stringify(ids));
    assert.equal(fromJson.stdout, fromText.stdout);
  });

  it("a model without a tokenizer prints the generated token ids", () => {
    const dir = join(tmp, "bare");
    mkdirSync(dir);
    copyFileSync(join(repoRoot, "models", "ref-small", "config.json"), join(dir, "config.json"));
    const r = run(...GREEDY, "--model", dir, "--load-format", "dummy", "--prompt-token-ids", "1,2,3");
    assert.equal(r.status, 0, r.stderr);
    // 8 greedy ids, space-separated.
    assert.match(r.stdout.trim(), /^\d+( \d+){7}$/);
  });

  it("bad ids are a usage error (exit 2); an id out of vocabulary, both prompts, none, or --chat with ids: one line (exit 1)", () => {
    for (const bad of ["1,x", "[]", "-1", "[1.5]", "{}", ""])
      assertOneLineError(run(...GREEDY, "--prompt-token-ids", bad), /must be token ids/, 2);
    assertOneLineError(
      run(...GREEDY, "--prompt-token-ids", "99999999"),
      /token id 99999999 is out of vocabulary \(size 16384\)/,
      1,
    );
    assertOneLineError(
      run(...GREEDY, "--prompt-token-ids", "1,2", "hi"),
      /either a prompt or --prompt-token-ids, not both/,
      1,
    );
    assertOneLineError(run(...GREEDY), /give a prompt \(text\) or --prompt-token-ids/, 1);
    assertOneLineError(
      run(...GREEDY, "--chat", "--prompt-token-ids", "1,2"),
      /--chat takes a text prompt/,
      1,
    );
  });
});
