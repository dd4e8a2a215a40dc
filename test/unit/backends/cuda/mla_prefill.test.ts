/**
 * The expanded-form MLA prefill of the CUDA backend (src/backends/cuda/mla_prefill.ts) on the
 * host-memory double of the addon, with host implementations of its GEMM, gather and softmax
 * (fake_mla_prefill.ts): the run plan (expanded requests alone, short ones grouped, padding),
 * the tiling within the scratch bound, and numerically the expanded rows against the CPU oracle
 * (src/backends/cpu/kernels/mla.ts) through several head groups and query tiles, dense and DSA,
 * with a short request in the middle whose absorbed launch gets the step's tables offset by it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MlaDims } from "../../../../src/backends/backend.js";
import { mlaAttentionKernel } from "../../../../src/backends/cpu/kernels/mla.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits, roundBf16 } from "../../../../src/backends/cuda/half.js";
import type { CudaMlaOps } from "../../../../src/backends/cuda/mla_ops.js";
import { planRuns, prefillTiles } from "../../../../src/backends/cuda/mla_prefill.js";
import type { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { createFakeAddon } from "./fake_addon.js";
import { installMlaPrefillFakes } from "./fake_mla_prefill.js";

const DIMS: MlaDims = {
  numHeads: 3,
  qkNopeHeadDim: 8,
  qkRopeHeadDim: 4,
  vHeadDim: 6,
  kvLoraRank: 16,
  softmaxScale: 0.3,
};
const BS = 4;

/** Deterministic values in [-1, 1), rounded to bf16. */
function values(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return roundBf16(s / 2 ** 31 - 1);
  });
}

describe("CUDA MLA expanded prefill (fake addon)", () => {
  it("planRuns: expanded requests alone, short ones grouped, padding last", () => {
    const qsl = Int32Array.from([0, 1, 2, 70, 71, 171]);
    assert.deepEqual(
      planRuns(qsl, 5, 180, 64).map((r) => [r.expanded, r.r0, r.r1, r.t0, r.t1]),
      [
        [false, 0, 2, 0, 2],
        [true, 2, 3, 2, 70],
        [false, 3, 4, 70, 71],
        [true, 4, 5, 71, 171],
        [false, 5, 5, 171, 180],
      ],
    );
    assert.deepEqual(planRuns(qsl, 5, 171, Number.POSITIVE_INFINITY).length, 1);
  });

  it("prefillTiles: GLM-5 at 32K within 512 MiB, the fewest tiles, never past the bound when it fits", () => {
    const glm: MlaDims = {
      ...DIMS,
      numHeads: 64,
      qkNopeHeadDim: 192,
      qkRopeHeadDim: 64,
      vHeadDim: 256,
      kvLoraRank: 512,
    };
    const t = prefillTiles(glm, 32768, 8192, 512 * 2 ** 20);
    assert.ok(t.totalBytes <= 512 * 2 ** 20, `${t.totalBytes}`);
    assert.ok(t.queryTile % 16 === 0 && t.queryTile >= 512, `${t.queryTile}`);
    const small = prefillTiles(DIMS, 16, 9, 3000);
    assert.deepEqual([small.headGroup, small.queryTile], [1, 2]);
    assert.equal(prefillTiles(DIMS, 6, 6, 1 << 20).headGroup, 3);
  });

  for (const dsa of [false, true])
    it(`expanded rows equal the CPU oracle (${dsa ? "DSA top-5" : "dense"}; head groups, query tiles, a decode between)`, () => {
      const fake = createFakeAddon();
      const be = new CudaBackend({ addon: fake, workspaceBytes: 8 << 20, stagingBytes: 1 << 20 });
      installMlaPrefillFakes(fake, be.blas);
      const mla = be.mla as CudaMlaOps;
      mla.prefill.minQueryLen = 4;
      mla.prefill.scratchBytes = 3000;
      const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = DIMS;
      // (numComputed, numNew): a first chunk, a decode, a later chunk of a longer prompt.
      const reqs = [
        [0, 6],
        [5, 1],
        [7, 9],
      ] as const;
      const maxBlocks = 5;
      const numBlocks = reqs.length * maxBlocks + 1;
      const tables = Int32Array.from({ length: reqs.length * maxBlocks }, (_, i) => (i * 7 + 3) % numBlocks);
      const qsl = Int32Array.from([0, 6, 7, 16]);
      const seqLens = Int32Array.from(reqs.map(([a, b]) => a + b));
      const positions = Int32Array.from(reqs.flatMap(([a, b]) => Array.from({ length: b }, (_, k) => a + k)));
      const T = 16;
      const meta = stageAttentionMetadata(be, {
        queryStartLoc: qsl,
        seqLens,
        blockTables: tables,
        maxBlocksPerReq: maxBlocks,
        slotMapping: new Int32Array(T),
        positions,
        maxQueryLen: 9,
        maxSeqLen: 16,
      });
      const cacheVals = values(numBlocks * BS * (C + R), 1);
      const cache = be.mla.allocatePagedRows(numBlocks, BS, C + R, "bf16") as CudaTensor;
      const bytes = fake.memory.view(cache.ptr, cacheVals.length * 2);
      const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
      for (const [i, v] of cacheVals.entries()) dv.setUint16(2 * i, f32ToBf16Bits(v), true);
      const qv = values(T * Hq * (N + R), 2);
      const kvB = values(Hq * (N + Vd) * C, 3).map((v) => roundBf16(v / 4));
      const K = 5;
      const sel = new Int32Array(T * K).fill(-1);
      positions.forEach((p, t) => {
        for (let e = 0; e < Math.min(K - 1, p + 1); e++) sel[t * K + e] = (p * 5 + e * 3) % (p + 1);
        const row = [...new Set(sel.subarray(t * K, t * K + K - 1))]
          .filter((i) => i >= 0)
          .sort((a, b) => a - b);
        sel.fill(-1, t * K, t * K + K);
        sel.set(row, t * K);
      });
      const topk = dsa ? be.stage(sel, [T, K], "i32") : null;
      const w = be.uploadWeight({ data: kvB, dtype: "f32", shape: [Hq * (N + Vd), C] });
      fake.calls.length = 0;
      const out = be.toHost(
        mla.attention(be.stage(qv, [T, Hq * (N + R)], "bf16"), cache, w, meta, DIMS, BS, topk),
      );
      const ref = new Float32Array(T * Hq * Vd);
      const rows = {
        queryStartLoc: qsl,
        seqLens,
        blockTables: tables,
        maxBlocksPerReq: maxBlocks,
        numReqs: 3,
        blockSize: BS,
      };
      const d = { Hq, N, R, Vd, C, scale: DIMS.softmaxScale };
      mlaAttentionKernel(qv, cacheVals, kvB, ref, rows, d, dsa ? sel : null, K);
      let maxRef = 0;
      for (const v of ref) maxRef = Math.max(maxRef, Math.abs(v));
      for (const t of [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15])
        for (let e = 0; e < Hq * Vd; e++) {
          const [a, b] = [out[t * Hq * Vd + e]!, ref[t * Hq * Vd + e]!];
          assert.ok(Math.abs(a - b) <= 2e-2 * maxRef, `token ${t} elem ${e}: ${a} vs ${b}`);
        }
      const fns = fake.calls.map((c) => c.fn);
      // Request 0: one group of 3 heads, two tiles of 3 queries; then the decode, absorbed; request
      // 2: three groups of one head, five tiles of (at most) 2 queries.
      assert.deepEqual(fns.slice(0, 6), [
        "mlaGatherLatent",
        "gemmStridedBatched",
        "gemmStridedBatched",
        "gemmStridedBatched",
        "mlaPrefillSoftmax",
        "gemmStridedBatched",
      ]);
      assert.deepEqual(fns.slice(9, 12), ["mlaAbsorbQuery", "mlaAttention", "mlaOutProject"]);
      assert.equal(fns.filter((f) => f === "mlaPrefillSoftmax").length, 2 + 3 * 5);
      const attn = fake.calls[10]!.params as Record<string, number>;
      const qslPtr = (meta.queryStartLoc as CudaTensor).ptr;
      assert.deepEqual(
        [attn.numReqs, attn.numTokens, attn.queryStartLoc! - qslPtr, attn.topkIndices],
        [1, 1, 4, dsa ? (topk as CudaTensor).ptr + 6 * K * 4 : 0],
      );
    });
});
