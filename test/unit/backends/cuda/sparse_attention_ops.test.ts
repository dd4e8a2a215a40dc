/**
 * Argument marshalling of the HiSparse decode attention (src/backends/cuda/sparse_attention_ops.ts)
 * on the host-memory double of the addon: `sparseDecodeAttention` passes one named object with
 * every field of HsSparseDecodeParams (native/kernels/attention.h; the double checks it against
 * addon_params.ts as the addon does), the paged attention fields first, then the per-head
 * tables, flags, token rows and mode; `CudaBackend.sparsePagedAttention` reads every row per
 * head and takes decode batches only. The kernel itself is tested by native/tests/hisparse_test.cu
 * and test/native/hisparse*.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { AttentionMetadata } from "../../../../src/backends/backend.js";
import { sparseDecodeAttention } from "../../../../src/backends/cuda/sparse_attention_ops.js";
import { layout, ptr, setup, W } from "./hisparse_fixture.js";

describe("HiSparse sparse decode attention marshalling (fake addon)", () => {
  it("sparseDecodeAttention: the paged attention fields, then the per-head tables, flags, token rows and mode", () => {
    const { fake, be, i32 } = setup();
    const R = 2;
    const qkv = be.allocateFilled([R, W], "bf16");
    const cache = be.allocateFilled([20, 2, 8, 2, 16], "bf16");
    const meta: AttentionMetadata = {
      numReqs: R,
      numTokens: R,
      queryStartLoc: i32([R + 1]),
      seqLens: i32([R]),
      blockTables: i32([R, 4]),
      slotMapping: i32([R]),
      maxQueryLen: 1,
      maxSeqLen: 32,
      host: {
        queryStartLoc: new Int32Array(R + 1),
        seqLens: new Int32Array(R),
        blockTables: new Int32Array(R * 4),
        maxBlocksPerReq: 4,
        slotMapping: new Int32Array(R),
        positions: new Int32Array(R),
      },
    };
    const tables = { headBlockTables: i32([R, 2, 6]), headSeqLens: i32([R, 2]) };
    const flags = i32([R]);
    const out = sparseDecodeAttention(be, qkv, layout, cache, meta, tables, 8, { rowFlags: flags });
    const c = fake.calls.at(-1)!;
    assert.equal(c.fn, "sparseDecodeAttention");
    assert.deepEqual(c.args, [be.stream]);
    const { workspace, workspaceBytes, ...fields } = c.params!;
    assert.ok(workspace! > 0 && workspaceBytes! > 0, "decode split scratch");
    assert.deepEqual(fields, {
      qkv: ptr(qkv),
      qkvRowStride: W,
      kvCache: ptr(cache),
      out: ptr(out),
      queryStartLoc: ptr(meta.queryStartLoc),
      seqLens: ptr(meta.seqLens),
      blockTables: ptr(meta.blockTables),
      maxBlocksPerReq: 4,
      numReqs: R,
      numTokens: R,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 16,
      blockSize: 8,
      scale: 1 / 4,
      maxModelLen: 6 * 8, // max(dense width 4, per-head width 6) * blockSize
      kvCacheFp8: 0,
      kScale: 1,
      vScale: 1,
      headBlockTables: ptr(tables.headBlockTables),
      headSeqLens: ptr(tables.headSeqLens),
      headTableStride: 6,
      rowFlags: ptr(flags),
      tokenRow: 0,
      onlyFlaggedRows: 0,
    });
    // The Backend method: every row per head, decode batches only.
    be.sparsePagedAttention(
      qkv,
      layout,
      cache,
      meta,
      {
        blockTables: tables.headBlockTables,
        seqLens: tables.headSeqLens,
        maxBlocks: 6,
        host: { blockTables: new Int32Array(0), seqLens: new Int32Array(0) },
      },
      8,
    );
    const all = fake.calls.at(-1)!.params!;
    assert.deepEqual(
      [all.rowFlags, all.tokenRow, all.onlyFlaggedRows],
      [0, 0, 0],
      "no flags: every row reads per-head tables",
    );
    assert.throws(
      () =>
        be.sparsePagedAttention(
          qkv,
          layout,
          cache,
          { ...meta, maxQueryLen: 2 },
          {
            blockTables: tables.headBlockTables,
            seqLens: tables.headSeqLens,
            maxBlocks: 6,
            host: { blockTables: new Int32Array(0), seqLens: new Int32Array(0) },
          },
          8,
        ),
      /takes decode batches/,
    );
  });
});
