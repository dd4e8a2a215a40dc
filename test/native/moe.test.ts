/**
 * Backend.moe on CUDA against the CPU backend (the oracle) on identical inputs, op by op and for a
 * whole MoE layer, eager and graph-captured. GPU machine only (skipped elsewhere). Inputs are
 * bf16 values, so both backends see the same numbers; CUDA outputs are bf16 where the CPU's are
 * f32, so exact checks compare with the CPU result rounded to bf16.
 * - route: ids identical; weights within 2 f32 ulp (the softmax denominator's float64 summation
 *   order differs, moe_route.cu);
 * - permute: offsets, slotToRow and rows identical (single-kernel and three-kernel paths);
 * - groupedLinear / groupedGateUpSilu: bf16 tolerance of the CPU's fp32 result; the fused op
 *   equals GEMM + siluAndMul bit for bit; rows equal whichever batch computes them;
 * - unpermute: the CPU's f32 sum rounded to bf16, exactly.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Backend, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/cpu_backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import { roundBf16 } from "../../src/backends/cuda/half.js";
import type { MoeRoutingRule } from "../../src/config/moe_config.js";
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

const skip = gpuSkip();

const rule = (r: Partial<MoeRoutingRule> & { topK: number }): MoeRoutingRule => ({
  scoring: "softmax",
  renormalize: true,
  numGroups: 1,
  topkGroup: 1,
  routedScalingFactor: 1,
  correctionBias: false,
  ...r,
});

/** Routing rules of the supported families (config/moe_config.ts). */
const RULES: { name: string; E: number; rule: MoeRoutingRule }[] = [
  { name: "qwen3-moe E128 k8", E: 128, rule: rule({ topK: 8 }) },
  { name: "softmax no renorm E60 k4", E: 60, rule: rule({ topK: 4, renormalize: false }) },
  {
    name: "glm-4.5 E160 k8 sigmoid+bias x2.5",
    E: 160,
    rule: rule({ topK: 8, scoring: "sigmoid", correctionBias: true, routedScalingFactor: 2.5 }),
  },
  {
    name: "deepseek-v3 E256 G8/4 k8",
    E: 256,
    rule: rule({
      topK: 8,
      scoring: "sigmoid",
      correctionBias: true,
      numGroups: 8,
      topkGroup: 4,
      routedScalingFactor: 2.5,
    }),
  },
];

/** f32 ulps between two floats (0 for equal values). */
function ulps(a: number, b: number): number {
  if (a === b) return 0;
  const buf = new DataView(new ArrayBuffer(8));
  buf.setFloat32(0, a);
  buf.setFloat32(4, b);
  return Math.abs(buf.getInt32(0) - buf.getInt32(4));
}

describe("CUDA Backend.moe vs the CPU backend", { skip }, () => {
  let cuda: CudaBackend;
  let cpu: CpuBackend;
  const rng = new Rng(314);
  before(() => {
    cuda = makeBackend();
    cpu = new CpuBackend({ numThreads: 8 });
  });
  after(() => {
    cuda?.dispose();
    cpu?.dispose();
  });
  const host = (b: Backend, t: Tensor) => b.toHost(t);
  const fresh = () => {
    cuda.resetWorkspace();
    cuda.fillUnusedWorkspace(0xff);
    cpu.resetWorkspace();
  };

  it("route: identical ids, weights within 2 ulp (four routing rules, T = 1, 7, 300)", () => {
    for (const { name, E, rule: r } of RULES) {
      const biasData = r.correctionBias ? randF32(rng, E, 0.1) : null;
      const biases = biasData === null ? null : [cuda, cpu].map((b) => b.upload(biasData, [E], "f32"));
      for (const T of [1, 7, 300]) {
        fresh();
        const logits = randF32(rng, T * E, 2);
        const [gc, gp] = [cuda, cpu].map((b, i) =>
          b.moe!.route(b.stage(logits, [T, E], "f32"), r, biases?.[i] ?? null),
        );
        assertSame(host(cuda, gc!.topkIds), host(cpu, gp!.topkIds), `${name} T=${T} ids`);
        const [wc, wp] = [host(cuda, gc!.topkWeights), host(cpu, gp!.topkWeights)];
        let worst = 0;
        for (let i = 0; i < wp.length; i++) worst = Math.max(worst, ulps(wc[i]!, wp[i]!));
        assert.ok(worst <= 2, `${name} T=${T}: weights differ by ${worst} ulp`);
      }
      for (const [i, t] of (biases ?? []).entries()) [cuda, cpu][i]!.free(t);
    }
  });

  it("permute: offsets, slotToRow and rows identical (T = 1, 33, 512 and 1100 tokens: both paths)", () => {
    const [E, k, H] = [128, 8, 256];
    for (const T of [1, 33, 512, 1100]) {
      fresh();
      const ids = new Int32Array(T * k);
      for (let t = 0; t < T; t++) {
        const picked = rng
          .permutation(E)
          .slice(0, k)
          .sort((a, b) => a - b);
        ids.set(picked, t * k);
      }
      const x = randBf16(rng, T * H);
      const [pc, pp] = [
        cuda.moe.permute(cuda.stage(x, [T, H], "bf16"), cuda.stage(ids, [T, k], "i32"), E),
        cpu.moe.permute(cpu.stage(x, [T, H], "f32"), cpu.stage(ids, [T, k], "i32"), E),
      ];
      assertSame(host(cuda, pc.expertOffsets), host(cpu, pp.expertOffsets), `T=${T} offsets`);
      assertSame(host(cuda, pc.slotToRow), host(cpu, pp.slotToRow), `T=${T} slotToRow`);
      assertSame(host(cuda, pc.hidden), host(cpu, pp.hidden), `T=${T} hidden`);
    }
  });

  it("groupedLinear and the fused gate_up + silu_and_mul match the CPU; rows do not depend on the batch", () => {
    const [E, K, I] = [16, 512, 192];
    const wData = randBf16(rng, E * 2 * I * K, 1 / Math.sqrt(K));
    const wc = cuda.uploadWeight({ data: wData, dtype: "f32", shape: [E, 2 * I, K] });
    const wp = cpu.uploadWeight({ data: wData, dtype: "f32", shape: [E, 2 * I, K] });
    for (const P of [3, 40, 700, 5000]) {
      fresh();
      const off = new Int32Array(E + 1);
      for (let e = 1; e <= E; e++)
        off[e] = e === E ? P : Math.min(P, off[e - 1]! + rng.int(0, (2 * P) / E + 1));
      const x = randBf16(rng, P * K);
      const xc = cuda.stage(x, [P, K], "bf16");
      const oc = cuda.stage(off, [E + 1], "i32");
      const full = cuda.moe.groupedLinear(xc, wc, oc);
      const ref = cpu.moe.groupedLinear(cpu.stage(x, [P, K], "f32"), wp, cpu.stage(off, [E + 1], "i32"));
      assertClose(host(cuda, full), host(cpu, ref), BF16_TOL, `groupedLinear P=${P}`);
      const fused = cuda.moe.groupedGateUpSilu!(xc, wc, oc);
      assertSame(host(cuda, fused), host(cuda, cuda.siluAndMul(full)), `fused == unfused P=${P}`);
      assertClose(host(cuda, fused), host(cpu, cpu.siluAndMul(ref)), BF16_TOL, `fused vs CPU P=${P}`);
      // Batch invariance: the first row of every case through a one-row "batch" of its expert.
      const e0 = off.findIndex((v, e) => e < E && off[e + 1]! > v);
      const one = new Int32Array(E + 1).fill(1);
      for (let e = 0; e <= e0; e++) one[e] = 0;
      const row = cuda.moe.groupedLinear(
        cuda.stage(x.subarray(off[e0]! * K, (off[e0]! + 1) * K), [1, K], "bf16"),
        wc,
        cuda.stage(one, [E + 1], "i32"),
      );
      const got = host(cuda, full).subarray(off[e0]! * 2 * I, (off[e0]! + 1) * 2 * I);
      assertSame(host(cuda, row), got, `row ${off[e0]} alone == in a batch of ${P}`);
    }
    cuda.free(wc);
    cpu.free(wp);
  });

  it("unpermute: the CPU's f32 sum rounded to bf16 (with and without a shared expert)", () => {
    const [k, H, E] = [8, 2048, 128];
    for (const T of [1, 9, 300]) {
      for (const withShared of [false, true]) {
        fresh();
        const P = T * k;
        const rows = Int32Array.from(rng.permutation(P));
        const y = randBf16(rng, P * H);
        const w = Float32Array.from({ length: P }, () => rng.next());
        const shared = withShared ? randBf16(rng, T * H) : null;
        const out = [cuda, cpu].map((b) =>
          b.moe!.unpermute(
            b.stage(y, [P, H], b.activationDtype),
            b.stage(rows, [T, k], "i32"),
            b.stage(w, [T, k], "f32"),
            shared === null ? null : b.stage(shared, [T, H], b.activationDtype),
          ),
        );
        const ref = Float32Array.from(host(cpu, out[1]!), roundBf16);
        assertSame(host(cuda, out[0]!), ref, `unpermute T=${T} shared=${withShared} (E ${E})`);
      }
    }
  });

  it("a whole MoE layer matches the CPU, and its graph replays equal the eager runs", () => {
    const [E, k, H, I] = [64, 8, 256, 128];
    const r = rule({ topK: k });
    const router = randBf16(rng, E * H, 1 / Math.sqrt(H));
    const gateUp = randBf16(rng, E * 2 * I * H, 1 / Math.sqrt(H));
    const down = randBf16(rng, E * H * I, 1 / Math.sqrt(I));
    const weights = (b: Backend) => ({
      router: b.uploadWeight({ data: router, dtype: "f32", shape: [E, H] }),
      gateUp: b.uploadWeight({ data: gateUp, dtype: "f32", shape: [E, 2 * I, H] }),
      down: b.uploadWeight({ data: down, dtype: "f32", shape: [E, H, I] }),
    });
    const wc = weights(cuda);
    const wp = weights(cpu);
    // logits: given (the same on both backends, so that near-ties route alike) or the router's.
    const layer = (b: Backend, w: typeof wc, x: Tensor, logits: Tensor | null = null): Tensor => {
      const ops = b.moe!;
      const rt = ops.route(logits ?? b.linear(x, w.router, null, "f32"), r, null);
      const p = ops.permute(x, rt.topkIds, E);
      const h =
        ops.groupedGateUpSilu?.(p.hidden, w.gateUp, p.expertOffsets) ??
        b.siluAndMul(ops.groupedLinear(p.hidden, w.gateUp, p.expertOffsets));
      return ops.unpermute(ops.groupedLinear(h, w.down, p.expertOffsets), p.slotToRow, rt.topkWeights, null);
    };
    for (const T of [1, 5, 700]) {
      fresh();
      const x = randBf16(rng, T * H);
      const logits = randF32(rng, T * E, 2);
      const got = host(
        cuda,
        layer(cuda, wc, cuda.stage(x, [T, H], "bf16"), cuda.stage(logits, [T, E], "f32")),
      );
      const ref = host(cpu, layer(cpu, wp, cpu.stage(x, [T, H], "f32"), cpu.stage(logits, [T, E], "f32")));
      assertClose(got, ref, 2 * BF16_TOL, `layer T=${T}`);
    }
    // Graph: the layer over a persistent input, replayed for new inputs.
    const T = 4;
    const xIn = cuda.upload(new Float32Array(T * H), [T, H], "bf16");
    const inputs = [0, 1, 2].map(() => randBf16(rng, T * H));
    const eager = inputs.map((x) => {
      cuda.resetWorkspace();
      cuda.writeTensor(xIn, x);
      return host(cuda, layer(cuda, wc, xIn));
    });
    cuda.resetWorkspace();
    let out: Tensor | null = null;
    const g = cuda.graphs.capture(() => {
      out = layer(cuda, wc, xIn);
    });
    for (const [i, x] of inputs.entries()) {
      cuda.resetWorkspace();
      cuda.writeTensor(xIn, x);
      cuda.graphs.replay(g);
      assertSame(host(cuda, out!), eager[i]!, `graph replay ${i}`);
    }
    cuda.graphs.dispose(g);
    cuda.free(xIn);
    for (const t of Object.values(wc)) cuda.free(t);
    for (const t of Object.values(wp)) cpu.free(t);
  });
});
