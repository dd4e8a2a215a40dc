/**
 * Argument marshalling of the HiSparse launchers of src/backends/cuda/hisparse_ops.ts on the
 * host-memory double of the addon: the widest pass one named object with every field of their C
 * parameter struct (native/kernels/hisparse.h; the double checks it against addon_params.ts as
 * the addon does), NULL (0) for absent optional tensors; the others their arguments in the C
 * launcher's order; wrong shapes are refused. The sparse decode attention
 * (sparse_attention_ops.ts): sparse_attention_ops.test.ts. The kernels themselves are tested by
 * native/tests/hisparse_test.cu (CPU emulator and GPU) and test/native/hisparse*.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { asDevicePtr } from "../../../../src/backends/cuda/addon.js";
import * as hs from "../../../../src/backends/cuda/hisparse_ops.js";
import { layout, ptr, setup, W } from "./hisparse_fixture.js";

describe("HiSparse ops marshalling (fake addon)", () => {
  it("reshapeAndCacheDigest: qkv, cache, slots, digests, host slots, then T, the geometry and the digest dtype", () => {
    const { fake, be, i32 } = setup();
    const qkv = be.allocateFilled([3, W], "bf16");
    const cache = be.allocateFilled([10, 2, 8, 2, 16], "bf16");
    // Sub-page digests of 4 tokens: [numHostBlocks, 8 / 4, 2, Hkv, D].
    const digests = be.allocateFilled([12, 2, 2, 2, 16], "bf16");
    const slots = i32([3]);
    const hostSlots = i32([3]);
    hs.reshapeAndCacheDigest(be, qkv, layout, cache, slots, digests, hostSlots, 8, 4);
    const c = fake.calls.at(-1)!;
    assert.equal(c.fn, "reshapeAndCacheDigest");
    assert.deepEqual(c.args.slice(1), [
      ptr(qkv),
      ptr(cache),
      ptr(slots),
      ptr(digests),
      ptr(hostSlots),
      3,
      W,
      4,
      2,
      16,
      8,
      4,
      10,
      12,
      1, // bf16 digests (DTYPE_CODE)
    ]);
    // fp8 digests (e4m3, rounded outward): the same call with dtype code 4; f32 is refused.
    const digests8 = be.allocateFilled([12, 2, 2, 2, 16], "fp8");
    hs.reshapeAndCacheDigest(be, qkv, layout, cache, slots, digests8, hostSlots, 8, 4);
    assert.deepEqual(fake.calls.at(-1)!.args.slice(4), [
      ptr(digests8),
      ptr(hostSlots),
      3,
      W,
      4,
      2,
      16,
      8,
      4,
      10,
      12,
      4,
    ]);
    assert.throws(
      () =>
        hs.reshapeAndCacheDigest(
          be,
          qkv,
          layout,
          cache,
          slots,
          be.allocateFilled([12, 2, 2, 2, 16], "f32"),
          hostSlots,
          8,
          4,
        ),
      /digests: expected dtype bf16 or fp8/,
    );
    assert.throws(
      () =>
        hs.reshapeAndCacheDigest(
          be,
          qkv,
          layout,
          cache,
          slots,
          be.allocateFilled([12, 2, 2, 16], "bf16"),
          hostSlots,
          8,
          4,
        ),
      /digests: expected shape \[\*, 2, 2, 2, 16\]/,
    );
  });

  it("questSelect with the benchmark overlap knob passes the flag bytes and p", () => {
    const { fake, be, i32 } = setup();
    const prev = be.allocateFilled([5 * 2 * 40], "i32");
    hs.questSelect(be, {
      qkv: be.allocateFilled([4, W], "bf16"),
      layout,
      tokenRow: null,
      digests: be.allocateFilled([100, 1, 2, 2, 16], "bf16"),
      seqLens: i32([3]),
      rowFlags: null,
      reqSlot: i32([3]),
      hostBlockTable: i32([5, 40]),
      pinnedTable: null,
      blockSize: 8,
      budgetPages: 6,
      sinkPages: 1,
      windowPages: 2,
      digestsPerPage: 1,
      overlap: { prevSelected: prev, p: 0.97 },
    });
    const c = fake.calls.at(-1)!;
    assert.equal(c.fn, "questSelect");
    assert.deepEqual([c.params!.prevSelected, c.params!.overlapP], [ptr(prev), 0.97]);
  });

  it("questSelect and resolve pass every field of their C structs by name; outputs are [R, Hkv, W] and [R, Hkv]", () => {
    const { fake, be, i32 } = setup();
    const R = 3;
    const S = 5;
    const Wp = 40;
    const numHot = 6;
    const qkv = be.allocateFilled([4, W], "bf16");
    const digests = be.allocateFilled([100, 4, 2, 2, 16], "fp8"); // fp8 digests (bf16 is the default)
    const [reqSlot, seqLens, flags, tokenRow] = [i32([R]), i32([R]), i32([R]), i32([R])];
    const [hostT, blockT, pinT] = [i32([S, Wp]), i32([S, Wp]), i32([S, Wp])];
    const sel = hs.questSelect(be, {
      qkv,
      layout,
      tokenRow,
      digests,
      seqLens,
      rowFlags: flags,
      reqSlot,
      hostBlockTable: hostT,
      pinnedTable: null,
      blockSize: 8,
      budgetPages: 6,
      sinkPages: 1,
      windowPages: 2,
      digestsPerPage: 4,
    });
    assert.deepEqual(
      [sel.selPages.shape, sel.selCount.shape],
      [
        [R, 2, Wp],
        [R, 2],
      ],
    );
    const q = fake.calls.at(-1)!;
    assert.equal(q.fn, "questSelect");
    assert.deepEqual(q.args, [be.stream]);
    const { scratch, ...fields } = q.params!;
    assert.ok(scratch! > 0, "scratch from the step workspace");
    assert.deepEqual(fields, {
      qkv: ptr(qkv),
      qkvRowStride: W,
      tokenRow: ptr(tokenRow),
      digests: ptr(digests),
      digestDtype: 4, // fp8 (DTYPE_CODE)
      numHostBlocks: 100,
      seqLens: ptr(seqLens),
      rowFlags: ptr(flags),
      reqSlot: ptr(reqSlot),
      hostBlockTable: ptr(hostT),
      pinnedTable: 0, // no pinned table
      tableStride: Wp,
      numSlots: S,
      selPages: ptr(sel.selPages),
      selCount: ptr(sel.selCount),
      scratchBytes: R * 2 * Wp * 8,
      numReqs: R,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 16,
      blockSize: 8,
      budgetPages: 6,
      sinkPages: 1,
      windowPages: 2,
      digestsPerPage: 4,
      prevSelected: 0, // benchmark overlap knob off
      overlapP: 0,
    });

    const state: hs.ResolverState = {
      blockTable: blockT,
      hostBlockTable: hostT,
      hotBlocks: i32([S, numHot]),
      lruPage: i32([S, 3, 2, numHot]),
      lruLastUse: i32([S, 3, 2, numHot]),
      lruTick: i32([S, 3, 2]),
      heldCount: i32([S, Wp]),
      heldPages: i32([S]),
      counters: i32([6]),
    };
    const cache = be.allocateFilled([50, 2, 8, 2, 16], "bf16");
    const res = hs.resolve(be, {
      selection: sel,
      rowFlags: flags,
      seqLens,
      reqSlot,
      state,
      layer: 1,
      kvCache: cache,
      hostTierPtr: asDevicePtr(0x7000_0000_0000),
      numHostBlocks: 100,
      blockSize: 8,
    });
    const r = fake.calls.at(-1)!;
    assert.equal(r.fn, "resolve");
    assert.deepEqual(r.args, [be.stream]);
    // The split copy's miss list: [R, Hkv, min(numHot, W)] host blocks, then hot blocks, then [R, Hkv] counts.
    const { missSrc, missDst, missCount, ...fields2 } = r.params!;
    const listBytes = R * 2 * Math.min(numHot, Wp) * 4;
    assert.ok(missSrc! > 0, "the miss list lives in the step's shared scratch");
    assert.equal(missDst, missSrc! + listBytes);
    assert.equal(missCount, missSrc! + 2 * listBytes);
    assert.deepEqual(fields2, {
      selPages: ptr(sel.selPages),
      selCount: ptr(sel.selCount),
      selStride: Wp,
      rowFlags: ptr(flags),
      seqLens: ptr(seqLens),
      reqSlot: ptr(reqSlot),
      blockTable: ptr(blockT),
      hostBlockTable: ptr(hostT),
      tableStride: Wp,
      numSlots: S,
      hotBlocks: ptr(state.hotBlocks),
      numHot,
      lruPage: ptr(state.lruPage),
      lruLastUse: ptr(state.lruLastUse),
      lruTick: ptr(state.lruTick),
      layer: 1,
      numLayers: 3,
      heldCount: ptr(state.heldCount),
      heldPages: ptr(state.heldPages),
      headBlockTables: ptr(res.headBlockTables),
      headSeqLens: ptr(res.headSeqLens),
      counters: ptr(state.counters),
      kvCache: ptr(cache),
      numBlocks: 50,
      hostKv: 0x7000_0000_0000,
      numHostBlocks: 100,
      numReqs: R,
      numKvHeads: 2,
      headDim: 16,
      blockSize: 8,
      hostKvDtype: hs.HOST_KV_DTYPE_CODES.bf16,
      kScale: 1,
      vScale: 1,
    });
    const base = {
      selection: sel,
      rowFlags: flags,
      seqLens,
      reqSlot,
      state,
      layer: 1,
      kvCache: cache,
      hostTierPtr: asDevicePtr(0x7000_0000_0000),
      numHostBlocks: 100,
      blockSize: 8,
    };
    // An fp8 host tier: its dtype code and scales reach the kernel; the fused copy passes no list.
    hs.resolve(be, { ...base, hostFormat: { dtype: "fp8", kScale: 0.25, vScale: 4 } });
    const f = fake.calls.at(-1)!.params!;
    assert.deepEqual([f.hostKvDtype, f.kScale, f.vScale], [hs.HOST_KV_DTYPE_CODES.fp8, 0.25, 4]);
    hs.resolve(be, { ...base, copy: "fused" });
    const u = fake.calls.at(-1)!.params!;
    assert.deepEqual([u.missSrc, u.missDst, u.missCount], [0, 0, 0]);
    assert.throws(
      () => hs.resolve(be, { ...base, copy: "fused", hostFormat: { dtype: "fp8", kScale: 1, vScale: 1 } }),
      /fused copy reads a bf16 host tier only/,
    );
    void pinT;
  });

  it("mirrorPages launches on the given stream with the address tables; writeRange / fillRange move exact bytes", () => {
    const { fake, be, i32 } = setup();
    const side = be.createSideStream();
    const a = {
      kvCachePtrs: i32([4]),
      hostTierPtrs: i32([4]),
      blockIds: i32([8]),
      hostBlockIds: i32([8]),
      count: 3,
      numLayers: 2,
      numKvHeads: 2,
      headDim: 16,
      blockSize: 8,
      numBlocks: 20,
      numHostBlocks: 30,
      hostFormat: { dtype: "fp8" as const, kScale: 0.5, vScale: 2 },
    };
    hs.mirrorPages(be, side.handle, a);
    const c = fake.calls.at(-1)!;
    assert.equal(c.fn, "mirrorPages");
    assert.notEqual(side.handle, be.stream);
    assert.deepEqual(c.args, [
      side.handle,
      ptr(a.kvCachePtrs),
      ptr(a.hostTierPtrs),
      ptr(a.blockIds),
      ptr(a.hostBlockIds),
      3,
      2,
      2,
      16,
      8,
      20,
      30,
      hs.HOST_KV_DTYPE_CODES.fp8,
      0.5,
      2,
    ]);
    assert.throws(
      () => hs.mirrorPages(be, side.handle, { ...a, count: 9 }),
      /9 copies but block id tensors of 8/,
    );
    const t = be.allocateFilled([10], "i32", 0xff);
    be.writeRange(t, 3, Int32Array.from([5, 6, 7]));
    be.fillRange(t, 8, 2, 0);
    assert.deepEqual(Array.from(be.toHost(t)), [-1, -1, -1, 5, 6, 7, -1, -1, 0, 0]);
    assert.throws(() => be.writeRange(t, 9, Int32Array.from([1, 2])), /outside a tensor of 10/);
    side.dispose();
  });

  it("SideStream marks: each joined once at its own mark, a mark never recorded not waited for, discardPending forgets all", () => {
    const { be } = setup();
    const side = be.createSideStream(3);
    const waits: number[] = [];
    const orig = be.waitEvent.bind(be);
    be.waitEvent = (e: number) => {
      waits.push(e);
      orig(e);
    };
    side.afterCompute();
    side.recordDone(0);
    side.recordDone(2);
    assert.deepEqual([side.isPending(0), side.isPending(1), side.isPending(2)], [true, false, true]);
    side.computeWaits(1); // never recorded: no wait
    side.computeWaits(2);
    side.computeWaits(2); // already joined: no second wait
    assert.equal(waits.length, 1);
    side.discardPending();
    assert.equal(side.isPending(0), false);
    side.computeWaits(0);
    assert.equal(waits.length, 1, "a discarded mark is not waited for");
    side.dispose();
  });
});
