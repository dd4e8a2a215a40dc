/**
 * The CPU backend's mixture-of-experts ops (Backend.moe, backends/backend.ts) against hand
 * computations and naive formulas: routing (softmax with and without renormalisation; sigmoid
 * with the correction bias entering the selection only, group limits, scaling; ties; ascending
 * ids), the permutation by expert (offsets, stable order, rows), the grouped matmul (each row
 * equals linear's bits; empty experts) and the weighted un-permute with the shared output.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import type { MoeConfig, MoeRoutingRule } from "../../../../src/config/model_config.js";
import { makeRand, randF32 } from "./helpers.js";
import { referenceRoute } from "./moe_reference.js";

const b = new CpuBackend({ numThreads: 1 });
after(() => b.dispose());

const softmax = (topK: number, renormalize: boolean): MoeRoutingRule => ({
  scoring: "softmax",
  topK,
  renormalize,
  numGroups: 1,
  topkGroup: 1,
  routedScalingFactor: 1,
  correctionBias: false,
});
const noaux = (topK: number, numGroups: number, topkGroup: number, scale: number): MoeRoutingRule => ({
  scoring: "sigmoid",
  topK,
  renormalize: true,
  numGroups,
  topkGroup,
  routedScalingFactor: scale,
  correctionBias: true,
});

/** Routes `rows` (each of E logits) and returns ids and weights per row. */
function route(rows: number[][], rule: MoeRoutingRule, bias: number[] | null) {
  const E = rows[0]!.length;
  const logits = b.stage(Float32Array.from(rows.flat()), [rows.length, E], "f32");
  const bt = bias === null ? null : b.stage(Float32Array.from(bias), [E], "f32");
  const r = b.moe.route(logits, rule, bt);
  const ids = b.toHost(r.topkIds) as Int32Array;
  const w = b.toHost(r.topkWeights) as Float32Array;
  const k = rule.topK;
  const out = rows.map((_, t) => ({
    ids: [...ids.subarray(t * k, (t + 1) * k)],
    w: [...w.subarray(t * k, (t + 1) * k)],
  }));
  b.resetWorkspace();
  return out;
}

const near = (a: number[], e: number[], tol = 1e-6): void => {
  for (const [i, x] of a.entries()) assert.ok(Math.abs(x - e[i]!) <= tol, `${a} vs ${e}`);
};

describe("moe.route", () => {
  it("softmax top-2 of 4: weights are the probabilities, renormalised when asked; ids ascending", () => {
    const logits = [1, 3, 0, 2]; // softmax: e^1, e^3, e^0, e^2 over their sum
    const z = Math.exp(1) + Math.exp(3) + 1 + Math.exp(2);
    const [plain] = route([logits], softmax(2, false), null);
    assert.deepEqual(plain!.ids, [1, 3]); // chosen: expert 1 (e^3), then 3 (e^2); stored ascending
    near(plain!.w, [Math.exp(3) / z, Math.exp(2) / z]);
    const [renorm] = route([logits], softmax(2, true), null);
    const s = Math.exp(3) + Math.exp(2);
    near(renorm!.w, [Math.exp(3) / s, Math.exp(2) / s]);
  });

  it("ties go to the lower expert id", () => {
    const [r] = route([[0.5, 2, 2, 2]], softmax(2, false), null);
    assert.deepEqual(r!.ids, [1, 2]);
  });

  it("sigmoid: the correction bias changes the selection but never the weights; scaling applies after renormalising", () => {
    const sig = (x: number) => 1 / (1 + Math.exp(-x));
    const logits = [2, 1, 0, -1];
    // Without bias experts 0 and 1 win; a bias of +3 on expert 3 puts it in (and 0 stays).
    const [r] = route([logits], noaux(2, 1, 1, 2.5), [0, 0, 0, 3]);
    assert.deepEqual(r!.ids, [0, 3]);
    const [w0, w3] = [sig(2), sig(-1)];
    near(r!.w, [(2.5 * w0) / (w0 + w3), (2.5 * w3) / (w0 + w3)]);
  });

  it("group limit: a group scores the sum of its two best; experts outside the top groups are never picked", () => {
    // 8 experts in 4 groups of 2; selection scores s = sigmoid(logits). Group sums: g0 = s(3) +
    // s(-4) = 0.97, g1 = 2 s(1) = 1.46, g2 = s(2) + s(-4) = 0.90, g3 = 2 s(0) = 1.0. The best 2
    // groups are g1 and g3 (though expert 0 alone has the best score), so top-2 are experts 2, 3.
    const logits = [3, -4, 1, 1, 2, -4, 0, 0];
    const [r] = route([logits], noaux(2, 4, 2, 1), [0, 0, 0, 0, 0, 0, 0, 0]);
    assert.deepEqual(r!.ids, [2, 3]);
    // With one group every expert is eligible: 0 and 4 win.
    const [all] = route([logits], noaux(2, 1, 1, 1), [0, 0, 0, 0, 0, 0, 0, 0]);
    assert.deepEqual(all!.ids, [0, 4]);
  });

  it("random rows agree with the reference rule (softmax / noaux_tc, groups, bias)", () => {
    const rand = makeRand(3);
    const E = 16;
    const rules: MoeRoutingRule[] = [
      softmax(4, false),
      softmax(3, true),
      noaux(4, 4, 2, 2.5),
      noaux(2, 8, 3, 1),
    ];
    for (const rule of rules) {
      const rows = Array.from({ length: 12 }, () => [...randF32(rand, E, 3)]);
      const bias = rule.correctionBias ? [...randF32(rand, E, 0.3)] : null;
      const moe = { numExperts: E, routing: rule } as MoeConfig;
      const got = route(rows, rule, bias);
      rows.forEach((row, t) => {
        const ref = referenceRoute(row, moe, bias === null ? null : Float32Array.from(bias));
        const order = [...ref.ids.keys()].sort((x, y) => ref.ids[x]! - ref.ids[y]!);
        assert.deepEqual(
          got[t]!.ids,
          order.map((j) => ref.ids[j]!),
          `${rule.scoring} row ${t}`,
        );
        near(
          got[t]!.w,
          order.map((j) => ref.weights[j]!),
          1e-6,
        );
      });
    }
  });

  it("refuses a bias the rule does not declare, and a rule that cannot pick k experts", () => {
    const logits = b.stage(new Float32Array(8), [1, 8], "f32");
    assert.throws(
      () => b.moe.route(logits, softmax(2, true), b.stage(new Float32Array(8), [8], "f32")),
      /correction bias/,
    );
    assert.throws(() => b.moe.route(logits, noaux(2, 3, 1, 1), null), /groups/);
    assert.throws(() => b.moe.route(logits, softmax(9, true), null), /topK 9/);
    b.resetWorkspace();
  });
});

describe("moe.permute, groupedLinear, unpermute", () => {
  const T = 5;
  const H = 6;
  const k = 2;
  const E = 4;
  const ids = [3, 0, 1, 3, 0, 1, 3, 1, 0, 3]; // no expert 2: an empty segment
  const rand = makeRand(11);
  const x = randF32(rand, T * H);

  it("permute groups rows by expert in (token, slot) order; slotToRow points at each copy", () => {
    const p = b.moe.permute(b.stage(x, [T, H], "f32"), b.stage(Int32Array.from(ids), [T, k], "i32"), E);
    assert.deepEqual([...(b.toHost(p.expertOffsets) as Int32Array)], [0, 3, 6, 6, 10]);
    // Expert 0: slots (0,1), (2,0), (4,0); expert 1: (1,0), (2,1), (3,1); expert 3: (0,0), (1,1), (3,0), (4,1).
    assert.deepEqual([...(b.toHost(p.slotToRow) as Int32Array)], [6, 0, 3, 7, 1, 4, 8, 5, 2, 9]);
    const hidden = b.toHost(p.hidden) as Float32Array;
    const rows = b.toHost(p.slotToRow) as Int32Array;
    for (let i = 0; i < T * k; i++) {
      const t = Math.floor(i / k);
      assert.deepEqual(
        [...hidden.subarray(rows[i]! * H, (rows[i]! + 1) * H)],
        [...x.subarray(t * H, (t + 1) * H)],
      );
    }
    b.resetWorkspace();
  });

  it("groupedLinear gives each row linear's bits with its expert's weight; unpermute sums in slot order plus shared", () => {
    const N = 3;
    const wAll = randF32(rand, E * N * H);
    const weight = b.upload(wAll, [E, N, H], "f32");
    const p = b.moe.permute(b.stage(x, [T, H], "f32"), b.stage(Int32Array.from(ids), [T, k], "i32"), E);
    const y = b.toHost(b.moe.groupedLinear(p.hidden, weight, p.expertOffsets)) as Float32Array;
    const hidden = b.toHost(p.hidden) as Float32Array;
    const off = b.toHost(p.expertOffsets) as Int32Array;
    for (let e = 0; e < E; e++) {
      const we = b.upload(wAll.slice(e * N * H, (e + 1) * N * H), [N, H], "f32");
      for (let r = off[e]!; r < off[e + 1]!; r++) {
        const row = b.toHost(b.linear(b.stage(hidden.slice(r * H, (r + 1) * H), [1, H], "f32"), we, null));
        assert.deepEqual([...y.subarray(r * N, (r + 1) * N)], [...row], `expert ${e} row ${r}`);
      }
      b.free(we);
    }
    // unpermute: out[t] = w0 * y[row(t,0)] + w1 * y[row(t,1)] + shared[t].
    const wts = randF32(rand, T * k);
    const shared = randF32(rand, T * N);
    const yT = b.stage(y, [T * k, N], "f32");
    const rows = b.toHost(p.slotToRow) as Int32Array;
    const out = b.toHost(
      b.moe.unpermute(yT, p.slotToRow, b.stage(wts, [T, k], "f32"), b.stage(shared, [T, N], "f32")),
    ) as Float32Array;
    for (let t = 0; t < T; t++) {
      for (let n = 0; n < N; n++) {
        let acc = 0;
        for (let j = 0; j < k; j++)
          acc = Math.fround(acc + Math.fround(wts[t * k + j]! * y[rows[t * k + j]! * N + n]!));
        assert.equal(out[t * N + n], Math.fround(acc + shared[t * N + n]!));
      }
    }
    b.free(weight);
    b.resetWorkspace();
  });

  it("checks ids, offsets and shapes", () => {
    const xs = b.stage(x, [T, H], "f32");
    assert.throws(
      () => b.moe.permute(xs, b.stage(Int32Array.from(ids), [T, k], "i32"), 3),
      /outside \[0, 3\)/,
    );
    const w = b.upload(new Float32Array(E * 2 * H), [E, 2, H], "f32");
    assert.throws(
      () => b.moe.groupedLinear(xs, w, b.stage(Int32Array.from([0, 2, 1, 3, 5]), [E + 1], "i32")),
      /expertOffsets\[2\]/,
    );
    assert.throws(() => b.moe.groupedLinear(xs, w, b.stage(new Int32Array(E), [E], "i32")), /expertOffsets/);
    b.free(w);
    b.resetWorkspace();
  });
});
