/**
 * The HiSparse compute kernels through CudaBackend against part 1's CPU oracles, on the same
 * inputs (GPU machine; skipped elsewhere): Quest digests and selection over bf16 and fp8 (e4m3
 * rounded outward) digests (CUDA vs QuestSelector: the same digest values, page for page the same
 * selection, ties and pins included), and sparse decode attention (dense-equal tables give
 * pagedAttention's bits; per-head page subsets match a float64 reference). The resolver:
 * hisparse_resolver.test.ts; the host tier's mirror and load: hisparse_host_tier.test.ts.
 * Llama-3.1-8B head geometry (32 q heads, 8 kv heads, head dim 128, block 16). The kernels'
 * exhaustive standalone test is native/tests/hisparse_test.cu.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { QuestSelector } from "../../src/attention/sparse/quest.js";
import type { AttentionMetadata, Tensor } from "../../src/backends/backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import * as hs from "../../src/backends/cuda/hisparse_ops.js";
import { E4M3_VALUES, floatToE4m3 } from "../../src/backends/fp8.js";
import { selected, sparseBatch, type TestSparseRequest } from "../unit/attention/sparse/helpers.js";
import { assertClose, assertSame, BF16_TOL, makeBackend, Rng, randBf16 } from "./helpers.js";
import { BS, D, Hkv, Hq, layout, QKV_W, skip, tensorOf } from "./hisparse_fixture.js";
import { pagedAttentionRef } from "./reference.js";

const DIGEST_DTYPES = ["bf16", "fp8"] as const;

/**
 * Digests on the device from host values: bf16 tensors directly; fp8 ones as the e4m3 codes of
 * the values rounded to nearest, -0 as +0 (uploaded as i32 words, then copied byte for byte).
 * @returns the tensor and the values it holds (what the CPU oracle's digests must start from)
 */
function uploadDigests(
  be: CudaBackend,
  values: Float32Array,
  shape: number[],
  dtype: (typeof DIGEST_DTYPES)[number],
): { t: Tensor; held: Float32Array } {
  if (dtype === "bf16") return { t: be.upload(values, shape, "bf16"), held: values };
  // Never -0 (0x80): the digest kernel stores a zero as +0 (fp8.cuh floatToE4m3Directed), and it
  // re-rounds every element of a digest it extends, where the oracle keeps an element no key beat.
  const codes = Uint8Array.from(values, (v) => {
    const c = floatToE4m3(v);
    return c === 0x80 ? 0 : c;
  });
  const t = be.allocateFilled(shape, "fp8");
  be.copyTensor(t, be.upload(new Int32Array(codes.buffer), [codes.length / 4], "i32"));
  return { t, held: Float32Array.from(codes, (c) => E4M3_VALUES[c]!) };
}

describe("HiSparse kernels vs the CPU oracles (GPU)", { skip: skip() }, () => {
  let be: CudaBackend;
  const rng = new Rng(61);
  before(() => {
    be = makeBackend({ workspaceBytes: 1 << 30 });
  });
  after(() => be?.dispose());

  // dt: tokens per digest (BS: one per page; the default; 4: sub-page digests).
  for (const digestDtype of DIGEST_DTYPES)
    for (const dt of [BS, 4])
      it(`digests (${digestDtype}, digest tokens ${dt}): the fused KV write gives QuestSelector.updateDigests's digests; K/V land at the slots`, () => {
        be.resetWorkspace();
        const S = BS / dt;
        const numHostBlocks = 64;
        const numBlocks = 64;
        // A 40-token prefill (pages 3, 9, 4 from offset 0), 3 decodes continuing pages, padding, one token with no page.
        const hostSlots: number[] = [];
        for (let i = 0; i < 40; i++) hostSlots.push([3, 9, 4][Math.floor(i / BS)]! * BS + (i % BS));
        hostSlots.push(11 * BS + 7, 12 * BS + 15, 20 * BS + 0, -1, -1);
        const T = hostSlots.length;
        const slots = hostSlots.map((_h, t) =>
          t === T - 2 ? -1 : t === T - 1 ? 63 * BS + 2 : (t * 7) % (60 * BS),
        );
        const qkv = randBf16(rng, T * QKV_W);
        const dg0 = randBf16(rng, numHostBlocks * S * 2 * Hkv * D);
        const cpu = new QuestSelector(
          {
            layout,
            blockSize: BS,
            numSparseLayers: 1,
            numHostBlocks,
            topk: 64,
            sinkTokens: 16,
            windowTokens: 16,
            digestTokens: dt,
            digestDtype,
          },
          () => qkv,
        );
        const { t: dg, held } = uploadDigests(be, dg0, [numHostBlocks, S, 2, Hkv, D], digestDtype);
        cpu.digests[0]!.set(held);
        cpu.updateDigests(0, tensorOf([T, QKV_W]), Int32Array.from(hostSlots));
        const dQkv = be.upload(qkv, [T, QKV_W], "bf16");
        const cache = be.allocateFilled([numBlocks, 2, BS, Hkv, D], "bf16", 0xff);
        hs.reshapeAndCacheDigest(
          be,
          dQkv,
          layout,
          cache,
          be.upload(Int32Array.from(slots), [T], "i32"),
          dg,
          be.upload(Int32Array.from(hostSlots), [T], "i32"),
          BS,
          dt,
        );
        assertSame(be.toHost(dg), cpu.digests[0]!, "digests");
        const got = be.toHost(cache);
        const kv = Hkv * D;
        for (let t = 0; t < T; t++) {
          if (slots[t]! < 0) continue;
          const [b, o] = [Math.floor(slots[t]! / BS), slots[t]! % BS];
          for (const which of [0, 1]) {
            const at = ((b * 2 + which) * BS + o) * kv;
            const src = t * QKV_W + (Hq + which * Hkv) * D;
            assertSame(
              got.subarray(at, at + kv),
              qkv.subarray(src, src + kv),
              `token ${t} ${which ? "V" : "K"}`,
            );
          }
        }
      });

  for (const digestDtype of DIGEST_DTYPES)
    for (const dt of [BS, 4])
      it(`selection (${digestDtype}, digest tokens ${dt}): CUDA picks QuestSelector's pages (sinks, window, pins, float64 scores, ties to the lower page)`, () => {
        be.resetWorkspace();
        const S = BS / dt;
        const numHostBlocks = 2048;
        const cfg = { topk: 256, sinkTokens: 32, windowTokens: 64 };
        const W = 600;
        const numSlots = 8;
        // Rows: fits the budget; long; long with many pins; long whose pages share 5 host blocks
        // (equal scores); not sparse this step (flag 0); padding (slot -1); pins beyond the budget.
        const rows = [
          { seqLen: 200, slot: 3, flag: 1 },
          { seqLen: 8000, slot: 0, flag: 1 },
          { seqLen: 1600, slot: 5, flag: 1, pins: [10, 11, 12, 40, 77, 99] },
          { seqLen: 4000, slot: 1, flag: 1, shared: 5 },
          { seqLen: 3000, slot: 2, flag: 0 },
          { seqLen: 0, slot: -1, flag: 1 },
          { seqLen: 900, slot: 6, flag: 1, pins: Array.from({ length: 20 }, (_, i) => 5 + i) },
        ];
        const R = rows.length;
        const hostTable = new Int32Array(numSlots * W).fill(-1);
        const pinned = new Int32Array(numSlots * W);
        for (const r of rows) {
          if (r.slot < 0) continue;
          const pages = Math.ceil(r.seqLen / BS);
          for (let p = 0; p < pages; p++)
            hostTable[r.slot * W + p] =
              r.shared !== undefined ? rng.int(0, r.shared) : rng.int(0, numHostBlocks);
          for (const p of r.pins ?? []) pinned[r.slot * W + p] = 1;
        }
        const digests = uploadDigests(
          be,
          randBf16(rng, numHostBlocks * S * 2 * Hkv * D),
          [numHostBlocks, S, 2, Hkv, D],
          digestDtype,
        );
        const T = R + 2;
        const qkv = randBf16(rng, T * QKV_W);
        const tokenRow = Int32Array.from(rows, (_, r) => (r * 3 + 1) % T);
        const sel = hs.questSelect(be, {
          qkv: be.upload(qkv, [T, QKV_W], "bf16"),
          layout,
          tokenRow: be.upload(tokenRow, [R], "i32"),
          digests: digests.t,
          seqLens: be.upload(
            Int32Array.from(rows, (r) => r.seqLen),
            [R],
            "i32",
          ),
          rowFlags: be.upload(
            Int32Array.from(rows, (r) => r.flag),
            [R],
            "i32",
          ),
          reqSlot: be.upload(
            Int32Array.from(rows, (r) => r.slot),
            [R],
            "i32",
          ),
          hostBlockTable: be.upload(hostTable, [numSlots, W], "i32"),
          pinnedTable: be.upload(pinned, [numSlots, W], "i32"),
          blockSize: BS,
          budgetPages: cfg.topk / BS,
          sinkPages: cfg.sinkTokens / BS,
          windowPages: cfg.windowTokens / BS,
          digestsPerPage: S,
        });
        const gotPages = be.toHost(sel.selPages) as Int32Array;
        const gotCount = be.toHost(sel.selCount) as Int32Array;
        const cpu = new QuestSelector(
          { layout, blockSize: BS, numSparseLayers: 1, numHostBlocks, ...cfg, digestTokens: dt, digestDtype },
          () => qkv,
        );
        cpu.digests[0]!.set(digests.held);
        const sparse = rows.map((r, i) => ({ ...r, i })).filter((r) => r.flag === 1 && r.slot >= 0);
        const reqs: TestSparseRequest[] = sparse.map((r) => {
          const pages = Math.ceil(r.seqLen / BS);
          return {
            id: `r${r.i}`,
            batchIdx: r.i,
            tokenIdx: tokenRow[r.i]!,
            numTokens: r.seqLen,
            hostBlockIds: Array.from(hostTable.subarray(r.slot * W, r.slot * W + pages)),
            blockIds: new Array(pages).fill(-1),
            pinnedPages: r.pins ?? [],
            hotBlockIds: [0],
          };
        });
        const want = selected(cpu.select(0, tensorOf([T, QKV_W]), sparseBatch(reqs)));
        sparse.forEach((r, s) => {
          for (let g = 0; g < Hkv; g++) {
            const item = r.i * Hkv + g;
            const got = Array.from(gotPages.subarray(item * W, item * W + gotCount[item]!));
            assert.deepEqual(got, want[s * Hkv + g], `row ${r.i} (seqLen ${r.seqLen}) kv head ${g}`);
          }
        });
        for (const r of [4, 5])
          for (let g = 0; g < Hkv; g++) assert.equal(gotCount[r * Hkv + g], 0, `row ${r} skipped`);
      });

  it("sparse attention: dense-equal per-head tables give pagedAttention's bits; per-head subsets match float64", () => {
    be.resetWorkspace();
    const seqLens = [4000, 1, 0, 777, 2048, 16, 17, 9000];
    const R = seqLens.length;
    const maxBlocks = Math.ceil(16384 / BS);
    const numBlocks = seqLens.reduce((s, l) => s + Math.ceil(l / BS), 0) + 8;
    const order = rng.permutation(numBlocks);
    const table = new Int32Array(R * maxBlocks);
    let next = 0;
    seqLens.forEach((len, r) => {
      for (let b = 0; b < Math.ceil(len / BS); b++) table[r * maxBlocks + b] = order[next++]!;
    });
    const g = { numBlocks, blockSize: BS, numKvHeads: Hkv, headDim: D };
    const cacheData = randBf16(rng, numBlocks * 2 * BS * Hkv * D);
    const qkvData = randBf16(rng, R * QKV_W);
    const cache = be.upload(cacheData, [numBlocks, 2, BS, Hkv, D], "bf16");
    const qkv = be.upload(qkvData, [R, QKV_W], "bf16");
    const qsl = Int32Array.from({ length: R + 1 }, (_, i) => i);
    const meta: AttentionMetadata = {
      numReqs: R,
      numTokens: R,
      queryStartLoc: be.upload(qsl, [R + 1], "i32"),
      seqLens: be.upload(Int32Array.from(seqLens), [R], "i32"),
      blockTables: be.upload(table, [R, maxBlocks], "i32"),
      slotMapping: be.upload(new Int32Array(R).fill(-1), [R], "i32"),
      maxQueryLen: 1,
      maxSeqLen: 9000,
      host: {
        queryStartLoc: qsl,
        seqLens: Int32Array.from(seqLens),
        blockTables: table,
        maxBlocksPerReq: maxBlocks,
        slotMapping: new Int32Array(R),
        positions: new Int32Array(R),
      },
    };
    const dense = be.toHost(be.pagedAttention(qkv, layout, cache, meta, BS));
    const headTables = new Int32Array(R * Hkv * maxBlocks);
    const headSeq = new Int32Array(R * Hkv);
    for (let r = 0; r < R; r++)
      for (let h = 0; h < Hkv; h++) {
        headTables.set(table.subarray(r * maxBlocks, (r + 1) * maxBlocks), (r * Hkv + h) * maxBlocks);
        headSeq[r * Hkv + h] = seqLens[r]!;
      }
    const perHead = (t: Int32Array, s: Int32Array) => ({
      blockTables: be.upload(t, [R, Hkv, maxBlocks], "i32"),
      seqLens: be.upload(s, [R, Hkv], "i32"),
      maxBlocks,
      host: { blockTables: t, seqLens: s },
    });
    const same = be.toHost(
      be.sparsePagedAttention(qkv, layout, cache, meta, perHead(headTables, headSeq), BS),
    );
    assertSame(same, dense, "every page selected: sparse attention equals dense bit for bit");
    // Per-head subsets: each kv head reads a random half of the request's pages, the tail last.
    const subTables = new Int32Array(R * Hkv * maxBlocks);
    const subSeq = new Int32Array(R * Hkv);
    const ref = new Float64Array(R * Hq * D);
    for (let r = 0; r < R; r++) {
      const pages = Math.ceil(seqLens[r]! / BS);
      for (let h = 0; h < Hkv; h++) {
        const pick: number[] = [];
        for (let p = 0; p + 1 < pages; p++) if (rng.next() < 0.5) pick.push(p);
        if (pages > 0) pick.push(pages - 1);
        const item = r * Hkv + h;
        pick.forEach((p, j) => {
          subTables[item * maxBlocks + j] = table[r * maxBlocks + p]!;
        });
        subSeq[item] = pages === 0 ? 0 : (pick.length - 1) * BS + (seqLens[r]! - (pages - 1) * BS);
        // Reference: this request alone with the head's table; keep its q heads of group h.
        const one = pagedAttentionRef(
          qkvData.subarray(r * QKV_W, (r + 1) * QKV_W),
          cacheData,
          layout,
          g,
          [0, 1],
          [subSeq[item]!],
          subTables.subarray(item * maxBlocks, (item + 1) * maxBlocks),
          maxBlocks,
        );
        const G = Hq / Hkv;
        ref.set(one.subarray(h * G * D, (h + 1) * G * D), (r * Hq + h * G) * D);
      }
    }
    const sub = be.toHost(be.sparsePagedAttention(qkv, layout, cache, meta, perHead(subTables, subSeq), BS));
    assertClose(sub, ref, BF16_TOL, "per-head page subsets");
  });
});
