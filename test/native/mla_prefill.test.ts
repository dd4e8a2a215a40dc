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
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Backend, MlaDims, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/cpu_backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import type { CudaMlaOps } from "../../src/backends/cuda/mla_ops.js";
import { prefillTiles } from "../../src/backends/cuda/mla_prefill.js";
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
