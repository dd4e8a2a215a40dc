/**
 * The host sampler on tiny hand-computed distributions: greedy ties, temperature, top-k, top-p,
 * min-p and the inverse-CDF walk with given uniforms; penalties; min_tokens; logprobs and ranks;
 * seeded reproducibility; and agreement with the device-rule path (CpuBackend.sampleOnDevice).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CpuBackend } from "../../../src/backends/cpu/index.js";
import { makeSamplingParams, type SamplingParams } from "../../../src/core/sampling_params.js";
import { Generator, type RandomSource } from "../../../src/worker/generator.js";
import { applyPenalties, Sampler, type SamplerRow } from "../../../src/worker/sampler.js";

/** A random source that returns the given uniforms in order. */
function fixed(...us: number[]): RandomSource {
  return {
    nextUniform: () => {
      const u = us.shift();
      if (u === undefined) throw new Error("no uniform left");
      return u;
    },
  };
}

function row(
  params: Partial<SamplingParams>,
  generator: RandomSource | null,
  extra: Partial<SamplerRow> = {},
): SamplerRow {
  return {
    params: makeSamplingParams(params),
    promptTokenIds: [],
    outputTokenIds: [],
    eosTokenIds: [],
    generator,
    ...extra,
  };
}

/** Logits whose softmax is p (up to f32 rounding): log(p). */
const logitsOf = (p: number[]) => Float32Array.from(p, Math.log);
const P4 = [0.1, 0.2, 0.3, 0.4]; // cumulative in id order: 0.1, 0.3, 0.6, 1.0

/** Samples one row of `logits` with the given settings and uniform. */
function pick(logits: Float32Array, params: Partial<SamplingParams>, u: number): number {
  return new Sampler(0).sample(logits, logits.length, [row(params, fixed(u))]).sampledTokenIds[0]!;
}

describe("greedy", () => {
  it("takes the argmax, the lowest id on ties, for temperature 0 and below 1e-5", () => {
    const l = Float32Array.from([1, 3, 3, 2]);
    assert.equal(pick(l, { temperature: 0 }, 0.99), 1);
    assert.equal(pick(l, { temperature: 9e-6 }, 0.99), 1);
  });

  it("draws no random number", () => {
    const s = new Sampler(0);
    const src = fixed(); // throws if drawn from
    const out = s.sample(Float32Array.from([0, 1]), 2, [row({ temperature: 0 }, src)]);
    assert.deepEqual([...out.sampledTokenIds], [1]);
  });
});

describe("random sampling by the DeviceSamplingRows rule", () => {
  const l = logitsOf(P4);

  it("no filter: walks cumulative p 0.1, 0.3, 0.6, 1.0 in ascending id", () => {
    assert.deepEqual(
      [0.05, 0.25, 0.5, 0.95].map((u) => pick(l, { temperature: 1 }, u)),
      [0, 1, 2, 3],
    );
  });

  it("temperature 2 on logits 2*log(p) gives back p", () => {
    const l2 = Float32Array.from(P4, (p) => 2 * Math.log(p));
    assert.deepEqual(
      [0.05, 0.25, 0.5, 0.95].map((u) => pick(l2, { temperature: 2 }, u)),
      [0, 1, 2, 3],
    );
  });

  it("top-k 2 keeps {2, 3} (mass 0.7): target u * 0.7", () => {
    assert.equal(pick(l, { temperature: 1, topK: 2 }, 0.2), 2); // 0.14 < 0.3
    assert.equal(pick(l, { temperature: 1, topK: 2 }, 0.5), 3); // 0.35 > 0.3
  });

  it("top-k keeps every token tied at the k-th probability", () => {
    const flat = Float32Array.from([0.5, 0.5, 0.5, 0.5]);
    assert.equal(pick(flat, { temperature: 1, topK: 1 }, 0.9), 3); // all four kept
    assert.equal(pick(flat, { temperature: 1, topK: 1 }, 0.3), 1);
  });

  it("top-p keeps the largest tokens holding at least topP of the mass", () => {
    assert.equal(pick(l, { temperature: 1, topP: 0.35 }, 0.01), 3); // {3}
    assert.equal(pick(l, { temperature: 1, topP: 0.6 }, 0.2), 2); // {2, 3}: 0.14 < 0.3
    // topP 0.75: 0.4 + 0.3 < 0.75, + 0.2 >= 0.75 -> {1, 2, 3}, mass 0.9; u 0.1 -> 0.09 < 0.2.
    assert.equal(pick(l, { temperature: 1, topP: 0.75 }, 0.1), 1);
    assert.equal(pick(l, { temperature: 1, topP: 0.75 }, 0.3), 2); // 0.27 < 0.5
  });

  it("min-p keeps p >= minP * max p", () => {
    assert.equal(pick(l, { temperature: 1, minP: 0.6 }, 0.2), 2); // >= 0.24: {2, 3}
    assert.equal(pick(l, { temperature: 1, minP: 0.3 }, 0.1), 1); // >= 0.12: {1, 2, 3}
  });

  it("filters combine as the max of their thresholds", () => {
    // top-k 3 keeps {1, 2, 3}, min-p 0.6 keeps {2, 3}: together {2, 3}.
    assert.equal(pick(l, { temperature: 1, topK: 3, minP: 0.6 }, 0.2), 2);
    assert.equal(pick(l, { temperature: 1, topK: 3, minP: 0.6 }, 0.9), 3);
  });
});

describe("penalties and min_tokens", () => {
  it("repetition over prompt + output, then frequency and presence over output counts", () => {
    const logits = Float32Array.from([2, -1, 0.5, 1, -2]);
    const r = row({ repetitionPenalty: 2, frequencyPenalty: 0.5, presencePenalty: 0.25 }, null, {
      promptTokenIds: [0, 1],
      outputTokenIds: [2, 2, 4],
    });
    applyPenalties(logits, r);
    // rep: 2/2 = 1, -1*2 = -2, 0.5/2 = 0.25, id 3 unseen, -2*2 = -4;
    // id 2: 0.25 - 0.5*2 - 0.25 = -1; id 4: -4 - 0.5*1 - 0.25 = -4.75.
    assert.deepEqual([...logits], [1, -2, -1, 1, -4.75]);
  });

  it("the penalised logits decide the greedy token", () => {
    const s = new Sampler(0);
    const logits = Float32Array.from([2, -1, 0.5, 1.5, -2]);
    const out = s.sample(logits, 5, [
      row({ temperature: 0, repetitionPenalty: 4 }, null, { promptTokenIds: [0] }),
    ]);
    assert.deepEqual([...out.sampledTokenIds], [3]); // 2 / 4 = 0.5 < 1.5
    assert.deepEqual([...logits], [2, -1, 0.5, 1.5, -2]); // input untouched
  });

  it("a penalty that overflows a logit to +inf gives that token all the mass, never an id outside the vocabulary", () => {
    // repetition_penalty 1e-39 (valid: > 0) divides the prompt token 1's logit 2 by 1e-39: 2e39
    // is +inf in f32. The softmax of a row holding +inf is NaN (inf - inf); the sampler must
    // still return a token of the vocabulary: the +inf one, which holds all the mass.
    const logits = Float32Array.from([1, 2, 3, 0]);
    const s = new Sampler(0);
    const r = row({ temperature: 1, repetitionPenalty: 1e-39 }, fixed(0.5), { promptTokenIds: [1] });
    assert.deepEqual([...s.sample(logits, 4, [r]).sampledTokenIds], [1]);
    // Two +inf tokens (prompt tokens 0 and 1): the lower id, as greedy ties go.
    const two = row({ temperature: 1, repetitionPenalty: 1e-39 }, fixed(0.5), { promptTokenIds: [1, 0] });
    assert.deepEqual([...s.sample(logits, 4, [two]).sampledTokenIds], [0]);
  });

  it("min_tokens blocks EOS and stop token ids until enough tokens exist (not with ignoreEos for EOS)", () => {
    const logits = Float32Array.from([5, 4, 1, 3]);
    const s = new Sampler(0);
    const base = { temperature: 0, minTokens: 2, stopTokenIds: [1] };
    const early = row(base, null, { eosTokenIds: [0], outputTokenIds: [2] });
    assert.deepEqual([...s.sample(logits, 4, [early]).sampledTokenIds], [3]);
    const ignoreEos = row({ ...base, ignoreEos: true }, null, { eosTokenIds: [0], outputTokenIds: [2] });
    assert.deepEqual([...s.sample(logits, 4, [ignoreEos]).sampledTokenIds], [0]);
    const late = row(base, null, { eosTokenIds: [0], outputTokenIds: [2, 2] });
    assert.deepEqual([...s.sample(logits, 4, [late]).sampledTokenIds], [0]);
  });
});

describe("logprobs", () => {
  // p = [1/9, 2/9, 2/9, 4/9].
  const l = Float32Array.from([0, Math.log(2), Math.log(2), Math.log(4)]);
  const lp = [1 / 9, 2 / 9, 2 / 9, 4 / 9].map(Math.log);

  it("greedy: the sampled token's raw logprob, rank 1, and the top-n with ties lower id first", () => {
    const out = new Sampler(0).sample(l, 4, [row({ temperature: 0, logprobs: 2 }, null)]);
    const r = out.logprobs[0]!;
    assert.equal(out.sampledTokenIds[0], 3);
    assert.ok(Math.abs(r.sampledLogprob - lp[3]!) < 1e-6);
    assert.equal(r.sampledRank, 1);
    assert.deepEqual(r.topTokenIds, [3, 1]);
    assert.ok(Math.abs(r.topLogprobs[0]! - lp[3]!) < 1e-6);
    assert.ok(Math.abs(r.topLogprobs[1]! - lp[1]!) < 1e-6);
  });

  it("ranks count tokens with a logprob >= the sampled one (ties ahead); raw logits, before temperature", () => {
    // temperature 0.5 sharpens to p ~ [1, 4, 4, 16] / 25; u = 0.3 -> target 7.5/25: token 2.
    const out = new Sampler(0).sample(l, 4, [row({ temperature: 0.5, logprobs: 0 }, fixed(0.3))]);
    const r = out.logprobs[0]!;
    assert.equal(out.sampledTokenIds[0], 2);
    assert.equal(r.sampledRank, 3);
    assert.ok(Math.abs(r.sampledLogprob - lp[2]!) < 1e-6);
    assert.deepEqual(r.topTokenIds, []);
    assert.equal(new Sampler(0).sample(l, 4, [row({ temperature: 0 }, null)]).logprobs[0], null);
  });
});

describe("generators and device rows", () => {
  it("a seeded request reproduces its tokens; unseeded rows draw from the engine generator in row order", () => {
    const l = logitsOf(P4);
    const l3 = Float32Array.from([...l, ...l, ...l]); // [3, 4]: the same row three times
    const run = () => {
      const s = new Sampler(42);
      const seeded = new Generator(7);
      const tokens: number[] = [];
      for (let i = 0; i < 20; i++) {
        const rows = [
          row({ temperature: 1 }, null),
          row({ temperature: 0 }, null),
          row({ temperature: 1 }, seeded),
        ];
        tokens.push(...s.sample(l3, 4, rows).sampledTokenIds);
      }
      return tokens;
    };
    const a = run();
    assert.deepEqual(run(), a);
    // Row 2 alone, with the same seed, gives the same tokens as inside the batch.
    const alone = new Sampler(999);
    const g = new Generator(7);
    const solo = Array.from(
      { length: 20 },
      () => alone.sample(l, 4, [row({ temperature: 1 }, g)]).sampledTokenIds[0]!,
    );
    assert.deepEqual(
      a.filter((_, i) => i % 3 === 2),
      solo,
    );
    // Row 0 uses the engine generator: its uniforms are Generator(42)'s, one per step.
    const eng = new Generator(42);
    const expect0 = Array.from({ length: 20 }, () => {
      const u = eng.nextUniform();
      return u < 0.1 ? 0 : u < 0.3 ? 1 : u < 0.6 ? 2 : 3;
    });
    assert.deepEqual(
      a.filter((_, i) => i % 3 === 0),
      expect0,
    );
  });

  it("deviceRows + CpuBackend.sampleOnDevice choose the host sampler's tokens", () => {
    const V = 64;
    const B = 5;
    const g = new Generator(3);
    const logits = Float32Array.from({ length: B * V }, () => (g.nextUniform() - 0.5) * 8);
    const params: Partial<SamplingParams>[] = [
      { temperature: 0 },
      { temperature: 0.7 },
      { temperature: 1.2, topK: 5 },
      { temperature: 1, topP: 0.8, topK: -1 },
      { temperature: 0.9, minP: 0.1, topK: 20, topP: 0.9 },
    ];
    for (let trial = 0; trial < 10; trial++) {
      const rows = (seedBase: number) =>
        params.map((p, i) => row(p, i === 3 ? null : new Generator(seedBase + i)));
      const host = new Sampler(11).sample(logits, V, rows(trial * 10));
      const backend = new CpuBackend({ numThreads: 1 });
      const dr = new Sampler(11).deviceRows(rows(trial * 10));
      assert.deepEqual([...dr.temperature], [0, 0.7, 1.2, 1, 0.9].map(Math.fround));
      assert.deepEqual([...dr.topK], [0, 0, 5, 0, 20]);
      const dev = backend.sampleOnDevice(backend.stage(logits, [B, V], "f32"), dr);
      assert.deepEqual([...dev], [...host.sampledTokenIds]);
      backend.dispose();
    }
  });
});
