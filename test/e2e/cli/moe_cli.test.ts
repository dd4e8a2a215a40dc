/**
 * `hisparse` on mixture-of-experts models as a user runs it (a child process): for a small random
 * Qwen3-MoE checkpoint (which loads, test/unit/models/moe_loading.test.ts), a config with a
 * missing or contradictory MoE key, an expert tensor of the wrong shape and a checkpoint missing
 * an expert each end with one line on stderr and a non-zero exit; `info` and `plan` describe
 * Qwen3-30B-A3B with every expert counted.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { writeMoeCheckpoint } from "../../helpers/moe_checkpoint.js";
import { repoRoot } from "../../helpers/reference.js";
import { TINY_QWEN3_MOE_CONFIG } from "../../helpers/tiny_model.js";

const bin = join(repoRoot, "bin", "hisparse.js");
const run = (...args: string[]) =>
  spawnSync(process.execPath, [bin, ...args], {
    encoding: "utf8",
    env: { ...process.env, HISPARSE_DEBUG: "" },
  });

/** Asserts a failed run printed exactly one line to stderr matching `message`, with no stack. */
function assertOneLineError(r: ReturnType<typeof run>, message: string): void {
  assert.notEqual(r.status, 0, `exit code should be non-zero; stdout: ${r.stdout}`);
  const lines = r.stderr.trim().split("\n");
  assert.equal(lines.length, 1, `one line expected, got:\n${r.stderr}`);
  assert.equal(lines[0], `hisparse: ${message}`);
}

const tmp = mkdtempSync(join(tmpdir(), "hisparse-moe-cli-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
/** The tiny Qwen3-MoE with ref-small's vocabulary, so text prompts tokenize with its tokenizer. */
const CONFIG = { ...TINY_QWEN3_MOE_CONFIG, vocab_size: 16384 };
const tokenizer = join(repoRoot, "models", "ref-small");
const generate = (dir: string) =>
  run(
    "generate",
    "--device",
    "cpu",
    "--model",
    dir,
    "--tokenizer",
    tokenizer,
    "--max-tokens",
    "4",
    "--temperature",
    "0",
    "x",
  );

describe("hisparse generate with a MoE checkpoint", () => {
  it("a checkpoint missing an expert", () => {
    const dir = writeMoeCheckpoint(join(tmp, "missing"), CONFIG, {
      edit: (t) => t.delete("model.layers.2.mlp.experts.7.gate_proj.weight"),
    });
    assertOneLineError(
      generate(dir),
      "checkpoint has no tensor model.layers.2.mlp.experts.7.gate_proj.weight",
    );
  });

  it("an expert tensor of the wrong shape", () => {
    const dir = writeMoeCheckpoint(join(tmp, "shape"), CONFIG, {
      edit: (t) => {
        t.set("model.layers.0.mlp.experts.1.up_proj.weight", {
          data: new Uint16Array(31 * 64),
          dtype: "bf16",
          shape: [31, 64],
        });
      },
    });
    assertOneLineError(
      generate(dir),
      "tensor model.layers.0.mlp.experts.1.up_proj.weight has shape [31,64], expected [32,64]",
    );
  });

  it("a MoE config missing a key, and one with contradictory keys", () => {
    const missing = join(tmp, "no-topk");
    writeMoeCheckpoint(missing, CONFIG);
    const { num_experts_per_tok: _, ...noTopk } = CONFIG;
    writeFileSync(join(missing, "config.json"), JSON.stringify(noTopk));
    assertOneLineError(
      generate(missing),
      'config.json is missing "num_experts_per_tok", which a mixture-of-experts model needs',
    );
    const contradictory = join(tmp, "contradictory");
    writeMoeCheckpoint(contradictory, CONFIG);
    writeFileSync(join(contradictory, "config.json"), JSON.stringify({ ...CONFIG, num_local_experts: 16 }));
    assertOneLineError(
      generate(contradictory),
      'config.json "num_experts" (8) and "num_local_experts" (16) contradict each other',
    );
  });
});

describe("hisparse info and plan with Qwen3-30B-A3B", () => {
  it("info: 30.53 B parameters, 128 experts, 3.35 B active", () => {
    const r = run("info", "--model", "qwen3-30b-a3b");
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout,
      /Qwen3MoeForCausalLM, 30\.53 B parameters, 48 layers, hidden 2048, heads 32\/4 kv/,
    );
    assert.match(
      r.stdout,
      /MoE: 128 experts, 8 per token \(softmax, renormalised\), 48 of 48 layers, expert ffn 768, no shared expert; 3\.35 B active parameters/,
    );
  });

  it("plan: the weights are every expert's (56.87 GiB in bf16); KV per token is GQA's", () => {
    const r = run("plan", "--model", "qwen3-30b-a3b", "--gpu-mem-gib", "141", "--context", "32768");
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /− weights 30,532,122,624 parameters × 2 B = 56\.87 GiB/);
    assert.match(
      r.stdout,
      /KV per token {3}= 2 \(K, V\) × 48 layers × 4 KV heads × 128 head_dim × 2 B = 98,304 B/,
    );
    assert.match(r.stdout, /max requests {3}= floor\(46,441 \/ 2,048\) = 22/);
  });
});
