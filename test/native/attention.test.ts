/**
 * Integration of the attention and sampling kernels (native/kernels/attention.h, sampling.h)
 * through CudaBackend: argument order, metadata shapes, workspace, graph capture of a decode step.
 * The kernels' own exhaustive tests are native/tests/*.cu. Skipped without a GPU or when the
 * addon was built without those kernels.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { AttentionMetadata, QkvLayout, Tensor } from "../../src/backends/backend.js";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { assertClose, BF16_TOL, gpuSkip, makeBackend, Rng, randBf16, randF32 } from "./helpers.js";
import { pagedAttentionRef, sampleRowRef } from "./reference.js";

function kernelSkip(what: "hasAttention" | "hasSampling"): string | false {
  const gpu = gpuSkip();
  if (gpu !== false) return gpu;
  return loadAddon().buildInfo[what]
    ? false
    : `the addon was built without ${what.slice(3).toLowerCase()} kernels`;
}

interface Batch {
  queryLens: number[];
  seqLens: number[];
}

describe("pagedAttention through CudaBackend", { skip: kernelSkip("hasAttention") }, () => {
  let be: CudaBackend;
  const rng = new Rng(5);
  before(() => {
    be = makeBackend();
  });
  after(() => be?.dispose());

  /** Builds metadata (random non-contiguous blocks), a random cache and qkv; returns them and the reference. */
  function setup(layout: QkvLayout, blockSize: number, batch: Batch, maxBlocksPerReq: number) {
    const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
    const W = (Hq + 2 * Hkv) * D;
    const numReqs = batch.seqLens.length;
    const needed = batch.seqLens.reduce((s, l) => s + Math.ceil(l / blockSize), 0);
    const numBlocks = needed + 5;
    const order = rng.permutation(numBlocks);
    const blockTables = new Int32Array(numReqs * maxBlocksPerReq);
    let next = 0;
    batch.seqLens.forEach((len, r) => {
      for (let b = 0; b < Math.ceil(len / blockSize); b++)
        blockTables[r * maxBlocksPerReq + b] = order[next++]!;
    });
    const queryStartLoc = new Int32Array(numReqs + 1);
    batch.queryLens.forEach((q, r) => {
      queryStartLoc[r + 1] = queryStartLoc[r]! + q;
    });
    const T = queryStartLoc[numReqs]!;
    const g = { numBlocks, blockSize, numKvHeads: Hkv, headDim: D };
    const cacheData = randBf16(rng, numBlocks * 2 * blockSize * Hkv * D);
    const qkvData = randBf16(rng, T * W);
    const cache = be.upload(cacheData, [numBlocks, 2, blockSize, Hkv, D], "bf16");
    const seqLens = Int32Array.from(batch.seqLens);
    const meta: AttentionMetadata = {
      numReqs,
      numTokens: T,
      queryStartLoc: be.upload(queryStartLoc, [numReqs + 1], "i32"),
      seqLens: be.upload(seqLens, [numReqs], "i32"),
      blockTables: be.upload(blockTables, [numReqs, maxBlocksPerReq], "i32"),
      slotMapping: be.upload(new Int32Array(T).fill(-1), [T], "i32"),
      maxQueryLen: Math.max(...batch.queryLens),
      maxSeqLen: Math.max(...batch.seqLens),
      host: {
        queryStartLoc,
        seqLens,
        blockTables,
        maxBlocksPerReq,
        slotMapping: new Int32Array(T),
        positions: new Int32Array(T),
      },
    };
    const ref = pagedAttentionRef(
      qkvData,
      cacheData,
      layout,
      g,
      queryStartLoc,
      seqLens,
      blockTables,
      maxBlocksPerReq,
    );
    const free = () => {
      for (const t of [cache, meta.queryStartLoc, meta.seqLens, meta.blockTables, meta.slotMapping])
        be.free(t);
    };
    return { T, W, qkvData, cache, meta, ref, free };
  }

  for (const [layout, blockSize] of [
    [{ numHeads: 8, numKvHeads: 2, headDim: 128 }, 16],
    [{ numHeads: 4, numKvHeads: 4, headDim: 64 }, 32],
    [{ numHeads: 4, numKvHeads: 2, headDim: 32 }, 16], // the tiny MoE test models
  ] as const) {
    const tag = `Hq=${layout.numHeads} Hkv=${layout.numKvHeads} D=${layout.headDim} block=${blockSize}`;

    it(`decode batch with a padded row (${tag})`, () => {
      const s = setup(layout, blockSize, { queryLens: [1, 1, 1, 1], seqLens: [1, 37, 300, 0] }, 32);
      be.resetWorkspace();
      be.fillUnusedWorkspace(0xff);
      const out = be.pagedAttention(
        be.stage(s.qkvData, [s.T, s.W], "bf16"),
        layout,
        s.cache,
        s.meta,
        blockSize,
      );
      assertClose(be.toHost(out) as Float32Array, s.ref, BF16_TOL, "decode");
      s.free();
    });

    it(`mixed prefill chunks and decodes (${tag})`, () => {
      const s = setup(layout, blockSize, { queryLens: [5, 1, 17], seqLens: [20, 33, 17] }, 8);
      be.resetWorkspace();
      be.fillUnusedWorkspace(0xff);
      const out = be.pagedAttention(
        be.stage(s.qkvData, [s.T, s.W], "bf16"),
        layout,
        s.cache,
        s.meta,
        blockSize,
      );
      assertClose(be.toHost(out) as Float32Array, s.ref, BF16_TOL, "prefill");
      s.free();
    });
  }

  it("a captured decode attention replays to the eager result", () => {
    const layout = { numHeads: 8, numKvHeads: 2, headDim: 128 };
    const s = setup(layout, 16, { queryLens: [1, 1], seqLens: [100, 260] }, 32);
    const qkv = be.upload(s.qkvData, [s.T, s.W], "bf16");
    be.resetWorkspace();
    const eager = be.toHost(be.pagedAttention(qkv, layout, s.cache, s.meta, 16));
    be.resetWorkspace();
    let out: Tensor | null = null;
    const g = be.graphs.capture(() => {
      out = be.pagedAttention(qkv, layout, s.cache, s.meta, 16);
    });
    be.resetWorkspace();
    be.graphs.replay(g);
    assert.deepEqual(be.toHost(out!), eager);
    be.graphs.dispose(g);
    be.free(qkv);
    s.free();
  });
});

describe("sampleOnDevice through CudaBackend", { skip: kernelSkip("hasSampling") }, () => {
  let be: CudaBackend;
  const rng = new Rng(11);
  before(() => {
    be = makeBackend();
  });
  after(() => be?.dispose());

  it("picks the ids of the reference rule (greedy, top-k, top-p, min-p, plain)", () => {
    const V = 32000;
    const settings = [
      { temperature: 0, topK: 0, topP: 1, minP: 0 },
      { temperature: 1, topK: 0, topP: 1, minP: 0 },
      { temperature: 0.7, topK: 50, topP: 1, minP: 0 },
      { temperature: 1.3, topK: 0, topP: 0.9, minP: 0 },
      { temperature: 1, topK: 0, topP: 1, minP: 0.05 },
      { temperature: 0.8, topK: 20, topP: 0.8, minP: 0.01 },
    ];
    const B = settings.length;
    const logits = randF32(rng, B * V, 3);
    const rows = {
      temperature: Float32Array.from(settings, (s) => s.temperature),
      topK: Int32Array.from(settings, (s) => s.topK),
      topP: Float32Array.from(settings, (s) => s.topP),
      minP: Float32Array.from(settings, (s) => s.minP),
      uniform: Float32Array.from(settings, () => rng.next()),
    };
    be.resetWorkspace();
    const ids = be.sampleOnDevice(be.stage(logits, [B, V], "f32"), rows);
    assert.ok(ids !== null);
    const expected = settings.map((s, b) =>
      sampleRowRef(
        logits.subarray(b * V, (b + 1) * V),
        s.temperature,
        s.topK,
        s.topP,
        s.minP,
        rows.uniform[b]!,
      ),
    );
    assert.deepEqual(Array.from(ids), expected);
  });
});
