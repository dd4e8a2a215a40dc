/**
 * The CUDA backend's small-batch MoE path (Backend.moe.smallBatch, src/backends/cuda/moe_small_batch.ts
 * over native/kernels/moe_decode.h) against the CPU backend's op sequence (the oracle) on the same
 * bf16 values, GPU machine only (skipped elsewhere):
 * - a block (softmax top-8 of 64, no shared expert; sigmoid + bias x2.5 with a shared expert) at
 *   T = 1, 3, 8: each token's output within bf16 tolerance of the CPU's, for the tokens whose
 *   k-th and (k+1)-th selection scores are not near-tied (the two backends' router logits differ
 *   in the last f32 bits, which may swap a near-tied pair);
 * - batch invariance: a token alone gives bitwise its row of the batch;
 * - a captured graph replayed on new inputs equals the eager runs;
 * - prepare() refuses what the kernels cannot take (f32 weights, H not a multiple of 8).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Backend, MoeLayerWeights, Tensor } from "../../src/backends/backend.js";
import { CpuBackend } from "../../src/backends/cpu/cpu_backend.js";
import type { CudaBackend } from "../../src/backends/cuda/cuda_backend.js";
import type { MoeRoutingRule } from "../../src/config/moe_config.js";
import { assertClose, assertSame, BF16_TOL, gpuSkip, makeBackend, Rng, randBf16 } from "./helpers.js";

const skip = gpuSkip();

const SOFTMAX: MoeRoutingRule = {
  scoring: "softmax",
  topK: 8,
  renormalize: true,
  numGroups: 1,
  topkGroup: 1,
  routedScalingFactor: 1,
  correctionBias: false,
};
const SIGMOID: MoeRoutingRule = {
  ...SOFTMAX,
  scoring: "sigmoid",
  topK: 4,
  routedScalingFactor: 2.5,
  correctionBias: true,
};

interface HostBlock {
  E: number;
  H: number;
  I: number;
  Is: number;
  router: Float32Array;
  bias: Float32Array | null;
  gateUp: Float32Array;
  down: Float32Array;
  sGateUp: Float32Array | null;
  sDown: Float32Array | null;
}

function randomBlock(rng: Rng, E: number, H: number, I: number, Is: number, bias: boolean): HostBlock {
  return {
    E,
    H,
    I,
    Is,
    router: randBf16(rng, E * H, 1 / Math.sqrt(H)),
    bias: bias ? Float32Array.from({ length: E }, () => 0.1 * rng.normal()) : null,
    gateUp: randBf16(rng, E * 2 * I * H, 1 / Math.sqrt(H)),
    down: randBf16(rng, E * H * I, 1 / Math.sqrt(I)),
    sGateUp: Is > 0 ? randBf16(rng, 2 * Is * H, 1 / Math.sqrt(H)) : null,
    sDown: Is > 0 ? randBf16(rng, H * Is, 1 / Math.sqrt(Is)) : null,
  };
}

function upload(b: Backend, h: HostBlock): MoeLayerWeights {
  const w = (data: Float32Array, shape: number[]) => b.uploadWeight({ data, dtype: "f32", shape });
  return {
    router: w(h.router, [h.E, h.H]),
    correctionBias: h.bias === null ? null : b.upload(h.bias, [h.E], "f32"),
    gateUp: w(h.gateUp, [h.E, 2 * h.I, h.H]),
    down: w(h.down, [h.E, h.H, h.I]),
    shared:
      h.sGateUp === null || h.sDown === null
        ? null
        : { gateUp: w(h.sGateUp, [2 * h.Is, h.H]), down: w(h.sDown, [h.H, h.Is]) },
  };
}

/** The block through the op sequence of BackendMoeOps (the CPU oracle). */
function opSequence(b: Backend, x: Tensor, w: MoeLayerWeights, rule: MoeRoutingRule): Tensor {
  const ops = b.moe!;
  const E = w.router.shape[0]!;
  const r = ops.route(b.linear(x, w.router, null, "f32"), rule, w.correctionBias);
  const p = ops.permute(x, r.topkIds, E);
  const h = b.siluAndMul(ops.groupedLinear(p.hidden, w.gateUp, p.expertOffsets));
  const y = ops.groupedLinear(h, w.down, p.expertOffsets);
  const shared =
    w.shared === null
      ? null
      : b.linear(b.siluAndMul(b.linear(x, w.shared.gateUp, null)), w.shared.down, null);
  return ops.unpermute(y, p.slotToRow, r.topkWeights, shared);
}

/** Tokens whose k-th and (k+1)-th selection scores (CPU logits) are at least `gap` apart. */
function clearTokens(
  logits: Float32Array,
  T: number,
  h: HostBlock,
  rule: MoeRoutingRule,
  gap: number,
): number[] {
  const keep: number[] = [];
  for (let t = 0; t < T; t++) {
    const c = Array.from(logits.subarray(t * h.E, (t + 1) * h.E), (l, e) =>
      rule.scoring === "sigmoid" ? 1 / (1 + Math.exp(-l)) + (h.bias?.[e] ?? 0) : l,
    ).sort((a, b) => b - a);
    if (c[rule.topK - 1]! - c[rule.topK]! >= gap) keep.push(t);
  }
  return keep;
}

describe("CUDA Backend.moe.smallBatch vs the CPU backend", { skip }, () => {
  let cuda: CudaBackend;
  let cpu: CpuBackend;
  const rng = new Rng(2718);
  before(() => {
    cuda = makeBackend({ moeSmallBatchMaxTokens: 16 }); // the kernels take up to 16 tokens; the default limit is lower
    cpu = new CpuBackend({ numThreads: 8 });
  });
  after(() => {
    cuda?.dispose();
    cpu?.dispose();
  });

  const cases = [
    { name: "softmax E64 k8, no shared", rule: SOFTMAX, dims: [64, 256, 128, 0] as const, bias: false },
    { name: "sigmoid+bias E16 k4 x2.5, shared", rule: SIGMOID, dims: [16, 128, 64, 64] as const, bias: true },
  ];
  for (const c of cases) {
    it(`${c.name}: each clear token within bf16 tolerance of the CPU; alone == in the batch; graph == eager`, () => {
      const small = cuda.moe.smallBatch!;
      const [E, H, I, Is] = c.dims;
      const h = randomBlock(rng, E, H, I, Is, c.bias);
      const wc = upload(cuda, h);
      const wp = upload(cpu, h);
      assert.ok(small.prepare(wc, c.rule), "the block is taken");
      let compared = 0;
      for (const T of [1, 3, 8]) {
        cuda.resetWorkspace();
        cpu.resetWorkspace();
        const x = randBf16(rng, T * H);
        const got = cuda.toHost(small.forward(cuda.stage(x, [T, H], "bf16"), wc, c.rule));
        const xp = cpu.stage(x, [T, H], "f32");
        const ref = cpu.toHost(opSequence(cpu, xp, wp, c.rule));
        const logits = cpu.toHost(cpu.linear(xp, wp.router, null, "f32")) as Float32Array;
        for (const t of clearTokens(logits, T, h, c.rule, 1e-3)) {
          const row = (a: ArrayLike<number>) => Array.from({ length: H }, (_, i) => a[t * H + i]!);
          assertClose(row(got), row(ref), 2 * BF16_TOL, `${c.name} T=${T} token ${t}`);
          compared++;
        }
        // The last token alone.
        cuda.resetWorkspace();
        const alone = cuda.toHost(
          small.forward(cuda.stage(x.subarray((T - 1) * H), [1, H], "bf16"), wc, c.rule),
        );
        assertSame(alone, got.subarray((T - 1) * H), `${c.name} T=${T}: token ${T - 1} alone`);
      }
      assert.ok(compared >= 10, `only ${compared} of 12 tokens were clear of near-ties`);
      // Graph replay over a persistent input.
      const T = 5;
      const xIn = cuda.upload(new Float32Array(T * H), [T, H], "bf16");
      const inputs = [0, 1].map(() => randBf16(rng, T * H));
      const eager = inputs.map((x) => {
        cuda.resetWorkspace();
        cuda.writeTensor(xIn, x);
        return cuda.toHost(small.forward(xIn, wc, c.rule));
      });
      cuda.resetWorkspace();
      let out: Tensor | null = null;
      const g = cuda.graphs.capture(() => {
        out = small.forward(xIn, wc, c.rule);
      });
      for (const [i, x] of inputs.entries()) {
        cuda.resetWorkspace();
        cuda.writeTensor(xIn, x);
        cuda.graphs.replay(g);
        assertSame(cuda.toHost(out!), eager[i]!, `${c.name}: graph replay ${i}`);
      }
      cuda.graphs.dispose(g);
      cuda.free(xIn);
    });
  }

  it("prepare() refuses f32 weights and a hidden size that is not a multiple of 8", () => {
    const small = cuda.moe.smallBatch!;
    const h = randomBlock(rng, 8, 20, 16, 0, false);
    assert.equal(small.prepare(upload(cuda, h), { ...SOFTMAX, topK: 2 }), false, "H = 20");
    const f32 = randomBlock(rng, 8, 32, 16, 0, false);
    const w = upload(cuda, f32);
    const router = cuda.upload(f32.router, [8, 32], "f32");
    assert.equal(small.prepare({ ...w, router }, { ...SOFTMAX, topK: 2 }), false, "f32 router");
    assert.equal(small.prepare(w, { ...SOFTMAX, topK: 2 }), true, "the bf16 block");
  });
});
