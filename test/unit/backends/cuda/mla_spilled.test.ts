/**
 * SpilledRows on the CUDA backend's MLA attention (src/backends/cuda/mla_spilled.ts, mla_ops.ts,
 * mla_prefill.ts) on the host-memory double of the addon with the host gather / GEMM / softmax of
 * fake_mla_prefill.ts: planRuns' must-expand flags; a step of an unflagged short prefill, a
 * flagged decode and a flagged longer chunk whose spilled pages' rows live in a pinned host tier
 * (their device blocks -1, the stale device rows NaN) gives the bits of the same step with every
 * row on the device, and within bf16 of the CPU oracle; the gathers get the host source only for
 * flagged requests; no flag (or no `spilled`) changes no launch; the one-sentence errors.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MlaDims, SpilledRows, Tensor } from "../../../../src/backends/backend.js";
import { mlaAttentionKernel } from "../../../../src/backends/cpu/kernels/mla.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits, roundBf16 } from "../../../../src/backends/cuda/half.js";
import type { CudaMlaOps } from "../../../../src/backends/cuda/mla_ops.js";
import { planRuns } from "../../../../src/backends/cuda/mla_prefill.js";
import { CudaTensor } from "../../../../src/backends/cuda/tensor.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { createFakeAddon, type FakeAddon } from "./fake_addon.js";
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
const W = DIMS.kvLoraRank + DIMS.qkRopeHeadDim;

/** Deterministic values in [-1, 1), rounded to bf16. */
function values(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return roundBf16(s / 2 ** 31 - 1);
  });
}

/** Writes vals as bf16 at element `at` of the fake allocation at ptr. */
function writeBf16(fake: FakeAddon, ptr: number, at: number, vals: ArrayLike<number>): void {
  const bytes = fake.memory.view(ptr + 2 * at, 2 * vals.length);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  for (let i = 0; i < vals.length; i++) dv.setUint16(2 * i, f32ToBf16Bits(vals[i]!), true);
}

describe("planRuns: must-expand flags", () => {
  it("a flagged request runs alone expanded whatever its length; unflagged ones as before", () => {
    // Requests of 1, 1, 68, 1, 100 tokens; flags on request 1 (a decode) and 3.
    const qsl = Int32Array.from([0, 1, 2, 70, 71, 171]);
    const flags = Uint8Array.from([0, 1, 0, 1, 0]);
    const runs = (minQueryLen: number, f: Uint8Array | null) =>
      planRuns(qsl, 5, 180, minQueryLen, f).map((r) => [r.expanded, r.r0, r.r1, r.t0, r.t1]);
    assert.deepEqual(runs(64, flags), [
      [false, 0, 1, 0, 1],
      [true, 1, 2, 1, 2],
      [true, 2, 3, 2, 70],
      [true, 3, 4, 70, 71],
      [true, 4, 5, 71, 171],
      [false, 5, 5, 171, 180],
    ]);
    // The expanded form off (minQueryLen Infinity): only the flagged requests take it.
    assert.deepEqual(runs(Number.POSITIVE_INFINITY, flags), [
      [false, 0, 1, 0, 1],
      [true, 1, 2, 1, 2],
      [false, 2, 3, 2, 70],
      [true, 3, 4, 70, 71],
      [false, 4, 5, 71, 171],
      [false, 5, 5, 171, 180],
    ]);
    assert.deepEqual(runs(64, new Uint8Array(5)), runs(64, null));
  });
});

describe("CUDA MLA attention with SpilledRows (fake addon)", () => {
  // (numComputed, numNew): an unflagged first chunk (short: absorbed), a flagged decode, a
  // flagged later chunk (expanded at minQueryLen 8 anyway).
  const reqs = [
    [0, 6],
    [5, 1],
    [7, 9],
  ] as const;
  const flags = Uint8Array.from([0, 1, 1]);
  const maxBlocks = 5;
  const numBlocks = reqs.length * maxBlocks + 1;
  const T = 16;
  /** Spilled pages: request 1's page 0, request 2's pages 1 and 2, and their host blocks. */
  const spills = [
    { req: 1, page: 0, hostBlock: 3 },
    { req: 2, page: 1, hostBlock: 0 },
    { req: 2, page: 2, hostBlock: 2 },
  ];
  const numHostBlocks = 4;

  function setup() {
    const fake = createFakeAddon();
    const be = new CudaBackend({ addon: fake, workspaceBytes: 8 << 20, stagingBytes: 1 << 20 });
    installMlaPrefillFakes(fake, be.blas);
    const mla = be.mla as CudaMlaOps;
    mla.prefill.minQueryLen = 8;
    mla.prefill.scratchBytes = 3000;
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = DIMS;
    const tables = Int32Array.from({ length: reqs.length * maxBlocks }, (_, i) => (i * 7 + 3) % numBlocks);
    const spilledTables = tables.slice();
    const hostTables = new Int32Array(reqs.length * maxBlocks).fill(-1);
    for (const s of spills) {
      spilledTables[s.req * maxBlocks + s.page] = -1;
      hostTables[s.req * maxBlocks + s.page] = s.hostBlock;
    }
    const qsl = Int32Array.from([0, 6, 7, 16]);
    const seqLens = Int32Array.from(reqs.map(([a, b]) => a + b));
    const positions = Int32Array.from(reqs.flatMap(([a, b]) => Array.from({ length: b }, (_, k) => a + k)));
    const metaOf = (blockTables: Int32Array) =>
      stageAttentionMetadata(be, {
        queryStartLoc: qsl,
        seqLens,
        blockTables,
        maxBlocksPerReq: maxBlocks,
        slotMapping: new Int32Array(T),
        positions,
        maxQueryLen: 9,
        maxSeqLen: 16,
      });
    const cacheVals = values(numBlocks * BS * W, 1);
    const cache = be.mla.allocatePagedRows(numBlocks, BS, W, "bf16") as CudaTensor;
    writeBf16(fake, cache.ptr, 0, cacheVals);
    // The host tier: each spilled page's rows at its host block, the rest NaN.
    const pinned = be.allocatePinned(numHostBlocks * BS * W * 2);
    new Uint8Array(pinned.buffer).fill(0xff);
    const page = (blk: number) => cacheVals.subarray(blk * BS * W, (blk + 1) * BS * W);
    for (const s of spills)
      writeBf16(fake, pinned.ptr, s.hostBlock * BS * W, page(tables[s.req * maxBlocks + s.page]!));
    const hostRows = new CudaTensor([numHostBlocks, BS, W], "bf16", pinned.ptr, "persistent", -1);
    const qv = values(T * Hq * (N + R), 2);
    const kvB = values(Hq * (N + Vd) * C, 3).map((v) => roundBf16(v / 4));
    const w = be.uploadWeight({ data: kvB, dtype: "f32", shape: [Hq * (N + Vd), C] });
    const q = be.stage(qv, [T, Hq * (N + R)], "bf16");
    const spilled: SpilledRows = {
      hostRows,
      hostBlockTables: be.stage(hostTables, [reqs.length, maxBlocks], "i32"),
      requests: flags,
    };
    /** The stale device rows of the spilled pages become NaN (never read). */
    const poisonSpilledDeviceBlocks = () => {
      for (const s of spills)
        writeBf16(
          fake,
          cache.ptr,
          tables[s.req * maxBlocks + s.page]! * BS * W,
          new Float32Array(BS * W).fill(Number.NaN),
        );
    };
    const attend = (qt: Tensor, meta: ReturnType<typeof metaOf>, sp?: SpilledRows | null) =>
      be.mla.attention(qt, cache, w, meta, DIMS, BS, null, sp);
    const oracle = () => {
      const ref = new Float32Array(T * Hq * Vd);
      const rows = {
        queryStartLoc: qsl,
        seqLens,
        blockTables: tables,
        maxBlocksPerReq: maxBlocks,
        numReqs: 3,
        blockSize: BS,
      };
      mlaAttentionKernel(
        qv,
        cacheVals,
        kvB,
        ref,
        rows,
        { Hq, N, R, Vd, C, scale: DIMS.softmaxScale },
        null,
        0,
      );
      return ref;
    };
    return {
      fake,
      be,
      q,
      qv,
      spilled,
      hostRows,
      tables,
      spilledTables,
      metaOf,
      attend,
      poisonSpilledDeviceBlocks,
      oracle,
      hostTables,
    };
  }

  it("spilled pages read from the host tier give the all-resident bits; only flagged requests get the host source", () => {
    const {
      fake,
      be,
      q,
      spilled,
      hostRows,
      tables,
      spilledTables,
      metaOf,
      attend,
      poisonSpilledDeviceBlocks,
      oracle,
    } = setup();
    const row = DIMS.numHeads * DIMS.vHeadDim;
    // The fake has no absorbed kernel: only the expanded rows (requests 1 and 2, tokens 6..15) hold values.
    const flagged = (x: ArrayLike<number>) => Float32Array.from(x).subarray(6 * row);
    const resident = flagged(be.toHost(attend(q, metaOf(tables), spilled)));
    poisonSpilledDeviceBlocks();
    fake.calls.length = 0;
    const out = flagged(be.toHost(attend(q, metaOf(spilledTables), spilled)));
    for (let i = 0; i < resident.length; i++)
      assert.ok(Object.is(out[i], resident[i]), `element ${i}: ${out[i]} vs ${resident[i]}`);
    const ref = flagged(oracle());
    let maxRef = 0;
    for (const v of ref) maxRef = Math.max(maxRef, Math.abs(v));
    for (let i = 0; i < ref.length; i++)
      assert.ok(Math.abs(out[i]! - ref[i]!) <= 2e-2 * maxRef, `element ${i}: ${out[i]} vs ${ref[i]}`);
    // Request 0 absorbed (a run of one request), then requests 1 and 2 expanded with the host
    // source: args [req, numRows, kvLd, kvOffset, kvStride, kvCount, hostCache, hostTables, width].
    const gathers = fake.calls
      .filter((c) => c.fn === "mlaGatherLatent")
      .map((c) => [c.args[0], c.args[1], ...c.args.slice(6)]);
    const hostTables = (spilled.hostBlockTables as CudaTensor).ptr;
    assert.deepEqual(gathers, [
      [1, 6, hostRows.ptr, hostTables, maxBlocks],
      [2, 16, hostRows.ptr, hostTables, maxBlocks],
    ]);
    const attn = fake.calls.filter((c) => c.fn === "mlaAttention");
    assert.deepEqual(
      attn.map((c) => [c.params!.numReqs, c.params!.numTokens]),
      [[1, 6]],
    );
  });

  it("without a flagged request (or without spilled) every launch is as before", () => {
    const { fake, be, qv, spilled, tables, hostTables, metaOf, attend } = setup();
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd } = DIMS;
    /** Each call from a reset workspace, its inputs staged in the same order: the same addresses. */
    const launches = (variant: "none" | "null" | "zeros") => {
      be.resetWorkspace();
      const q = be.stage(qv, [T, Hq * (N + R)], "bf16");
      const hostBlockTables = be.stage(hostTables, [reqs.length, maxBlocks], "i32");
      const meta = metaOf(tables);
      const sp =
        variant === "none"
          ? undefined
          : variant === "null"
            ? null
            : { ...spilled, hostBlockTables, requests: new Uint8Array(3) };
      fake.calls.length = 0;
      const out = be.toHost(attend(q, meta, sp)).subarray(7 * Hq * Vd); // request 2: expanded
      return { out, calls: structuredClone(fake.calls) };
    };
    const plain = launches("none");
    assert.deepEqual(
      plain.calls.filter((c) => c.fn === "mlaGatherLatent").map((c) => c.args.slice(6)),
      [[0, 0, 0]],
    );
    for (const variant of ["null", "zeros"] as const) {
      const other = launches(variant);
      assert.deepEqual(other.calls, plain.calls, variant);
      assert.deepEqual(other.out, plain.out, variant);
    }
  });

  it("errors: flag count, q dtype, graph capture, hostRows and hostBlockTables shapes", () => {
    const { be, qv, q, spilled, hostRows, tables, metaOf, attend } = setup();
    const meta = metaOf(tables);
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R } = DIMS;
    assert.throws(
      () => attend(q, meta, { ...spilled, requests: new Uint8Array(2) }),
      /requests has 2 flags for a step of 3/,
    );
    const q32 = be.stage(qv, [T, Hq * (N + R)], "f32");
    assert.throws(() => attend(q32, meta, spilled), /bf16 expanded form only/);
    assert.doesNotThrow(() => attend(q32, meta, { ...spilled, requests: new Uint8Array(3) }));
    assert.throws(
      () => be.graphs.capture(() => void attend(q, meta, spilled)),
      /inside a CUDA graph capture/,
    );
    const narrow = new CudaTensor([4, BS, W - 1], "bf16", hostRows.ptr, "persistent", -1);
    assert.throws(
      () => attend(q, meta, { ...spilled, hostRows: narrow }),
      /hostRows: expected shape \[\*, 4, 20\]/,
    );
    const f32Rows = new CudaTensor([2, BS, W], "f32", hostRows.ptr, "persistent", -1);
    assert.throws(() => attend(q, meta, { ...spilled, hostRows: f32Rows }), /hostRows: expected dtype bf16/);
    const badTables = be.stage(new Float32Array(3 * maxBlocks), [3, maxBlocks], "f32");
    assert.throws(
      () => attend(q, meta, { ...spilled, hostBlockTables: badTables }),
      /hostBlockTables: expected dtype i32/,
    );
    const shortTables = be.stage(new Int32Array(2 * maxBlocks), [2, maxBlocks], "i32");
    assert.throws(
      () => attend(q, meta, { ...spilled, hostBlockTables: shortTables }),
      /hostBlockTables: expected shape \[3, \*\]/,
    );
  });
});
