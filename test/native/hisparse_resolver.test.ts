/**
 * The HiSparse resolver through CudaBackend against part 1's CPU oracle (GPU machine; skipped
 * elsewhere): 30 scripted steps over 2 sparse layers, with the split and the fused copy over a
 * bf16 host tier and the split copy over an fp8 one, equal LruHotBufferResolver's blocks,
 * lengths, hits, misses, SPARSE pages and every copied byte. Llama-3.1-8B head geometry
 * (hisparse_fixture.ts). The kernels' exhaustive standalone test is native/tests/hisparse_test.cu.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { HostKvTier } from "../../src/attention/sparse/hot_buffer.js";
import { LruHotBufferResolver } from "../../src/attention/sparse/hot_buffer.js";
import type { PageSelection } from "../../src/attention/sparse/selector.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import * as hs from "../../src/backends/cuda/hisparse_ops.js";
import { E4M3_VALUES } from "../../src/backends/fp8.js";
import { asBlockId, asHostBlockId, asRequestId } from "../../src/core/ids.js";
import { CudaHostKvTier } from "../../src/worker/hisparse/cuda/cuda_host_tier.js";
import { HiSparseSlotTables } from "../../src/worker/hisparse/cuda/slot_tables.js";
import { sparseBatch } from "../unit/attention/sparse/helpers.js";
import { makeBackend, Rng } from "./helpers.js";
import { BS, D, Hkv, skip, tensorOf } from "./hisparse_fixture.js";

describe("HiSparse resolver vs LruHotBufferResolver (GPU)", { skip: skip() }, () => {
  let be: CudaBackend;
  const rng = new Rng(61);
  before(() => {
    be = makeBackend({ workspaceBytes: 1 << 30 });
  });
  after(() => be?.dispose());

  for (const [variant, copy, fp8] of [
    ["split copy, bf16 host tier", "split", false],
    ["fused copy, bf16 host tier", "fused", false],
    ["split copy, fp8 host tier", "split", true],
  ] as const)
    it(`resolver (${variant}): 30 scripted steps over 2 sparse layers equal LruHotBufferResolver (blocks, lengths, counters, SPARSE pages, copied bytes)`, () => {
      const numSparseLayers = 2;
      const numHostBlocks = 400;
      const numBlocks = 160;
      const numHot = 12;
      const W = 64;
      const tables = new HiSparseSlotTables(be, {
        numSlots: 4,
        maxPages: W,
        numHot,
        numSparseLayers,
        numKvHeads: Hkv,
      });
      const caches = Array.from({ length: numSparseLayers }, () =>
        be.allocateFilled([numBlocks, 2, BS, Hkv, D], "bf16", 0xff),
      );
      const tier = new CudaHostKvTier(
        be,
        {
          numSparseLayers,
          numHostBlocks,
          blockSize: BS,
          numKvHeads: Hkv,
          headDim: D,
          format: fp8 ? { dtype: "fp8", kScale: 1, vScale: 1 } : undefined,
        },
        caches,
      );
      const slice = 2 * BS * D;
      // What the hot block reads of each host element, as bf16 bits: the bf16 itself, or the
      // e4m3 code's value (exact in bf16 at scale 1). Random codes avoid NaN (S.1111.111).
      const hostBits = tier.layers.map((m) => {
        if (!fp8) {
          const bits = new Uint16Array(m.buffer);
          for (let i = 0; i < bits.length; i++) bits[i] = f32ToBf16Bits(rng.normal());
          return bits;
        }
        const codes = new Uint8Array(m.buffer);
        const read = new Uint16Array(codes.length);
        for (let i = 0; i < codes.length; i++) {
          let c = Math.floor(rng.next() * 256);
          if ((c & 0x7f) === 0x7f) c ^= 1;
          codes[i] = c;
          read[i] = f32ToBf16Bits(E4M3_VALUES[c]!);
        }
        return read;
      });
      // Expected device caches (bf16 bits), maintained by the oracle's copies.
      const expected = caches.map(() => new Uint16Array(numBlocks * 2 * BS * Hkv * D).fill(0xffff));
      const oracleTier: HostKvTier = {
        sliceBytes: slice * (fp8 ? 1 : 2),
        loadHeadSlice: (layer, hb, g, _cache, block) => {
          for (let row = 0; row < 2 * BS; row++) {
            const src = ((hb * Hkv + g) * 2 * BS + row) * D;
            expected[layer]!.set(
              hostBits[layer]!.subarray(src, src + D),
              ((block * 2 * BS + row) * Hkv + g) * D,
            );
          }
        },
      };
      const oracle = new LruHotBufferResolver(oracleTier, BS, Hkv, numSparseLayers);
      // Two sparse requests (slots by arrival) and one dense row; block ids from a shuffled pool.
      const pool = rng.permutation(numBlocks);
      let nextHost = 0;
      const reqs = [
        {
          id: asRequestId("a"),
          seqLen: 30 * BS + 3,
          host: [] as number[],
          blocks: [] as number[],
          hot: [] as number[],
        },
        {
          id: asRequestId("b"),
          seqLen: 41 * BS + 9,
          host: [] as number[],
          blocks: [] as number[],
          hot: [] as number[],
        },
      ];
      for (const r of reqs) {
        const pages = Math.ceil(r.seqLen / BS);
        for (let p = 0; p < pages; p++) {
          r.host.push(nextHost++);
          r.blocks.push(p === 0 || p >= pages - 2 || p % 9 === 4 ? pool.pop()! : -1);
        }
        r.hot = Array.from({ length: numHot }, () => pool.pop()!);
      }
      // The slot tables learn each request's pages as deltas: the pages not sent yet, and the hot blocks.
      const sent = new Map<string, number>();
      const pushRow = (r: (typeof reqs)[number]) => {
        const from = sent.get(r.id) ?? 0;
        tables.applyDelta({
          reqId: r.id,
          firstNewPage: from,
          newHostBlockIds: r.host.slice(from).map(asHostBlockId),
          newBlockIds: r.blocks.slice(from).map(asBlockId),
          spilledPages: [],
          newPinnedPages: [],
          newHotBlockIds: r.hot.map(asBlockId),
        });
        sent.set(r.id, r.host.length);
      };
      for (const r of reqs) pushRow(r);
      let hits = 0;
      let misses = 0;
      for (let step = 0; step < 30; step++) {
        be.resetWorkspace();
        if (step === 15) {
          // Request b gets a new hot buffer: both sides start its LRUs over.
          reqs[1]!.hot = Array.from({ length: numHot }, () => pool.pop()!);
          pushRow(reqs[1]!);
        }
        for (const r of reqs) {
          if (r.seqLen % BS === 0) {
            r.host.push(nextHost++);
            r.blocks.push(pool.pop()!);
            pushRow(r);
          }
          r.seqLen++;
        }
        const batch = sparseBatch(
          reqs.map((r, i) => ({
            id: r.id,
            batchIdx: i,
            tokenIdx: i,
            numTokens: r.seqLen,
            hostBlockIds: r.host,
            blockIds: r.blocks,
            hotBlockIds: r.hot,
          })),
        );
        // Random selections: the tail page, a third of the others, at most numHot INACTIVE ones.
        const start = new Int32Array(reqs.length * Hkv + 1);
        const pages: number[] = [];
        const selPages = new Int32Array(3 * Hkv * W).fill(-7);
        const selCount = new Int32Array(3 * Hkv);
        reqs.forEach((r, s) => {
          const n = Math.ceil(r.seqLen / BS);
          for (let g = 0; g < Hkv; g++) {
            const pick: number[] = [];
            let inactive = 0;
            for (let p = 0; p + 1 < n; p++) {
              const isIn = r.blocks[p]! < 0;
              if (rng.next() < 0.33 && (!isIn || inactive < numHot)) {
                pick.push(p);
                if (isIn) inactive++;
              }
            }
            pick.push(n - 1);
            pages.push(...pick);
            start[s * Hkv + g + 1] = pages.length;
            selPages.set(pick, (s * Hkv + g) * W);
            selCount[s * Hkv + g] = pick.length;
          }
        });
        const selection: PageSelection = { start, pages: Int32Array.from(pages) };
        const rowsSeq = Int32Array.from([...reqs.map((r) => r.seqLen), 5 * BS]);
        const rowsFlag = Int32Array.from([1, 1, 0]);
        const rowsSlot = Int32Array.from([...reqs.map((r) => tables.slotOf(r.id)!), -1]);
        const dSel = {
          selPages: be.stage(selPages, [3, Hkv, W], "i32"),
          selCount: be.stage(selCount, [3, Hkv], "i32"),
        };
        for (let layer = 0; layer < numSparseLayers; layer++) {
          const want = oracle.resolve(layer, selection, batch, tensorOf([1]));
          const got = hs.resolve(be, {
            selection: dSel,
            rowFlags: be.stage(rowsFlag, [3], "i32"),
            seqLens: be.stage(rowsSeq, [3], "i32"),
            reqSlot: be.stage(rowsSlot, [3], "i32"),
            state: tables.state,
            layer,
            kvCache: caches[layer]!,
            hostTierPtr: tier.layerPtr(layer),
            numHostBlocks,
            blockSize: BS,
            hostFormat: tier.format,
            copy,
          });
          const gotT = be.toHost(got.headBlockTables) as Int32Array;
          const gotS = be.toHost(got.headSeqLens) as Int32Array;
          for (let i = 0; i < reqs.length * Hkv; i++) {
            const n = start[i + 1]! - start[i]!;
            assert.deepEqual(
              Array.from(gotT.subarray(i * W, i * W + n)),
              Array.from(want.blockIds.subarray(start[i]!, start[i + 1]!)),
              `step ${step} layer ${layer} item ${i} blocks`,
            );
            assert.equal(gotS[i], want.seqLens[i], `step ${step} layer ${layer} item ${i} length`);
          }
        }
        const c = oracle.takeCounters();
        const d = tables.takeCounters();
        assert.deepEqual(d, { hits: c.hits, misses: c.misses, errors: 0 }, `step ${step} counters`);
        assert.equal(tables.numSparsePages(true), oracle.numSparsePages, `step ${step} SPARSE pages`);
        hits += c.hits;
        misses += c.misses;
      }
      assert.ok(hits > 50 && misses > 50, `the script exercised hits (${hits}) and misses (${misses})`);
      for (let layer = 0; layer < numSparseLayers; layer++) {
        const got = be.toHost(caches[layer]!);
        const want = expected[layer]!;
        for (let i = 0; i < want.length; i++) {
          if (want[i] === 0xffff) continue; // slots the script never copied to (NaN both sides)
          if (f32ToBf16Bits(got[i]!) !== want[i]) assert.fail(`layer ${layer}: cache element ${i} differs`);
        }
      }
      tier.dispose();
      tables.dispose();
      for (const c of caches) be.free(c);
    });
});
