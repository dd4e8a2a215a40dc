/**
 * The HiSparse kernels through CudaBackend against part 1's CPU oracles, on the same inputs
 * (GPU machine; skipped elsewhere): Quest digests and selection over bf16 and fp8 (e4m3 rounded
 * outward) digests (CUDA vs QuestSelector: the same digest values, page for page the same
 * selection, ties and pins included), the resolver over a scripted sequence (CUDA vs
 * LruHotBufferResolver: blocks, lengths, hits, misses, SPARSE pages, every copied byte), the
 * eager mirror's host layout, and sparse decode attention (dense-equal tables give
 * pagedAttention's bits; per-head page subsets match a float64 reference). Llama-3.1-8B head
 * geometry (32 q heads, 8 kv heads, head dim 128, block 16). The kernels' exhaustive standalone
 * test is native/tests/hisparse_test.cu.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { HostKvTier } from "../../src/attention/sparse/hot_buffer.js";
import { LruHotBufferResolver } from "../../src/attention/sparse/hot_buffer.js";
import { QuestSelector } from "../../src/attention/sparse/quest.js";
import type { PageSelection } from "../../src/attention/sparse/selector.js";
import type { AttentionMetadata, QkvLayout, Tensor } from "../../src/backends/backend.js";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import * as hs from "../../src/backends/cuda/hisparse_ops.js";
import { E4M3_VALUES, floatToE4m3 } from "../../src/backends/fp8.js";
import { asBlockId, asHostBlockId, asRequestId } from "../../src/core/ids.js";
import { CudaHostKvTier } from "../../src/worker/hisparse/cuda/cuda_host_tier.js";
import { HiSparseSlotTables } from "../../src/worker/hisparse/cuda/slot_tables.js";
import { selected, sparseBatch, type TestSparseRequest } from "../unit/attention/sparse/helpers.js";
import { assertClose, assertSame, BF16_TOL, gpuSkip, makeBackend, Rng, randBf16 } from "./helpers.js";
import { pagedAttentionRef } from "./reference.js";

function skip(): string | false {
  const g = gpuSkip();
  if (g !== false) return g;
  return loadAddon().buildInfo.hasHiSparse ? false : "the addon was built without the HiSparse kernels";
}

const layout: QkvLayout = { numHeads: 32, numKvHeads: 8, headDim: 128 };
const { numHeads: Hq, numKvHeads: Hkv, headDim: D } = layout;
const QKV_W = (Hq + 2 * Hkv) * D;
const BS = 16;
const tensorOf = (shape: number[]): Tensor => ({ shape, dtype: "f32" });
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

  it("mirror: CudaHostKvTier copies each page of every layer into the head-major host layout", () => {
    be.resetWorkspace();
    const numBlocks = 20;
    const numHostBlocks = 24;
    const L = 3;
    const data = Array.from({ length: L }, () => randBf16(rng, numBlocks * 2 * BS * Hkv * D));
    const caches = data.map((d) => be.upload(d, [numBlocks, 2, BS, Hkv, D], "bf16"));
    const tier = new CudaHostKvTier(
      be,
      { numSparseLayers: L, numHostBlocks, blockSize: BS, numKvHeads: Hkv, headDim: D },
      caches,
    );
    for (const m of tier.layers) new Uint16Array(m.buffer).fill(0xffff);
    const blocks = [3, 17, 0, 9];
    const hostBlocks = [23, 1, 6, 7];
    tier.mirror(blocks, hostBlocks);
    tier.beforeForward(); // the compute stream waits for the side stream's mirror
    be.synchronize();
    for (let l = 0; l < L; l++) {
      const host = new Uint16Array(tier.layers[l]!.buffer);
      blocks.forEach((b, i) => {
        for (let g = 0; g < Hkv; g++)
          for (let row = 0; row < 2 * BS; row++)
            for (let d = 0; d < D; d++) {
              const want = f32ToBf16Bits(data[l]![((b * 2 * BS + row) * Hkv + g) * D + d]!);
              const got = host[((hostBlocks[i]! * Hkv + g) * 2 * BS + row) * D + d]!;
              if (got !== want)
                assert.fail(`layer ${l} page ${b} head ${g} row ${row} d ${d}: ${got} != ${want}`);
            }
      });
      assert.equal(host[0], 0xffff, "host blocks not mirrored are untouched");
    }
    tier.dispose();
    for (const c of caches) be.free(c);
  });

  it("load: CudaHostKvTier.load (hsLoadPages) copies mirrored pages back into other device blocks bit for bit, every layer", () => {
    be.resetWorkspace();
    const numBlocks = 20;
    const numHostBlocks = 24;
    const L = 3;
    const data = Array.from({ length: L }, () => randBf16(rng, numBlocks * 2 * BS * Hkv * D));
    const caches = data.map((d) => be.upload(d, [numBlocks, 2, BS, Hkv, D], "bf16"));
    const tier = new CudaHostKvTier(
      be,
      { numSparseLayers: L, numHostBlocks, blockSize: BS, numKvHeads: Hkv, headDim: D },
      caches,
    );
    // Mirror pages 3, 17, 0 to host blocks 23, 1, 6, then load them back into blocks 5, 11, 19
    // (prefix-cache hits on host-only pages); every other block keeps its bits.
    tier.mirror([3, 17, 0], [23, 1, 6]);
    tier.load([5, 11, 19], [23, 1, 6]);
    be.synchronize();
    const page = 2 * BS * Hkv * D;
    const moved = new Map([
      [5, 3],
      [11, 17],
      [19, 0],
    ]);
    for (let l = 0; l < L; l++) {
      const got = be.toHost(caches[l]!);
      for (let b = 0; b < numBlocks; b++) {
        const src = moved.get(b) ?? b;
        for (let i = 0; i < page; i++)
          if (f32ToBf16Bits(got[b * page + i]!) !== f32ToBf16Bits(data[l]![src * page + i]!))
            assert.fail(`layer ${l} block ${b} element ${i}: not block ${src}'s`);
      }
    }
    tier.dispose();
    for (const c of caches) be.free(c);
  });

  it("fp8 host tier: the mirror stores CpuHostKvCache's e4m3 codes (head-major), the load writes their values back", () => {
    be.resetWorkspace();
    const numBlocks = 12;
    const L = 2;
    const data = Array.from({ length: L }, () => randBf16(rng, numBlocks * 2 * BS * Hkv * D));
    const caches = data.map((d) => be.upload(d, [numBlocks, 2, BS, Hkv, D], "bf16"));
    const tier = new CudaHostKvTier(
      be,
      {
        numSparseLayers: L,
        numHostBlocks: 8,
        blockSize: BS,
        numKvHeads: Hkv,
        headDim: D,
        format: { dtype: "fp8", kScale: 1, vScale: 1 },
      },
      caches,
    );
    assert.equal(tier.sliceBytes, 2 * BS * D, "one byte an element");
    tier.mirror([4, 9], [7, 2]);
    tier.load([0, 1], [7, 2]);
    be.synchronize();
    for (let l = 0; l < L; l++) {
      const host = new Uint8Array(tier.layers[l]!.buffer);
      const got = be.toHost(caches[l]!);
      for (const [b, hb, dst] of [
        [4, 7, 0],
        [9, 2, 1],
      ] as const)
        for (let g = 0; g < Hkv; g++)
          for (let row = 0; row < 2 * BS; row++)
            for (let d = 0; d < D; d++) {
              const dev = ((row * Hkv + g) * D + d) as number;
              const code = floatToE4m3(data[l]![b * 2 * BS * Hkv * D + dev]!);
              const h = host[((hb * Hkv + g) * 2 * BS + row) * D + d]!;
              if (h !== code)
                assert.fail(`layer ${l} page ${b} head ${g} row ${row} d ${d}: code ${h} != ${code}`);
              if (got[dst * 2 * BS * Hkv * D + dev] !== E4M3_VALUES[code])
                assert.fail(`layer ${l} block ${dst} element ${dev}: not e4m3 ${code}'s value`);
            }
    }
    tier.dispose();
    for (const c of caches) be.free(c);
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
