/**
 * The expanded-form MLA prefill of the CUDA backend (src/backends/cuda/mla_prefill.ts) against the
 * CPU backend's expanded form (the oracle) on identical bf16 inputs. GPU machine only (skipped
 * elsewhere). One step holds two prefill chunks (a first chunk and a later one after 120 cached
 * tokens, numComputed > 0) around a decode, so the expanded and absorbed forms run in one call;
 * per-head shapes of DeepSeek-V3 (N 128, R 64, Vd 128) and GLM-5 (N 192, R 64, Vd 256) with
 * fewer heads (the CPU oracle is single-threaded):
 * - dense causal and DSA top-64 (< context): within bf16 tolerance of the CPU, with the default
 *   scratch and with 1 MiB and 0.6 MiB bounds (head groups, a partial last group, query tiles);
 * - expanded == absorbed on CUDA within bf16 tolerance (prefill.minQueryLen = Infinity forces
 *   the absorbed kernel for the whole step);
 * - deterministic: the same bits on a second run.
 * Spilled rows (SpilledRows, src/backends/cuda/mla_spilled.ts): a step of an unflagged decode, a
 * flagged short chunk (24 new tokens < minQueryLen: expanded only because it is flagged), a
 * flagged long chunk and an unflagged long first chunk; some full pages of the flagged requests
 * copied into a mapped pinned host tier (shuffled host blocks), their device blocks -1 in the
 * step's table and overwritten with NaN: dense and DSA top-64 outputs equal, bit for bit, the
 * same step with every page resident (same flags: same kernels, same rows), and are within bf16
 * of the step without `spilled` (no NaN: no stale device row was read).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Backend, MlaDims, SpilledRows, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/cpu_backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import type { CudaMlaOps } from "../../src/backends/cuda/mla_ops.js";
import { prefillTiles } from "../../src/backends/cuda/mla_prefill.js";
import { CudaTensor } from "../../src/backends/cuda/tensor.js";
import { buildMetadata } from "../unit/backends/cpu/helpers.js";
import { assertClose, assertSame, BF16_TOL, gpuSkip, makeBackend, Rng, randBf16 } from "./helpers.js";

const skip = gpuSkip();
const BS = 16;

const dimsOf = (Hq: number, N: number, R: number, Vd: number, C: number): MlaDims => ({
  numHeads: Hq,
  qkNopeHeadDim: N,
  qkRopeHeadDim: R,
  vHeadDim: Vd,
  kvLoraRank: C,
  softmaxScale: 1 / Math.sqrt(N + R),
});

const SHAPES = [
  { name: "DeepSeek-V3 heads (16 x 128 + 64 / 128, C 512)", dims: dimsOf(16, 128, 64, 128, 512) },
  { name: "GLM-5 heads (8 x 192 + 64 / 256, C 512)", dims: dimsOf(8, 192, 64, 256, 512) },
];
/** (numComputed, numNew): a first chunk, a decode, a later chunk. */
const REQS: [number, number][] = [
  [0, 80],
  [40, 1],
  [120, 72],
];
const BLOCKS = 13;

describe("CUDA MLA expanded prefill vs the CPU backend", { skip }, () => {
  let cuda: CudaBackend;
  let cpu: CpuBackend;
  const rng = new Rng(2104);
  before(() => {
    cuda = makeBackend();
    cpu = new CpuBackend({ numThreads: 8 });
  });
  after(() => {
    cuda?.dispose();
    cpu?.dispose();
  });
  const host = (b: Backend, t: Tensor) => b.toHost(t) as Float32Array;

  for (const { name, dims } of SHAPES)
    it(`${name}: dense and DSA top-64, two chunks around a decode, within bf16 of the CPU`, () => {
      cuda.resetWorkspace();
      cuda.fillUnusedWorkspace(0xff);
      cpu.resetWorkspace();
      const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
      const perm = rng.permutation(REQS.length * BLOCKS + 2);
      const reqs = REQS.map(([numComputed, numNew], r) => ({
        numComputed,
        numNew,
        blockIds: perm.slice(r * BLOCKS, (r + 1) * BLOCKS),
      }));
      const fill = reqs.map((r) => ({
        numComputed: 0,
        numNew: r.numComputed + r.numNew,
        blockIds: r.blockIds,
      }));
      const rows = fill.reduce((s, r) => s + r.numNew, 0);
      const latent = randBf16(rng, rows * (C + R));
      const T = reqs.reduce((s, r) => s + r.numNew, 0);
      const q = randBf16(rng, T * Hq * (N + R));
      const kvB = randBf16(rng, Hq * (N + Vd) * C, 1 / Math.sqrt(C));
      const positions = reqs.flatMap((r) => Array.from({ length: r.numNew }, (_, k) => r.numComputed + k));
      const K = 64;
      const sel = new Int32Array(T * K).fill(-1);
      positions.forEach((p, t) => {
        const pick = rng
          .permutation(p + 1)
          .slice(0, Math.min(K, p + 1))
          .sort((a, b) => a - b);
        sel.set(pick, t * K);
      });
      const caches = new Map<Backend, Tensor>();
      const run = (b: Backend, dt: "bf16" | "f32", topk: Int32Array | null) => {
        let cache = caches.get(b);
        if (cache === undefined) {
          cache = b.mla!.allocatePagedRows(REQS.length * BLOCKS + 2, BS, C + R, dt);
          const { meta } = buildMetadata(b, fill, BS);
          b.mla!.writeRows(b.stage(latent, [rows, C + R], dt), cache, 0, meta.slotMapping);
          caches.set(b, cache);
        }
        const w = b.uploadWeight({ data: kvB, dtype: "f32", shape: [Hq * (N + Vd), C] });
        const { meta } = buildMetadata(b, reqs, BS);
        const s = topk === null ? null : b.stage(topk, [T, K], "i32");
        const out = host(b, b.mla!.attention(b.stage(q, [T, Hq * (N + R)], dt), cache, w, meta, dims, BS, s));
        b.free(w);
        return out;
      };
      const ops = cuda.mla as CudaMlaOps;
      const defaults = { ...ops.prefill };
      try {
        for (const topk of [null, sel]) {
          const what = topk === null ? "dense" : "DSA top-64";
          const ref = run(cpu, "f32", topk);
          const expanded = run(cuda, "bf16", topk);
          assertClose(expanded, ref, 2 * BF16_TOL, `${what}: expanded vs CPU`);
          assertSame(run(cuda, "bf16", topk), expanded, `${what}: deterministic`);
          for (const bytes of [2 ** 20, 0.6 * 2 ** 20]) {
            ops.prefill.scratchBytes = bytes;
            const t = prefillTiles(dims, 192, 72, bytes);
            assert.ok(t.headGroup < Hq || t.queryTile < 72, `tight tiles ${t.headGroup} x ${t.queryTile}`);
            const tight = run(cuda, "bf16", topk);
            assertClose(
              tight,
              ref,
              2 * BF16_TOL,
              `${what}: ${t.headGroup} heads x ${t.queryTile} queries vs CPU`,
            );
          }
          ops.prefill.scratchBytes = defaults.scratchBytes;
          ops.prefill.minQueryLen = Number.POSITIVE_INFINITY;
          const absorbed = run(cuda, "bf16", topk);
          ops.prefill.minQueryLen = defaults.minQueryLen;
          assertClose(expanded, absorbed, 2 * BF16_TOL, `${what}: expanded vs absorbed`);
        }
      } finally {
        Object.assign(ops.prefill, defaults);
        for (const [b, c] of caches) b.free(c);
      }
    });
});

/** (numComputed, numNew, flagged, spilled pages): the spilled-rows step. */
const SPILL_REQS: [number, number, boolean, number[]][] = [
  [40, 1, false, []],
  [120, 24, true, [0, 2, 3, 5]],
  [130, 72, true, [1, 4, 6, 7]],
  [0, 80, false, []],
];

describe("CUDA MLA attention reading spilled pages from the host tier", { skip }, () => {
  let cuda: CudaBackend;
  const rng = new Rng(2105);
  before(() => {
    cuda = makeBackend();
  });
  after(() => cuda?.dispose());

  for (const { name, dims } of SHAPES)
    it(`${name}: dense and DSA top-64, flagged short and long chunks beside unflagged requests, equal to all-resident bits`, () => {
      cuda.resetWorkspace();
      cuda.fillUnusedWorkspace(0xff);
      const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
      const W = C + R;
      const numBlocks = SPILL_REQS.length * BLOCKS + 2;
      const perm = rng.permutation(numBlocks);
      const reqs = SPILL_REQS.map(([numComputed, numNew], r) => ({
        numComputed,
        numNew,
        blockIds: perm.slice(r * BLOCKS, (r + 1) * BLOCKS),
      }));
      const fill = reqs.map((r) => ({
        numComputed: 0,
        numNew: r.numComputed + r.numNew,
        blockIds: r.blockIds,
      }));
      const rows = fill.reduce((n, r) => n + r.numNew, 0);
      const cache = cuda.mla!.allocatePagedRows(numBlocks, BS, W, "bf16");
      const fillMeta = buildMetadata(cuda, fill, BS).meta;
      cuda.mla!.writeRows(
        cuda.stage(randBf16(rng, rows * W), [rows, W], "bf16"),
        cache,
        0,
        fillMeta.slotMapping,
      );
      const T = reqs.reduce((n, r) => n + r.numNew, 0);
      const q = cuda.stage(randBf16(rng, T * Hq * (N + R)), [T, Hq * (N + R)], "bf16");
      const kvB = randBf16(rng, Hq * (N + Vd) * C, 1 / Math.sqrt(C));
      const w = cuda.uploadWeight({ data: kvB, dtype: "f32", shape: [Hq * (N + Vd), C] });
      const K = 64;
      const sel = new Int32Array(T * K).fill(-1);
      let t = 0;
      for (const r of reqs)
        for (let k = 0; k < r.numNew; k++, t++) {
          const p = r.numComputed + k;
          sel.set(
            rng
              .permutation(p + 1)
              .slice(0, Math.min(K, p + 1))
              .sort((a, b) => a - b),
            t * K,
          );
        }
      const topk = cuda.stage(sel, [T, K], "i32");
      // The host tier: each spilled page's rows (read back from the device cache) at a shuffled
      // host block; host tables name it, every other entry -1.
      const spills = SPILL_REQS.flatMap(([, , , pages], r) => pages.map((page) => ({ r, page })));
      const numHostBlocks = spills.length + 3;
      const hostIds = rng.permutation(numHostBlocks);
      const pageElems = BS * W;
      const deviceRows = cuda.toHost(cache) as Float32Array;
      const pinned = cuda.allocatePinned(numHostBlocks * pageElems * 2);
      const hostBits = new Uint16Array(pinned.buffer);
      hostBits.fill(0xffff);
      const hostTables = new Int32Array(reqs.length * BLOCKS).fill(-1);
      const spilledReqs = reqs.map((r) => ({ ...r, blockIds: r.blockIds.slice() }));
      const staleSlots: number[] = [];
      spills.forEach(({ r, page }, k) => {
        const blk = reqs[r]!.blockIds[page]!;
        const hb = hostIds[k]!;
        for (let e = 0; e < pageElems; e++)
          hostBits[hb * pageElems + e] = f32ToBf16Bits(deviceRows[blk * pageElems + e]!);
        hostTables[r * BLOCKS + page] = hb;
        spilledReqs[r]!.blockIds[page] = -1;
        for (let o = 0; o < BS; o++) staleSlots.push(blk * BS + o);
      });
      const hostRows = new CudaTensor([numHostBlocks, BS, W], "bf16", pinned.ptr, "persistent", -1);
      const spilled: SpilledRows = {
        hostRows,
        hostBlockTables: cuda.stage(hostTables, [reqs.length, BLOCKS], "i32"),
        requests: Uint8Array.from(SPILL_REQS.map(([, , flagged]) => (flagged ? 1 : 0))),
      };
      const run = (tables: typeof reqs, sp: SpilledRows | null, s: Tensor | null) => {
        const { meta } = buildMetadata(cuda, tables, BS);
        return cuda.toHost(cuda.mla!.attention(q, cache, w, meta, dims, BS, s, sp)) as Float32Array;
      };
      try {
        const results = [null, topk].map((s) => ({
          s,
          plain: run(reqs, null, s),
          resident: run(reqs, spilled, s),
        }));
        // The stale device copies of the spilled pages: NaN (a read of one poisons the output).
        const stale = new Float32Array(staleSlots.length * W).fill(Number.NaN);
        const slots = cuda.stage(Int32Array.from(staleSlots), [staleSlots.length], "i32");
        cuda.mla!.writeRows(cuda.stage(stale, [staleSlots.length, W], "bf16"), cache, 0, slots);
        for (const { s, plain, resident } of results) {
          const what = s === null ? "dense" : "DSA top-64";
          assertClose(resident, plain, 2 * BF16_TOL, `${what}: flagged (expanded) vs unflagged forms`);
          const out = run(spilledReqs, spilled, s);
          assertSame(out, resident, `${what}: spilled pages from the host tier vs all resident`);
        }
      } finally {
        cuda.free(w);
        cuda.free(cache);
        pinned.dispose();
      }
    });
});
