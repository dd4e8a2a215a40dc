/**
 * The HiSparse host tier through CudaBackend (GPU machine; skipped elsewhere): CudaHostKvTier's
 * eager mirror copies each page of every layer into the head-major host layout, its load
 * (hsLoadPages) copies mirrored pages back into other device blocks bit for bit, and an fp8 host
 * tier stores CpuHostKvCache's e4m3 codes and loads their values back. Llama-3.1-8B head
 * geometry (hisparse_fixture.ts). The kernels' exhaustive standalone test is
 * native/tests/hisparse_test.cu.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import { E4M3_VALUES, floatToE4m3 } from "../../src/backends/fp8.js";
import { CudaHostKvTier } from "../../src/worker/hisparse/cuda/cuda_host_tier.js";
import { makeBackend, Rng, randBf16 } from "./helpers.js";
import { BS, D, Hkv, skip } from "./hisparse_fixture.js";

describe("HiSparse host tier: mirror and load (GPU)", { skip: skip() }, () => {
  let be: CudaBackend;
  const rng = new Rng(61);
  before(() => {
    be = makeBackend({ workspaceBytes: 1 << 30 });
  });
  after(() => be?.dispose());

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
});
