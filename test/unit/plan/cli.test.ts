/** `hisparse plan` as users run it: the arithmetic printed, JSON, one-line errors. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import { repoRoot } from "../../helpers/reference.js";

function hisparse(args: string[]) {
  const r = spawnSync(process.execPath, [join(repoRoot, "bin", "hisparse.js"), "plan", ...args], {
    encoding: "utf8",
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe("hisparse plan (CLI)", () => {
  it("prints each term for Llama-3.1-8B at 128K on an H200", () => {
    const r = hisparse(["--model", "llama-3.1-8b", "--gpu-mem-gib", "141", "--context", "131072"]);
    assert.equal(r.status, 0, r.stderr);
    for (const line of [
      "  = KV cache budget 109.94 GiB (118,049,831,321 B)",
      "  KV per token   = 2 (K, V) × 32 layers × 8 KV heads × 128 head_dim × 2 B = 131,072 B",
      "  max requests   = floor(56,290 / 8,192) = 6   (without paging: floor(budget / (131,072 × 131,072 B)) = 6)",
      // The defaults: one bf16 digest per page, h = 2 × 65,536 + 30 × 2 × 8 × 128 × 2 = 253,952 B.
      "  GPU per page   = attention (dense layers) 2 layers × (16 tokens × 4,096 B) + quest digest 30 layers × 4,096 B (1 × min/max of 16 tokens, bf16) = 248.00 KiB (digests 120.00 KiB)",
      "  per request    = 8,192 pages; on the GPU ceil((64 + 256 + 4096) / 16) + 1 = 277 blocks",
      "  prefill        = all 8,192 pages in GPU blocks while a request prefills (dense attention; also a recompute after preemption),",
      "    by GPU pool    = floor((47,716 − 8,192 of one dense prefill) / 277) + 1 = 143",
      "    max requests   = 11 (1.8× dense)",
      "  with the best host pool for this context: --host-pool-gib 585.00",
      "    N              = floor((118,049,831,321 B − (8,192 − 277) × 1,966,080 B) / (8,192 × 253,952 B + 277 × 1,966,080 B)) = 39",
      "    host pages     = max(39 × 8,192, ceil(budget / (1,966,080 B + 253,952 B)) = 53,175) = 319,488",
      "    by GPU pool    = floor((18,776 − 8,192 of one dense prefill) / 277) + 1 = 39",
      "    max requests   = 39 (6.5× dense)",
    ])
      assert.ok(r.stdout.includes(`${line}\n`), `missing: ${line}\n${r.stdout}`);
  });

  it("GLM-5 on 8 H200s (--config DIR, --tensor-parallel-size 8, fp8 weights and KV): weights per rank, both KV groups, the deployment", () => {
    const r = hisparse([
      ...[
        "--config",
        join(repoRoot, "configs", "glm-5"),
        "--tensor-parallel-size",
        "8",
        "--gpu-mem-gib",
        "140.4",
      ],
      ...["--weights-dtype", "fp8", "--kv-cache-dtype", "fp8", "--block-size", "64", "--context", "131072"],
    ]);
    assert.equal(r.status, 0, r.stderr);
    for (const line of [
      "  − weights per rank = ceil((routed experts 724,775,731,200 + TP-sharded 17,027,825,664) / 8) + replicated 2,107,661,568 = 94,833,106,176 parameters × 1 B = 88.32 GiB",
      "  = KV cache budget 36.04 GiB (38,697,427,057 B)",
      "  KV per token   = MLA latent (512 + 64) × 1 B = 576 B/layer × 78 layers + indexer keys 128 × 1 B = 128 B/layer × 78 layers = 54,912 B",
      "  max requests   = floor(11,011 / 2,048) = 5   (without paging: floor(budget / (131,072 × 54,912 B)) = 5)",
      "  GPU per page   = indexer keys 78 layers × 64 × 128 × 1 B = 624.00 KiB",
      // A prefill streams (at most 131 blocks: window, two 2,048-token chunks, hot buffer), so the
      // engine reaches the decode-only figure: 25 by the host pool, 30 by the GPU pool.
      "  prefill        = streams: at most 131 GPU blocks while a request prefills (window, two chunks of 2,048 tokens, hot buffer), its completed pages spilled to the host; 66 when it decodes",
      "    by GPU pool    = floor((2,080 − 131 of one streaming prefill) / 66) + 1 = 30",
      "    max requests   = 25 (5.0× dense)",
      "  decode-only   = floor(38,697,427,057 B / (2,048 × 638,976 B + 66 × 2,875,392 B)) = 25 (5.0× dense)",
    ])
      assert.ok(r.stdout.includes(`${line}\n`), `missing: ${line}\n${r.stdout}`);
    assert.match(
      r.stdout,
      /Deployment \(8 GPUs, one tensor-parallel group\): .* so 8 GPUs run 5 requests dense, 25 with HiSparse \(default host pool\), 25 with the best host pool/,
    );
    assert.match(
      r.stdout,
      /HiSparse for DSA \(selector dsa: the indexer's top 2048 rows per layer; hot buffer 4096 rows, window 64, dense layers \[\]\)/,
    );
    assert.doesNotMatch(r.stdout, /runs on the CPU backend today/, "DSA HiSparse runs on CUDA too");
    assert.match(
      r.stdout,
      /Note: the engine refuses this split today: --tensor-parallel-size 8: tensor parallelism of multi-head latent attention .*; the figures above are the memory arithmetic only\./,
    );
    // bf16 weights do not fit: 186 GB a rank.
    const bf16 = hisparse([
      ...[
        "--config",
        join(repoRoot, "configs", "glm-5"),
        "--tensor-parallel-size",
        "8",
        "--gpu-mem-gib",
        "140.4",
      ],
      ...["--context", "131072"],
    ]);
    assert.notEqual(bf16.status, 0);
    assert.match(bf16.stderr, /minus weights 176\.64 GiB and reserve 2\.00 GiB, leaves -52\.28 GiB/);
  });

  it("--config FILE reads the same model as --model DIR; --json gives the numbers", () => {
    const a = hisparse(["--model", "llama-3.1-8b", "--kv-cache-gib", "40", "--context", "32768", "--json"]);
    const b = hisparse([
      "--config",
      join(repoRoot, "configs", "llama-3.1-8b", "config.json"),
      "--kv-cache-gib",
      "40",
      "--context",
      "32768",
      "--json",
    ]);
    assert.equal(a.status, 0, a.stderr);
    const ja = JSON.parse(a.stdout);
    const jb = JSON.parse(b.stdout);
    assert.deepEqual(ja.dense, jb.dense);
    assert.deepEqual(ja.hisparse, jb.hisparse);
    // 40 GiB / 2 MiB = 20,480 blocks; 32K tokens = 2,048 blocks: 10 requests.
    assert.equal(ja.dense.numGpuBlocks, 20480);
    assert.equal(ja.dense.maxConcurrent, 10);
  });

  it("refuses the knobs serve would refuse, those that change no figure included", () => {
    const r = hisparse([
      "--model",
      "llama-3.1-8b",
      "--kv-cache-gib",
      "40",
      "--context",
      "32768",
      "--hisparse-config",
      '{"residency":"bogus","min_sparse_tokens":1.5,"selector":"nope"}',
    ]);
    assert.equal(r.status, 1);
    assert.match(r.stderr, /residency must be one of host, hybrid, got bogus/);
    assert.match(r.stderr, /min_sparse_tokens must be an integer >= 0, got 1.5/);
    assert.match(r.stderr, /selector must be one of quest, got nope/);
    const ok = hisparse([
      "--model",
      "llama-3.1-8b",
      "--kv-cache-gib",
      "40",
      "--context",
      "32768",
      "--hisparse-config",
      '{"residency":"hybrid"}',
    ]);
    assert.equal(ok.status, 0, ok.stderr);
  });

  it("--help lists every --hisparse-config key the engine's parser accepts", () => {
    const r = hisparse(["--help"]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stdout.replace(/\s+/g, " "),
      /HiSparse knobs as JSON: topk, device_buffer_tokens, sink_tokens, window_tokens, digest_tokens, digest_dtype, dense_layers, min_sparse_tokens, selector, residency, host_kv_cache_dtype \(as serve; selector, min_sparse_tokens and residency change no figure\)/,
    );
  });

  it("bad arguments give one line", () => {
    for (const [args, re] of [
      [
        ["--context", "100"],
        /^hisparse: give the GPU's memory \(--gpu-mem-gib G\) or the KV cache budget \(--kv-cache-gib G\)$/,
      ],
      [["--gpu-mem-gib", "80"], /^hisparse: required option '--context <n>' not specified$/],
      [
        ["--context", "100", "--gpu-mem-gib", "8", "--model", "qwen3-8b"],
        /^hisparse: no GPU memory is left for the KV cache: 8\.00 GiB × 0\.9 utilization = 7\.20 GiB, minus weights 15\.26 GiB and reserve 2\.00 GiB, leaves -10\.06 GiB; raise --gpu-mem-gib or --gpu-memory-utilization, or lower --reserve-gib$/,
      ],
      [
        // bf16 weights leave nothing on 16 GiB, FP8 ones would: the sentence says so
        ["--context", "100", "--gpu-mem-gib", "16", "--model", "qwen3-8b"],
        /^hisparse: no GPU memory is left for the KV cache: .* leaves -2\.86 GiB; raise --gpu-mem-gib or --gpu-memory-utilization, or lower --reserve-gib, or plan an FP8 checkpoint with --weights-dtype fp8 \(weights 7\.63 GiB, leaves 4\.77 GiB\)$/,
      ],
      [
        // The new-user trial's case: ref-small's weights fit, the default 2 GiB reserve does not.
        ["--model", "ref-small", "--gpu-mem-gib", "1", "--context", "8192"],
        /^hisparse: no GPU memory is left for the KV cache: 1\.00 GiB × 0\.9 utilization = 0\.90 GiB, minus weights 0\.01 GiB and reserve 2\.00 GiB, leaves -1\.11 GiB; raise --gpu-mem-gib or --gpu-memory-utilization, or lower --reserve-gib$/,
      ],
      [
        ["--context", "100", "--kv-cache-gib", "1", "--hisparse-config", "{bad"],
        /^hisparse: --hisparse-config is not valid JSON/,
      ],
      [
        ["--context", "100", "--kv-cache-gib", "1", "--model", "/nowhere"],
        /^hisparse: model path \/nowhere does not exist$/,
      ],
      [
        // What the engine would refuse, by its own rules, every reason at once.
        [
          "--model",
          "llama-3.1-8b",
          "--kv-cache-gib",
          "40",
          "--context",
          "200000",
          "--hybrid-sparse-topk",
          "64",
          "--hisparse-config",
          '{"sink_tokens":64}',
        ],
        // The derived window (one page at topk 64) leaves no room for the given 64 sinks.
        /^hisparse: the engine would refuse these settings: --context \(200000\) exceeds the model's max_position_embeddings \(131072\); sink_tokens \+ window_tokens \(64 \+ 16 = 80\) must be <= topk \(64\); set sink_tokens \/ window_tokens in --hisparse-config$/,
      ],
    ] as const) {
      const r = hisparse([...args]);
      assert.notEqual(r.status, 0);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
      assert.match(r.stderr.trim(), re);
    }
  });
});
