/**
 * `hisparse plan` arithmetic for Llama-3.1-8B (configs/llama-3.1-8b: 32 layers, 8 KV heads,
 * head_dim 128) at 128K tokens, every figure worked out by hand in the comments.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { countParameters } from "../../../src/config/parameter_count.js";
import { denseLines } from "../../../src/plan/format.js";
import { planHiSparseKnobs } from "../../../src/plan/hisparse_knobs.js";
import {
  kvBudgetFromGpu,
  maxByDevicePool,
  noKvBudgetError,
  PlanError,
  type PlanInput,
  planDense,
  planHiSparse,
} from "../../../src/plan/plan.js";
import { repoRoot } from "../../helpers/reference.js";

const llama = loadModelConfig(join(repoRoot, "configs", "llama-3.1-8b"));
const GIB = 2 ** 30;

/** H200 141 GiB × 0.9 − 8,030,261,248 params × 2 B − 2 GiB reserve = 118,049,831,321 B. */
const BUDGET = 118_049_831_321;

function input(over: Partial<PlanInput> = {}): PlanInput {
  return {
    model: llama,
    kvBudgetBytes: BUDGET,
    contextTokens: 131072,
    blockSize: 16,
    kvElementBytes: 2,
    hisparse: planHiSparseKnobs({}),
    ...over,
  };
}

describe("plan arithmetic", () => {
  it("KV budget = GPU × utilization − weights − reserve", () => {
    assert.equal(countParameters(llama), 8_030_261_248);
    const b = kvBudgetFromGpu({
      gpuMemBytes: 141 * GIB,
      gpuMemoryUtilization: 0.9,
      weightBytes: 2 * 8_030_261_248,
      reserveBytes: 2 * GIB,
    });
    assert.equal(b, BUDGET);
  });

  it("a GPU too small for the weights and reserve: the error shows each term in GiB and the flags to change", () => {
    // 8 GiB × 0.9 = 7.20 GiB; weights 2 × 8,030,261,248 B = 14.9575 GiB; 7.2 − 14.9575 − 2 = −9.7575 GiB.
    const gpu = {
      gpuMemBytes: 8 * GIB,
      gpuMemoryUtilization: 0.9,
      weightBytes: 2 * 8_030_261_248,
      reserveBytes: 2 * GIB,
    };
    assert.ok(kvBudgetFromGpu(gpu) < 0);
    const e = noKvBudgetError(gpu);
    assert.ok(e instanceof PlanError);
    assert.equal(
      e.message,
      "no GPU memory is left for the KV cache: 8.00 GiB × 0.9 utilization = 7.20 GiB, minus weights 14.96 GiB " +
        "and reserve 2.00 GiB, leaves -9.76 GiB; raise --gpu-mem-gib or --gpu-memory-utilization, or lower --reserve-gib",
    );
    // FP8 weights (1 B each) would not fit 8 GiB either: no suggestion
    assert.doesNotMatch(noKvBudgetError(gpu, 8_030_261_248).message, /fp8/);
    // on 16 GiB they leave 4.92 GiB: the sentence suggests --weights-dtype fp8 with its figures
    assert.match(
      noKvBudgetError({ ...gpu, gpuMemBytes: 16 * GIB }, 8_030_261_248).message,
      /leaves -2\.56 GiB; .*, or plan an FP8 checkpoint with --weights-dtype fp8 \(weights 7\.48 GiB, leaves 4\.92 GiB\)$/,
    );
  });

  it("dense: 128 KiB per token, 8192 blocks per request, 6 requests", () => {
    const d = planDense(input());
    assert.equal(d.kvBytesPerToken, 2 * 32 * 8 * 128 * 2); // 131,072 B
    assert.equal(d.kvBytesPerBlock, 16 * 131072); // 2 MiB
    assert.equal(d.numGpuBlocks, Math.floor(BUDGET / 2097152)); // 56,290
    assert.equal(d.numGpuBlocks, 56290);
    assert.equal(d.pagesPerRequest, 8192);
    assert.equal(d.maxConcurrent, 6); // floor(56,290 / 8,192)
    assert.equal(d.maxConcurrentUnpaged, 6);
    assert.match(denseLines(input(), d).at(-1)!, /max requests {3}= floor\(56,290 \/ 8,192\) = 6/);
  });

  it("HiSparse per-page and per-request costs (topk 2048, buffer 4096, sink 64, window 256, dense [0, 1])", () => {
    const h = planHiSparse(input());
    assert.equal(h.numSparseLayers, 30);
    // One layer's page: 2 × 16 × 8 × 128 × 2 B = 65,536 B.
    assert.equal(h.mainBytesPerBlock, 30 * 65536);
    assert.equal(h.hostBytesPerBlock, 30 * 65536);
    // Digests: 30 layers × (min, max) × 8 heads × 128 × 4 B (f32) = 245,760 B.
    assert.equal(h.digestBytesPerPage, 245760);
    assert.equal(h.deviceBytesPerHostBlock, 2 * 65536 + 245760); // 376,832 B
    // ceil((64 + 256 + 4096) / 16) + 1 = 276 + 1.
    assert.equal(h.devicePagesPerRequest, 277);
    assert.equal(h.deviceBytesPerRequest, 277 * 1966080 + 8192 * 376832);
  });

  it("HiSparse with the default host pool (2 × GPU pages) is limited by the host pool", () => {
    const g = planHiSparse(input()).given;
    // GPU blocks = floor(B / (1,966,080 + 2 × 376,832)) = 43,404; host = 86,808 pages.
    assert.equal(g.numGpuBlocks, 43404);
    assert.equal(g.numHostBlocks, 86808);
    assert.equal(g.maxByHost, 10); // floor(86,808 / 8,192)
    // One request prefills on all 8,192 pages, the others hold 277 blocks each:
    // floor((43,404 − 8,192) / 277) + 1 = floor(35,212 / 277) + 1 = 127 + 1.
    assert.equal(g.maxByDevice, 128);
    assert.equal(g.maxConcurrent, 10);
    assert.deepEqual(g.refusals, []);
  });

  it("the best host pool holds exactly N requests' pages, one dense prefill included: 28 requests (4.7× dense)", () => {
    const h = planHiSparse(input());
    const b = h.best;
    // N = floor((B − (8,192 − 277) × 1,966,080) / (8,192 × 376,832 + 277 × 1,966,080))
    //   = floor(102,488,308,121 / 3,631,611,904) = floor(28.22) = 28 (without the prefill: 32).
    assert.equal(h.bestN, 28);
    // Host pages max(28 × 8,192, ceil(B / (1,966,080 + 376,832)) = 50,386) = 229,376.
    assert.equal(b.numHostBlocks, 229376);
    assert.equal(b.hostPoolBytes, 229376 * 1966080); // 420 GiB
    // GPU blocks floor((B − 229,376 × 376,832) / 1,966,080) = floor(31,613,614,489 / 1,966,080) = 16,079.
    assert.equal(b.numGpuBlocks, 16079);
    assert.equal(b.maxByHost, 28);
    assert.equal(b.maxByDevice, 29); // floor((16,079 − 8,192) / 277) + 1 = 28 + 1
    assert.equal(b.maxConcurrent, 28);
  });

  it("the device pool must hold one request's dense prefill; when every page stays on the GPU it is the dense count", () => {
    // Llama-3.1-8B shape, no dense layers, bf16 digests (the CUDA engine), 32 GiB, host 400 GiB:
    // m = 32 × 65,536 = 2 MiB, h = digests 32 × 2 × 8 × 128 × 2 B = 128 KiB; 204,800 host pages
    // take 25 GiB of digests, leaving floor(7 GiB / 2 MiB) = 3,584 blocks < 8,192 pages.
    const over: Partial<PlanInput> = {
      kvBudgetBytes: 32 * GIB,
      digestElementBytes: 2,
      hisparse: {
        ...planHiSparseKnobs({ json: '{"dense_layers": [], "device_buffer_tokens": 4096}' }),
        hostPoolBytes: 400 * GIB,
      },
    };
    const h = planHiSparse(input(over));
    assert.deepEqual([h.given.numGpuBlocks, h.given.maxByHost, h.given.maxByDevice], [3584, 25, 0]);
    assert.equal(h.given.maxConcurrent, 0);
    assert.deepEqual(h.given.refusals, [
      "the device pool (3,584 blocks) cannot hold one request's 8,192 pages for its dense prefill",
    ]);
    // Best: N = floor((32 GiB − 7,915 × 2 MiB) / (8,192 × 128 KiB + 277 × 2 MiB))
    //         = floor(17,760,780,288 / 1,654,652,928) = 10; 81,920 host pages (160 GiB),
    // GPU floor((32 − 10) GiB / 2 MiB) = 11,264 blocks: floor((11,264 − 8,192) / 277) + 1 = 12.
    assert.deepEqual(
      [h.bestN, h.best.numHostBlocks, h.best.numGpuBlocks, h.best.maxByDevice, h.best.maxConcurrent],
      [10, 81920, 11264, 12, 10],
    );
    // Hot buffer ≥ the context: d = min(P, ...) = P = 256 pages (4K tokens), so the count is
    // floor(G / P) as for dense: 3,584 blocks / 256 = 14 = floor((3,584 − 256) / 256) + 1.
    const short = planHiSparse(input({ ...over, contextTokens: 4096 }));
    assert.equal(short.devicePagesPerRequest, short.pagesPerRequest);
    assert.equal(short.given.maxByDevice, 14);
    // A hot buffer of 65,536 tokens: the engine does not start below ceil((64 + 256 + 65,536) / 16) + 1 = 4,117 blocks.
    const huge = planHiSparse(
      input({ ...over, hisparse: { ...over.hisparse!, deviceBufferTokens: 65536 } }),
    ).given;
    assert.deepEqual(huge.refusals, [
      "the device pool (3,584 blocks) cannot hold one sparse request's minimum of 4,117 blocks (sinks, window, hot buffer and a new page)",
    ]);
    assert.equal(maxByDevicePool(3584, 256, 256), Math.floor(3584 / 256));
    assert.equal(maxByDevicePool(8191, 8192, 277), 0);
    assert.equal(maxByDevicePool(8192, 8192, 277), 1);
  });

  it("a host pool too large for the device is what the engine refuses", () => {
    const g = planHiSparse(input({ hisparse: planHiSparseKnobs({ hostPoolBytes: 1024 * GIB }) })).given;
    assert.equal(g.numGpuBlocks, 0);
    assert.equal(g.maxConcurrent, 0);
    assert.match(g.refusals[0]!, /no device memory is left for the KV pool/);
  });

  it("host_kv_cache_dtype fp8: a host page costs half of bf16's, so a 100 GiB host pool holds twice the pages", () => {
    const knobs = (json?: string) => planHiSparseKnobs({ json, hostPoolBytes: 100 * GIB });
    assert.equal(knobs('{"host_kv_cache_dtype":"fp8"}').hostKvCacheDtype, "fp8");
    assert.equal(knobs().hostKvCacheDtype, undefined, "auto is the default and not listed");
    const bf16 = planHiSparse(input({ hisparse: knobs() }));
    const fp8 = planHiSparse(input({ hisparse: knobs('{"host_kv_cache_dtype":"fp8"}') }));
    // Llama-3.1-8B: 30 sparse layers x 2 x 16 x 8 x 128 elements = 1,966,080 B bf16, 983,040 B fp8.
    assert.deepEqual([bf16.hostBytesPerBlock, fp8.hostBytesPerBlock], [1_966_080, 983_040]);
    assert.equal(fp8.mainBytesPerBlock, bf16.mainBytesPerBlock, "the device pool stays bf16");
    assert.deepEqual(
      [bf16.given.numHostBlocks, fp8.given.numHostBlocks],
      [Math.floor((100 * GIB) / 1_966_080), Math.floor((100 * GIB) / 983_040)],
    );
  });

  it("knobs: JSON keys, the topk flag, defaults; bad JSON is refused", () => {
    assert.deepEqual(planHiSparseKnobs({ topk: 256 }), {
      topk: 256,
      deviceBufferTokens: 512,
      sinkTokens: 16,
      windowTokens: 32,
      digestTokens: 16,
      denseLayers: [0, 1],
      hostPoolBytes: null,
    });
    const k = planHiSparseKnobs({
      json: '{"topk": 512, "device_buffer_tokens": 2048, "dense_layers": [0], "selector": "quest"}',
    });
    assert.equal(k.deviceBufferTokens, 2048);
    assert.deepEqual(k.denseLayers, [0]);
    assert.throws(() => planHiSparseKnobs({ json: '{"top_k": 1}' }), /unknown key "top_k"/);
    assert.throws(() => planHiSparseKnobs({ json: '{"topk": 1}', topk: 2 }), /disagree/);
    assert.throws(
      () => planHiSparse(input({ hisparse: { ...planHiSparseKnobs({}), denseLayers: [40] } })),
      /dense_layers must be distinct layers in \[0, 31\]/,
    );
  });
});
