/**
 * The DSA hot-row kernels through CudaBackend (hisparse_rows_ops.ts: hsRowResolve, hsRowCopy)
 * against the CPU oracle on identical inputs (GPU machine; skipped elsewhere): 40 scripted steps,
 * two requests, two indexers (the first shared by two layers: one plan, two copy passes),
 * GLM-5's latent row (576 bf16), index_topk 32, a hot buffer of 64 rows. Each step: the
 * attention view (positions j * bs + offset, table columns, lengths: what DsaHiSparseAttention
 * builds from LruHotRowResolver's slots), the miss lists in order, the counters; at the end every
 * copied byte of every layer's cache. The exhaustive standalone test is
 * native/tests/hisparse_rows_test.cu (scripts/gpu/dsa_rows_check.sh).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type HostRowTier, LruHotRowResolver, NO_ENTRY } from "../../src/attention/sparse/dsa.js";
import type { Tensor } from "../../src/backends/backend.js";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import { type RowHotState, rowCopy, rowResolve } from "../../src/backends/cuda/hisparse_rows_ops.js";
import { sparseBatch, type TestSparseRequest } from "../unit/attention/sparse/helpers.js";
import { gpuSkip, makeBackend, Rng } from "./helpers.js";

function skip(): string | false {
  const g = gpuSkip();
  if (g !== false) return g;
  return "rowResolve" in loadAddon() ? false : "the addon was built without the DSA hot-row kernels";
}

const [BS, ROW, K, HOT_BLOCKS, STRIDE, SLOTS, SOURCES] = [16, 576, 32, 4, 40, 3, 2];
const [NUM_BLOCKS, NUM_HOST_BLOCKS] = [200, 150];
/** Layer -> indexer: layers 0 and 1 share indexer 0, layer 2 has indexer 1. */
const SOURCE_OF = [0, 0, 1];

describe("DSA hot-row kernels vs LruHotRowResolver (GPU)", { skip: skip() }, () => {
  let be: CudaBackend;
  before(() => {
    be = makeBackend({ workspaceBytes: 1 << 28 });
  });
  after(() => be?.dispose());

  it("40 scripted steps: views, miss lists, counters and every copied byte equal the oracle's", () => {
    const rng = new Rng(15);
    const pool = rng.permutation(NUM_BLOCKS);
    let nextHost = 0;
    // Slots 2 and 0; 500 and 320 tokens (32 and 20 pages), about a quarter resident, the tail always.
    const reqs: (TestSparseRequest & { slot: number })[] = [
      { id: "a", slot: 2, numTokens: 500 },
      { id: "b", slot: 0, numTokens: 320 },
    ].map((r, i) => {
      const pages = Math.ceil(r.numTokens / BS);
      const hostBlockIds = Array.from({ length: pages }, () => nextHost++);
      const blockIds = hostBlockIds.map((_, p) => (p === pages - 1 || p % 4 === 1 ? pool.pop()! : -1));
      const hotBlockIds = Array.from({ length: HOT_BLOCKS }, () => pool.pop()!);
      return { ...r, batchIdx: i, tokenIdx: i, hostBlockIds, blockIds, hotBlockIds };
    });
    const table = (f: (r: (typeof reqs)[number]) => number[], width: number) => {
      const t = new Int32Array(SLOTS * width).fill(-1);
      for (const r of reqs) t.set(f(r), r.slot * width);
      return be.upload(t, [SLOTS, width], "i32");
    };
    const numHot = HOT_BLOCKS * BS;
    const state: RowHotState = {
      blockTable: table((r) => r.blockIds, STRIDE),
      hostBlockTable: table((r) => r.hostBlockIds, STRIDE),
      hotBlocks: table((r) => r.hotBlockIds, HOT_BLOCKS),
      lruPos: be.allocateFilled([SLOTS, SOURCES, numHot], "i32", 0xff),
      lruLastUse: be.allocateFilled([SLOTS, SOURCES, numHot], "i32", 0xff),
      lruTick: be.allocateFilled([SLOTS, SOURCES], "i32", 0),
      heldCount: be.allocateFilled([SLOTS, STRIDE], "i32", 0),
      heldPages: be.allocateFilled([SLOTS], "i32", 0),
      counters: be.allocateFilled([6], "i32", 0),
    };
    const caches = SOURCE_OF.map(() => be.allocateFilled([NUM_BLOCKS, BS, ROW], "bf16", 0xff));
    const hostRows = SOURCE_OF.map(() => be.allocatePinned(NUM_HOST_BLOCKS * BS * ROW * 2));
    const hostBits = hostRows.map((m) => new Uint16Array(m.buffer));
    for (const bits of hostBits) for (let i = 0; i < bits.length; i++) bits[i] = f32ToBf16Bits(rng.normal());
    const expected = SOURCE_OF.map(() => new Uint16Array(NUM_BLOCKS * BS * ROW).fill(0xffff));
    let layerOfCopy = 0;
    const tier: HostRowTier = {
      rowBytes: ROW * 2,
      loadRows: (_l, src, dst) => {
        for (let i = 0; i < src.length; i++)
          expected[layerOfCopy]!.set(
            hostBits[layerOfCopy]!.subarray(src[i]! * ROW, (src[i]! + 1) * ROW),
            dst[i]! * ROW,
          );
      },
    };
    const oracle = new LruHotRowResolver(tier, BS);
    const batch = sparseBatch(reqs);
    const prev: number[][][] = reqs.map(() => [[], []]);
    let [hits, misses] = [0, 0];
    for (let step = 0; step < 40; step++) {
      be.resetWorkspace();
      for (let src = 0; src < SOURCES; src++) {
        // Each request keeps about 70% of its previous picks; the newest row is always picked.
        const positions = new Int32Array(reqs.length * K).fill(NO_ENTRY);
        reqs.forEach((r, s) => {
          const n = r.numTokens;
          const pick = new Set<number>([n - 1]);
          for (const p of prev[s]![src]!) if (rng.next() < 0.7) pick.add(p);
          while (pick.size < K) pick.add(rng.int(0, n));
          const sorted = [...pick].sort((x, y) => x - y);
          prev[s]![src] = sorted;
          positions.set(sorted, s * K);
        });
        const want = oracle.resolve(src, { K, positions }, batch);
        const plan = rowResolve(be, {
          topk: be.stage(positions, [reqs.length, K], "i32"),
          tokenRow: null,
          rowFlags: null,
          reqSlot: be.stage(Int32Array.from(reqs.map((r) => r.slot)), [reqs.length], "i32"),
          seqLens: be.stage(Int32Array.from(reqs.map((r) => r.numTokens)), [reqs.length], "i32"),
          state,
          source: src,
          blockSize: BS,
          numBlocks: NUM_BLOCKS,
          numHostBlocks: NUM_HOST_BLOCKS,
        });
        SOURCE_OF.forEach((s, l) => {
          if (s !== src) return;
          layerOfCopy = l;
          oracle.apply(l, want, caches[l]!);
          rowCopy(be, plan, caches[l]!, hostRows[l]!.ptr, NUM_HOST_BLOCKS, null);
        });
        const host = (t: Tensor) => Array.from(be.toHost(t) as Int32Array);
        const wantTopk = Array.from(want.slots, (slot, j) =>
          slot < 0 ? NO_ENTRY : (j % K) * BS + (slot % BS),
        );
        const wantTable = Array.from(want.slots, (slot) => (slot < 0 ? 0 : Math.floor(slot / BS)));
        assert.deepEqual(host(plan.viewTopk), wantTopk, `step ${step} indexer ${src} view positions`);
        assert.deepEqual(host(plan.viewTable), wantTable, `step ${step} indexer ${src} view table`);
        assert.deepEqual(host(plan.viewSeqLens), [K * BS, K * BS]);
        const count = host(plan.missCount);
        const [gs, gd] = [host(plan.missSrc), host(plan.missDst)];
        const got = count.flatMap((c, r) => [...gs.slice(r * K, r * K + c), ...gd.slice(r * K, r * K + c)]);
        const wantMisses: number[] = [];
        let at = 0;
        for (const c of count) {
          wantMisses.push(...want.copySrc.slice(at, at + c), ...want.copyDst.slice(at, at + c));
          at += c;
        }
        assert.equal(at, want.copySrc.length, `step ${step} indexer ${src} miss count`);
        assert.deepEqual(got, wantMisses, `step ${step} indexer ${src} misses`);
        hits += want.hits;
        misses += want.copySrc.length;
      }
    }
    const c = be.toHost(state.counters) as Int32Array;
    assert.deepEqual([c[0], c[2], c[4]], [hits, misses, 0], "hits, misses, errors");
    assert.ok(
      hits > 100 && misses > 2 * numHot,
      `hits ${hits}, misses ${misses}: rows were evicted and recalled`,
    );
    caches.forEach((cache, l) => {
      const got = be.toHost(cache);
      const want = expected[l]!;
      for (let i = 0; i < want.length; i++) {
        if (want[i] === 0xffff) continue; // never copied (NaN on both sides)
        if (f32ToBf16Bits(got[i]!) !== want[i]) assert.fail(`layer ${l}: cache element ${i} differs`);
      }
    });
    for (const m of hostRows) m.dispose();
  });
});
