/**
 * Backend.mla on CUDA against the CPU backend (the oracle) on identical inputs, op by op, then
 * the tiny MLA / DSA checkpoints against HF transformers. GPU machine only (skipped elsewhere).
 * Inputs are bf16 values, so both backends see the same numbers; CUDA caches and activations are
 * bf16 where the CPU's are f32.
 * - writeRows, sliceColumns: exact; rotaryStrided: the CPU's f32 result rounded to bf16, exactly;
 *   layerNorm: bf16 tolerance;
 * - attention (absorbed on CUDA, expanded on the CPU): dense causal and DSA selections, decode and
 *   a prefill chunk in one step, with and without split-KV: bf16 tolerance; the DSA kernel with
 *   top-k covering every position equals dense attention (bitwise when the selection is as wide
 *   as the block table, within f32 rounding otherwise);
 * - indexerLogits: f32 tolerance; topkIndices on the same logits: identical to the CPU's (ties
 *   broken alike), also on the CUDA logits and with many ties;
 * - the whole DSA sequence (writes, indexer, top-k, attention) captured in a CUDA graph and
 *   replayed on new lengths equals the eager run;
 * - tiny-deepseek-v3 / -v32 / tiny-glm5-dsa (the vocabulary-pruned copies in test/fixtures, and
 *   the full ../shared checkpoints when carried in $HISPARSE_MODELS): last-position logits within
 *   bf16 tolerance of HF fp32, and the engine (CUDA graphs on) generates HF's 24 greedy tokens up
 *   to a near-tie (own top-2 gap < 0.1 logit, bf16 noise).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { AttentionMetadata, Backend, MlaDims, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/cpu_backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { roundBf16 } from "../../src/backends/cuda/half.js";
import { buildMetadata } from "../unit/backends/cpu/helpers.js";
import {
  assertClose,
  assertSame,
  BF16_TOL,
  gpuSkip,
  makeBackend,
  Rng,
  randBf16,
  randF32,
} from "./helpers.js";
import { runMlaParity } from "./mla_parity.js";

const skip = gpuSkip();
const BS = 16;

/** A step over shuffled blocks: requests (numComputed, numNew), each with `blocks` pages. */
function stepOf(rng: Rng, reqs: [number, number][], blocks: number) {
  const perm = rng.permutation(reqs.length * blocks + 2);
  return reqs.map(([numComputed, numNew], r) => ({
    numComputed,
    numNew,
    blockIds: perm.slice(r * blocks, (r + 1) * blocks),
  }));
}

/** Metadata of the step that writes every position [0, seqLen) of each request (a full prefill). */
function fillStep(reqs: ReturnType<typeof stepOf>) {
  return reqs.map((r) => ({ numComputed: 0, numNew: r.numComputed + r.numNew, blockIds: r.blockIds }));
}

/** Each token's position (host) of a step. */
function positionsOf(reqs: ReturnType<typeof stepOf>): Int32Array {
  return Int32Array.from(reqs.flatMap((r) => Array.from({ length: r.numNew }, (_, k) => r.numComputed + k)));
}

describe("CUDA Backend.mla vs the CPU backend", { skip }, () => {
  let cuda: CudaBackend;
  let cpu: CpuBackend;
  const rng = new Rng(2121);
  before(() => {
    cuda = makeBackend();
    cpu = new CpuBackend({ numThreads: 8 });
  });
  after(() => {
    cuda?.dispose();
    cpu?.dispose();
  });
  const host = (b: Backend, t: Tensor) => b.toHost(t) as Float32Array;
  const fresh = () => {
    cuda.resetWorkspace();
    cuda.fillUnusedWorkspace(0xff);
    cpu.resetWorkspace();
  };
  const both = <T>(f: (b: Backend, dt: "bf16" | "f32") => T): [T, T] => [f(cuda, "bf16"), f(cpu, "f32")];

  /** A latent (or index key) cache of rowWidth per backend, every position of `reqs` written. */
  const filledCaches = (reqs: ReturnType<typeof stepOf>, numBlocks: number, rowWidth: number) => {
    const T = reqs.reduce((s, r) => s + r.numComputed + r.numNew, 0);
    const rows = randBf16(rng, T * rowWidth);
    return both((b, dt) => {
      const cache = b.mla!.allocatePagedRows(numBlocks, BS, rowWidth, dt);
      const { meta } = buildMetadata(b, fillStep(reqs), BS);
      b.mla!.writeRows(b.stage(rows, [T, rowWidth], dt), cache, 0, meta.slotMapping);
      return cache;
    });
  };

  it("writeRows (two column ranges, padding skipped) and sliceColumns are exact", () => {
    fresh();
    const [T, C, R] = [9, 64, 16];
    const x = randBf16(rng, T * (C + R + 8));
    const slots = Int32Array.from([5, -1, 17, 40, 3, 63, 22, -1, 0]);
    const [gc, gp] = both((b, dt) => {
      const cache = b.mla!.allocatePagedRows(4, BS, C + R, dt);
      const xs = b.stage(x, [T, C + R + 8], dt);
      const s = b.stage(slots, [T], "i32");
      b.mla!.writeRows(b.mla!.sliceColumns(xs, 0, C), cache, 0, s);
      b.mla!.writeRows(b.mla!.sliceColumns(xs, C + 8, R), cache, C, s);
      return [host(b, cache), host(b, b.mla!.sliceColumns(xs, 3, 11))] as const;
    });
    assertSame(gc[0], gp[0], "latent cache");
    assertSame(gc[1], gp[1], "slice");
    for (const t of [cuda, cpu]) t.resetWorkspace();
  });

  it("rotaryStrided (interleaved and half) equals the CPU's rounded to bf16; layerNorm within bf16", () => {
    fresh();
    const [T, W, R, maxPos] = [7, 3 * 48, 16, 64];
    const cs = new Float32Array(maxPos * R);
    for (let p = 0; p < maxPos; p++)
      for (let i = 0; i < R / 2; i++) {
        const a = p * 10000 ** (-(2 * i) / R);
        cs[p * R + i] = Math.cos(a);
        cs[p * R + R / 2 + i] = Math.sin(a);
      }
    const pos = Int32Array.from([0, 1, 9, 63, 30, 2, 17]);
    for (const interleaved of [true, false]) {
      const x = randBf16(rng, T * W);
      const [gc, gp] = both((b, dt) => {
        const xs = b.stage(x, [T, W], dt);
        const tab = b.stage(cs, [maxPos, R], "f32");
        b.mla!.rotaryStrided(
          xs,
          { offset: 32, stride: 48, count: 3 },
          b.stage(pos, [T], "i32"),
          tab,
          interleaved,
        );
        return host(b, xs);
      });
      assertSame(gc, gp.map(roundBf16), `rotary interleaved=${interleaved}`);
    }
    const n = 128;
    const x = randBf16(rng, T * n, 3);
    const w = randBf16(rng, n);
    const bias = randBf16(rng, n);
    const [lc, lp] = both((b, dt) =>
      host(b, b.mla!.layerNorm(b.stage(x, [T, n], dt), b.stage(w, [n], dt), b.stage(bias, [n], dt), 1e-6)),
    );
    assertClose(lc, lp, BF16_TOL, "layerNorm");
  });

  const dimsOf = (Hq: number, N: number, R: number, Vd: number, C: number): MlaDims => ({
    numHeads: Hq,
    qkNopeHeadDim: N,
    qkRopeHeadDim: R,
    vHeadDim: Vd,
    kvLoraRank: C,
    softmaxScale: 1 / Math.sqrt(N + R),
  });
  // Decodes (split-KV) and a prefill chunk after cached tokens, as (numComputed, numNew); the
  // GLM-5 shape keeps contexts short: the CPU's expanded form is single-threaded.
  const SHAPES: { name: string; dims: MlaDims; reqs: [number, number][]; blocks: number }[] = [
    {
      name: "tiny (Hq 4, C 64, R 16)",
      dims: dimsOf(4, 32, 16, 32, 64),
      reqs: [
        [0, 1],
        [299, 1],
        [629, 1],
        [100, 24],
      ],
      blocks: 40,
    },
    {
      name: "GLM-5 (Hq 64, N 192, R 64, Vd 256, C 512)",
      dims: dimsOf(64, 192, 64, 256, 512),
      reqs: [
        [0, 1],
        [89, 1],
        [159, 1],
        [40, 4],
      ],
      blocks: 12,
    },
  ];

  /** Attention of one step on both backends; topk: i32 [T, K] host selections or null. */
  const attend = (
    dims: MlaDims,
    reqs: ReturnType<typeof stepOf>,
    caches: [Tensor, Tensor],
    kvB: Float32Array,
    q: Float32Array,
    topk: { data: Int32Array; K: number } | null,
    withCpu = true,
  ) => {
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
    const T = reqs.reduce((s, r) => s + r.numNew, 0);
    const run = (b: Backend, dt: "bf16" | "f32") => {
      const w = b.uploadWeight({ data: kvB, dtype: "f32", shape: [Hq * (N + Vd), C] });
      const { meta } = buildMetadata(b, reqs, BS);
      const sel = topk === null ? null : b.stage(topk.data, [T, topk.K], "i32");
      const out = host(
        b,
        b.mla!.attention(
          b.stage(q, [T, Hq * (N + R)], dt),
          caches[b === cuda ? 0 : 1],
          w,
          meta,
          dims,
          BS,
          sel,
        ),
      );
      b.free(w);
      return out;
    };
    // Without the CPU: the CUDA result and an empty stand-in.
    return withCpu ? both(run) : ([run(cuda, "bf16"), new Float32Array(0)] as [Float32Array, Float32Array]);
  };

  /** K random distinct positions <= p per token (fewer when p + 1 < K), ascending, -1 after. */
  const randomSelection = (reqs: ReturnType<typeof stepOf>, K: number) => {
    const pos = positionsOf(reqs);
    const data = new Int32Array(pos.length * K).fill(-1);
    pos.forEach((p, t) => {
      const pick = rng
        .permutation(p + 1)
        .slice(0, Math.min(K, p + 1))
        .sort((a, b) => a - b);
      data.set(pick, t * K);
    });
    return { data, K };
  };

  for (const { name, dims, reqs: shape, blocks } of SHAPES) {
    it(`attention ${name}: dense and DSA, decodes + a prefill chunk, within bf16 of the CPU's expanded form`, () => {
      fresh();
      const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
      const reqs = stepOf(rng, shape, blocks);
      const caches = filledCaches(reqs, reqs.length * blocks + 2, C + R);
      const kvB = randBf16(rng, Hq * (N + Vd) * C, 1 / Math.sqrt(C));
      const T = reqs.reduce((s, r) => s + r.numNew, 0);
      const q = randBf16(rng, T * Hq * (N + R));
      const [dc, dp] = attend(dims, reqs, caches, kvB, q, null);
      assertClose(dc, dp, 2 * BF16_TOL, "dense");
      const sel = randomSelection(reqs, 64);
      const [sc, sp] = attend(dims, reqs, caches, kvB, q, sel);
      assertClose(sc, sp, 2 * BF16_TOL, "DSA top-64");
      // Every position selected (CUDA only): as wide as the table (bitwise dense), and wider.
      const full = randomSelection(reqs, blocks * BS);
      assertSame(
        attend(dims, reqs, caches, kvB, q, full, false)[0],
        dc,
        "DSA over every position (K = table) == dense",
      );
      const wide = randomSelection(reqs, blocks * BS + 60);
      assertClose(
        attend(dims, reqs, caches, kvB, q, wide, false)[0],
        dc,
        4e-3,
        "DSA over every position (K > table) == dense",
      );
      for (const [i, b] of [cuda, cpu].entries()) b.free(caches[i]!);
    });
  }

  it("indexer logits within f32 tolerance; top-k identical to the CPU's on the same logits (ties, k >= context)", () => {
    fresh();
    const [Hi, Di, blocks] = [32, 128, 40];
    const reqs = stepOf(
      rng,
      [
        [0, 1],
        [299, 1],
        [629, 1],
        [100, 24],
        [3, 2],
      ],
      blocks,
    );
    const keys = filledCaches(reqs, reqs.length * blocks + 2, Di);
    const T = reqs.reduce((s, r) => s + r.numNew, 0);
    const q = randBf16(rng, T * Hi * Di);
    const w = randBf16(rng, T * Hi);
    const scales = { softmaxScale: Di ** -0.5, headWeightScale: Hi ** -0.5 };
    const width = blocks * BS;
    const [lc, lp] = both((b, dt) => {
      const { meta } = buildMetadata(b, reqs, BS);
      const i = b === cuda ? 0 : 1;
      return host(
        b,
        b.mla!.indexerLogits(
          b.stage(q, [T, Hi * Di], dt),
          b.stage(w, [T, Hi], dt),
          keys[i]!,
          meta,
          BS,
          scales,
          width,
        ),
      );
    });
    const finite = (a: Float32Array) => a.map((v) => (Number.isFinite(v) ? v : 0));
    assertSame(
      lc.map((v) => (Number.isFinite(v) ? 0 : v)),
      lp.map((v) => (Number.isFinite(v) ? 0 : v)),
      "-inf mask",
    );
    assertClose(finite(lc), finite(lp), 1e-4, "indexer logits");
    const pos = positionsOf(reqs);
    const tied = lc.map((v) => (Number.isFinite(v) ? Math.round(v * 2) / 2 : v));
    tied[3] = Number.NaN;
    tied[width + 5] = -0;
    for (const [what, logits] of [
      ["CUDA logits", lc],
      ["many ties, NaN, -0", tied],
      ["random f32", randF32(rng, T * width)],
    ] as const)
      for (const k of [32, 2048]) {
        const [tc, tp] = both((b) =>
          host(b, b.mla!.topkIndices(b.stage(logits, [T, width], "f32"), b.stage(pos, [T], "i32"), k)),
        );
        assertSame(tc, tp, `top-${k} of ${what}`);
      }
    for (const [i, b] of [cuda, cpu].entries()) b.free(keys[i]!);
  });

  it("the DSA sequence (writes, indexer, top-k, sparse attention) replays from a CUDA graph as it runs eagerly", () => {
    const dims = dimsOf(16, 64, 32, 64, 256);
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
    const [Hi, Di, K, B, blocks] = [8, 64, 48, 4, 24];
    const numBlocks = B * blocks;
    const latent = cuda.mla.allocatePagedRows(numBlocks, BS, C + R, "bf16");
    const ikeys = cuda.mla.allocatePagedRows(numBlocks, BS, Di, "bf16");
    const kvB = cuda.uploadWeight({
      data: randBf16(rng, Hq * (N + Vd) * C, 0.06),
      dtype: "f32",
      shape: [Hq * (N + Vd), C],
    });
    // Persistent step tensors, rewritten before each run (what the graph runner's buckets do).
    const up = (n: number, shape: number[], dt: "bf16" | "i32") =>
      cuda.upload(new Float32Array(n), shape, dt);
    const t = {
      qsl: cuda.upload(new Int32Array(B + 1), [B + 1], "i32"),
      seqLens: cuda.upload(new Int32Array(B), [B], "i32"),
      blockTables: cuda.upload(new Int32Array(B * blocks), [B, blocks], "i32"),
      slots: cuda.upload(new Int32Array(B), [B], "i32"),
      pos: cuda.upload(new Int32Array(B), [B], "i32"),
      q: up(B * Hq * (N + R), [B, Hq * (N + R)], "bf16"),
      kvc: up(B * C, [B, C], "bf16"),
      kpe: up(B * R, [B, R], "bf16"),
      iq: up(B * Hi * Di, [B, Hi * Di], "bf16"),
      ik: up(B * Di, [B, Di], "bf16"),
      iw: up(B * Hi, [B, Hi], "bf16"),
    };
    const meta: AttentionMetadata = {
      numReqs: B,
      numTokens: B,
      queryStartLoc: t.qsl,
      seqLens: t.seqLens,
      blockTables: t.blockTables,
      slotMapping: t.slots,
      maxQueryLen: 1,
      maxSeqLen: blocks * BS,
      host: {
        queryStartLoc: new Int32Array(0),
        seqLens: new Int32Array(0),
        blockTables: new Int32Array(0),
        maxBlocksPerReq: blocks,
        slotMapping: new Int32Array(0),
        positions: new Int32Array(0),
      },
    };
    const layer = (): Tensor => {
      const m = cuda.mla;
      m.writeRows(t.kvc, latent, 0, t.slots);
      m.writeRows(t.kpe, latent, C, t.slots);
      m.writeRows(t.ik, ikeys, 0, t.slots);
      const logits = m.indexerLogits(
        t.iq,
        t.iw,
        ikeys,
        meta,
        BS,
        { softmaxScale: 0.125, headWeightScale: 0.35 },
        blocks * BS,
      );
      return m.attention(t.q, latent, kvB, meta, dims, BS, m.topkIndices(logits, t.pos, K));
    };
    const tables = Int32Array.from(rng.permutation(numBlocks));
    const inputs = [t.q, t.kvc, t.kpe, t.iq, t.ik, t.iw];
    const steps = [0, 1, 2].map((step) => ({
      lens: Int32Array.from({ length: B }, (_, r) => 1 + ((step * 37 + r * 101) % (blocks * BS - 1))),
      data: inputs.map((x) =>
        randBf16(
          rng,
          x.shape.reduce((a, b) => a * b, 1),
        ),
      ),
    }));
    const write = (step: number) => {
      const { lens, data } = steps[step]!;
      cuda.writeTensor(
        t.qsl,
        Int32Array.from({ length: B + 1 }, (_, i) => i),
      );
      cuda.writeTensor(t.seqLens, lens);
      cuda.writeTensor(t.blockTables, tables);
      cuda.writeTensor(
        t.pos,
        lens.map((l) => l - 1),
      );
      cuda.writeTensor(
        t.slots,
        lens.map((l, r) => tables[r * blocks + Math.floor((l - 1) / BS)]! * BS + ((l - 1) % BS)),
      );
      for (const [i, x] of inputs.entries()) cuda.writeTensor(x, data[i]!);
    };
    // Every row of every request holds something before the first read.
    for (const c of [latent, ikeys])
      cuda.writeTensor(
        c,
        randBf16(
          rng,
          c.shape.reduce((a, b) => a * b, 1),
        ),
      );
    const snapshot = () => [latent, ikeys].map((c) => host(cuda, c));
    const restore = (s: Float32Array[]) => {
      for (const [i, c] of [latent, ikeys].entries()) cuda.writeTensor(c, s[i]!);
    };
    const eager: Float32Array[] = [];
    const states: Float32Array[][] = [];
    for (let step = 0; step < 3; step++) {
      cuda.resetWorkspace();
      write(step);
      states.push(snapshot());
      eager.push(host(cuda, layer()));
    }
    cuda.resetWorkspace();
    let out: Tensor | null = null;
    const g = cuda.graphs.capture(() => {
      out = layer();
    });
    for (let step = 0; step < 3; step++) {
      cuda.resetWorkspace();
      write(step);
      restore(states[step]!);
      cuda.graphs.replay(g);
      assert.ok(out !== null);
      assertSame(host(cuda, out), eager[step]!, `graph replay ${step}`);
    }
    cuda.graphs.dispose(g);
    for (const x of [latent, ikeys, kvB, ...Object.values(t)]) cuda.free(x);
  });
});

describe("tiny MLA / DSA checkpoints on CUDA vs HF transformers", { skip }, () => {
  runMlaParity();
});
