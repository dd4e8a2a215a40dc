/**
 * The TS layer of the CUDA backend's MoE ops (src/backends/cuda/moe_ops.ts) on the host-memory
 * double of the addon: what reaches the launchers (argument order, flags, scratch for large
 * batches, output shapes) and the one-sentence errors on bad shapes and rules. The kernels
 * themselves are checked by native/tests/moe_test.cu (emulator and GPU) and test/native/moe.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DensePagedAttention } from "../../../../src/attention/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { DEFAULT_SMALL_BATCH_MAX_TOKENS } from "../../../../src/backends/cuda/moe_ops.js";
import { parseModelConfig } from "../../../../src/config/model_config.js";
import type { MoeRoutingRule } from "../../../../src/config/moe_config.js";
import { DummyWeights } from "../../../../src/models/dummy.js";
import { LlamaForCausalLM } from "../../../../src/models/llama.js";
import { stageAttentionMetadata } from "../../../../src/worker/input_batch.js";
import { createFakeAddon } from "./fake_addon.js";

function setup(moeFusedActivation = true) {
  const fake = createFakeAddon();
  const be = new CudaBackend({
    addon: fake,
    workspaceBytes: 8 << 20,
    stagingBytes: 1024,
    moeFusedActivation,
    denseGemvMaxTokens: 0, // the dense layers' linears through cuBLAS: the sequences below name "linear"
  });
  return { be, fake, last: () => fake.calls.at(-1)! };
}

/** A backend on the fake addon with the given small-batch limit. */
function setupSmall(moeSmallBatchMaxTokens: number) {
  const fake = createFakeAddon();
  return {
    be: new CudaBackend({ addon: fake, workspaceBytes: 8 << 20, stagingBytes: 1024, moeSmallBatchMaxTokens }),
  };
}

const RULE: MoeRoutingRule = {
  scoring: "sigmoid",
  topK: 8,
  renormalize: true,
  numGroups: 8,
  topkGroup: 4,
  routedScalingFactor: 2.5,
  correctionBias: true,
};

describe("CUDA Backend.moe marshalling (fake addon)", () => {
  it("route passes the rule as codes and flags; ids and weights are [T, k]", () => {
    const { be, last } = setup();
    const logits = be.stage(new Float32Array(3 * 256), [3, 256], "f32");
    const bias = be.upload(new Float32Array(256), [256], "f32");
    const r = be.moe.route(logits, RULE, bias);
    assert.deepEqual(
      [r.topkIds.shape, r.topkIds.dtype, r.topkWeights.shape, r.topkWeights.dtype],
      [[3, 8], "i32", [3, 8], "f32"],
    );
    const c = last();
    assert.equal(c.fn, "moeRoute");
    assert.deepEqual(c.args.slice(5), [3, 256, 8, 1, 1, 8, 4, 2.5]);
    assert.throws(() => be.moe.route(logits, RULE, null), /the rule needs a correction bias/);
    assert.throws(
      () => be.moe.route(logits, { ...RULE, topkGroup: 9 }, bias),
      /cannot pick 8 of 256 experts/,
    );
    const wide = be.stage(new Float32Array(1024), [1, 1024], "f32");
    assert.throws(
      () => be.moe.route(wide, { ...RULE, numGroups: 1, topkGroup: 1, correctionBias: false }, null),
      /at most 512 experts/,
    );
    assert.throws(
      () => be.moe.route(be.stage(new Float32Array(8), [2, 4], "bf16"), RULE, bias),
      /expected dtype f32/,
    );
  });

  it("permute: no scratch up to 4096 slots, workspace scratch beyond; outputs [T*k, H], [E + 1], [T, k]", () => {
    const { be, last } = setup();
    const small = be.moe.permute(
      be.stage(new Float32Array(4 * 16), [4, 16], "bf16"),
      be.stage(new Int32Array(4 * 8), [4, 8], "i32"),
      128,
    );
    assert.deepEqual(
      [small.hidden.shape, small.expertOffsets.shape, small.slotToRow.shape],
      [[32, 16], [129], [4, 8]],
    );
    assert.deepEqual([last().args[6], last().args[7], last().args.slice(8)], [0, 0, [4, 32, 8, 128]]);
    be.moe.permute(
      be.stage(new Float32Array(600 * 8), [600, 8], "bf16"),
      be.stage(new Int32Array(4800), [600, 8], "i32"),
      128,
    );
    assert.ok(last().args[6]! > 0 && last().args[7] === 128 * 4 * 64, "scratch for 4800 slots");
    assert.throws(
      () =>
        be.moe.permute(
          be.stage(new Float32Array(8), [2, 4], "bf16"),
          be.stage(new Int32Array(6), [3, 2], "i32"),
          8,
        ),
      /expected shape \[2, \*\]/,
    );
  });

  it("groupedLinear and the fused gate_up + silu_and_mul pass [P, K] x [E, N, K]; the fusion can be turned off", () => {
    const { be, last } = setup();
    const x = be.stage(new Float32Array(10 * 64), [10, 64], "bf16");
    const w = be.upload(new Float32Array(4 * 32 * 64), [4, 32, 64], "bf16");
    const off = be.stage(new Int32Array(5), [5], "i32");
    assert.deepEqual(be.moe.groupedLinear(x, w, off).shape, [10, 32]);
    assert.deepEqual(last().args.slice(5), [10, 4, 32, 64, 0]);
    assert.deepEqual(be.moe.groupedGateUpSilu!(x, w, off).shape, [10, 16]);
    assert.deepEqual([last().fn, last().args.at(-1)], ["moeGroupedGemm", 1]);
    assert.throws(
      () => be.moe.groupedLinear(x, w, be.stage(new Int32Array(4), [4], "i32")),
      /expected shape \[5\]/,
    );
    assert.throws(
      () => be.moe.groupedLinear(x, be.upload(new Float32Array(4 * 12 * 64), [4, 12, 64], "bf16"), off),
      /needs K % 8 == 0 and N % 8 == 0/,
    );
    assert.throws(
      () => be.moe.groupedLinear(be.stage(new Float32Array(640), [10, 64], "f32"), w, off),
      /expected dtype bf16/,
    );
    assert.equal(setup(false).be.moe.groupedGateUpSilu, undefined);
  });

  it("unpermute: y [P, H], rows and weights [T, k], optional shared [T, H] -> [T, H]", () => {
    const { be, last } = setup();
    const y = be.stage(new Float32Array(12 * 16), [12, 16], "bf16");
    const rows = be.stage(new Int32Array(12), [6, 2], "i32");
    const w = be.stage(new Float32Array(12), [6, 2], "f32");
    assert.deepEqual(be.moe.unpermute(y, rows, w, null).shape, [6, 16]);
    assert.deepEqual([last().args[4], last().args.slice(6)], [0, [6, 2, 16, 12, 1]]);
    const shared = be.stage(new Float32Array(6 * 16), [6, 16], "bf16");
    be.moe.unpermute(y, rows, w, shared);
    assert.ok(last().args[4]! > 0);
    assert.throws(
      () => be.moe.unpermute(y, rows, w, be.stage(new Float32Array(96), [6, 16], "f32")),
      /expected dtype bf16/,
    );
  });

  it("smallBatch: prepare() takes bf16 blocks with dims % 8 == 0, forward passes the dims and checks T", () => {
    const { be, fake } = setup();
    const sb = be.moe.smallBatch!;
    assert.equal(sb.maxTokens, DEFAULT_SMALL_BATCH_MAX_TOKENS);
    const [E, H, I] = [16, 64, 32];
    const w = {
      router: be.upload(new Float32Array(E * H), [E, H], "bf16"),
      correctionBias: be.upload(new Float32Array(E), [E], "f32"),
      gateUp: be.upload(new Float32Array(E * 2 * I * H), [E, 2 * I, H], "bf16"),
      down: be.upload(new Float32Array(E * H * I), [E, H, I], "bf16"),
      shared: {
        gateUp: be.upload(new Float32Array(2 * 2 * I * H), [4 * I, H], "bf16"),
        down: be.upload(new Float32Array(H * 2 * I), [H, 2 * I], "bf16"),
      },
    };
    const rule = { ...RULE, numGroups: 4, topkGroup: 2, topK: 4 };
    assert.throws(
      () => sb.forward(be.stage(new Float32Array(H), [1, H], "bf16"), w, rule),
      /prepare\(\) was not called/,
    );
    assert.equal(sb.prepare(w, rule), true);
    assert.equal(sb.prepare({ ...w, correctionBias: null }, rule), false, "the rule needs the bias");
    assert.equal(
      sb.prepare({ ...w, router: be.upload(new Float32Array(E * H), [E, H], "f32") }, rule),
      false,
      "f32 router",
    );
    const odd = be.upload(new Float32Array(E * 2 * 12 * H), [E, 24, H], "bf16");
    assert.equal(sb.prepare({ ...w, gateUp: odd }, rule), false, "I = 12");
    fake.calls.length = 0;
    const out = sb.forward(be.stage(new Float32Array(3 * H), [3, H], "bf16"), w, rule);
    assert.deepEqual(out.shape, [3, H]);
    assert.deepEqual(
      fake.calls.map((c) => c.fn),
      ["moeDecodeRoute", "moeDecodeGateUp", "moeDecodeDown"],
    );
    assert.deepEqual(fake.calls[0]!.args.slice(9), [3, H, E, 4, 1, 1, 4, 2, 2.5]);
    assert.deepEqual(fake.calls[1]!.args.slice(6), [3, 4, E, H, I, 2 * I]);
    assert.deepEqual(fake.calls[2]!.args.slice(7), [3, 4, E, H, I, 2 * I]);
    assert.throws(
      () => {
        const T = DEFAULT_SMALL_BATCH_MAX_TOKENS + 1;
        sb.forward(be.stage(new Float32Array(T * H), [T, H], "bf16"), w, rule);
      },
      new RegExp(
        `T = ${DEFAULT_SMALL_BATCH_MAX_TOKENS + 1} is outside \\[1, ${DEFAULT_SMALL_BATCH_MAX_TOKENS}\\]`,
      ),
    );
    assert.equal(setupSmall(0).be.moe.smallBatch, undefined, "moeSmallBatchMaxTokens: 0");
  });
});

describe("a GLM-4.5-style MoE model on the CUDA backend's TS layer (fake addon)", () => {
  // tiny-glm4-moe's config (../shared/models): partial rotary 0.5, q/k norm, attention bias, one
  // dense layer, sigmoid routing with a correction bias, one shared expert.
  const config = parseModelConfig({
    architectures: ["Glm4MoeForCausalLM"],
    model_type: "glm4_moe",
    attention_bias: true,
    first_k_dense_replace: 1,
    head_dim: 32,
    hidden_size: 128,
    intermediate_size: 256,
    max_position_embeddings: 4096,
    moe_intermediate_size: 64,
    n_group: 1,
    n_routed_experts: 8,
    n_shared_experts: 1,
    norm_topk_prob: true,
    num_attention_heads: 4,
    num_experts_per_tok: 2,
    num_hidden_layers: 2,
    num_key_value_heads: 2,
    partial_rotary_factor: 0.5,
    rms_norm_eps: 1e-5,
    rope_parameters: { partial_rotary_factor: 0.5, rope_theta: 10000.0, rope_type: "default" },
    routed_scaling_factor: 1.0,
    tie_word_embeddings: false,
    topk_group: 1,
    use_qk_norm: true,
    vocab_size: 64,
    dtype: "bfloat16",
  });

  /** Loads the model on the fake addon and runs one forward over T prompt tokens; the fake's calls. */
  const forwardCalls = (T: number) => {
    const { be, fake } = setup();
    const model = LlamaForCausalLM.load(config, new DummyWeights(config, { seed: 1 }), be, 64);
    const attention = new DensePagedAttention(be, model.layout, 16);
    const kvCaches = be.allocateKvCache({
      numLayers: 2,
      numBlocks: 4,
      blockSize: 16,
      numKvHeads: 2,
      headDim: 32,
      dtype: "bf16",
    });
    const positions = Int32Array.from({ length: T }, (_, i) => i);
    const meta = stageAttentionMetadata(be, {
      queryStartLoc: Int32Array.from([0, T]),
      seqLens: Int32Array.from([T]),
      blockTables: Int32Array.from([2]),
      maxBlocksPerReq: 1,
      slotMapping: Int32Array.from(positions, (p) => 32 + p),
      positions,
      maxQueryLen: T,
      maxSeqLen: T,
    });
    fake.calls.length = 0;
    model.forward(
      be.stage(positions, [T], "i32"),
      be.stage(positions, [T], "i32"),
      { meta, attention, kvCaches },
      null,
    );
    return fake.calls;
  };
  const attn = [
    "linear",
    "qkNormRotaryEmbedding",
    "reshapeAndCache",
    "pagedPrefillAttention",
    "linear",
    "fusedAddRmsNorm",
  ];
  const denseMlp = ["linear", "siluAndMul", "linear"];

  it("a prefill (T > 8) issues the dense layer, then router, route, permute, fused gate_up, down, shared expert, unpermute", () => {
    const T = 12;
    const calls = forwardCalls(T);
    const fns = calls.map((c) => c.fn);
    const moeMlp = [
      "linear",
      "moeRoute",
      "moePermute",
      "moeGroupedGemm",
      "moeGroupedGemm",
      ...denseMlp,
      "moeUnpermute",
    ];
    assert.deepEqual(fns.slice(fns.indexOf("rmsNorm")), [
      "rmsNorm",
      ...attn,
      ...denseMlp,
      "fusedAddRmsNorm",
      ...attn,
      ...moeMlp,
      "fusedAddRmsNorm", // final norm (no logits asked)
    ]);
    const rope = calls.find((c) => c.fn === "qkNormRotaryEmbedding")!;
    // T, row width, q heads, kv heads, head_dim, rotary dims
    assert.deepEqual(rope.args.slice(6, 9), [12, (4 + 2 * 2) * 32, 4]);
    assert.deepEqual(rope.args.slice(9, 12), [2, 32, 16], "kv heads, head_dim 32, rotary dims 16");
    const route = calls.find((c) => c.fn === "moeRoute")!;
    assert.ok(route.args[2]! > 0, "correction bias passed");
    assert.deepEqual(route.args.slice(5), [T, 8, 2, 1, 1, 1, 1, 1]);
    const gemms = calls.filter((c) => c.fn === "moeGroupedGemm").map((c) => c.args.slice(5));
    assert.deepEqual(gemms, [
      [T * 2, 8, 128, 128, 1],
      [T * 2, 8, 128, 64, 0],
    ]);
  });

  it("a batch of up to DEFAULT_SMALL_BATCH_MAX_TOKENS tokens takes the small-batch path: three launches with the shared expert folded in", () => {
    const T = 3;
    const calls = forwardCalls(T);
    const fns = calls.map((c) => c.fn);
    assert.deepEqual(fns.slice(fns.indexOf("rmsNorm")), [
      "rmsNorm",
      ...attn,
      ...denseMlp,
      "fusedAddRmsNorm",
      ...attn,
      "moeDecodeRoute",
      "moeDecodeGateUp",
      "moeDecodeDown",
      "fusedAddRmsNorm",
    ]);
    const route = calls.find((c) => c.fn === "moeDecodeRoute")!;
    assert.ok(route.args[3]! > 0 && route.args[8]! > 0, "correction bias and sync buffer passed");
    // T, H, E, k, sigmoid, renormalize, groups, topkGroup, scaling
    assert.deepEqual(route.args.slice(9), [T, 128, 8, 2, 1, 1, 1, 1, 1]);
    const gateUp = calls.find((c) => c.fn === "moeDecodeGateUp")!;
    assert.ok(gateUp.args[3]! > 0, "shared gate_up passed");
    assert.deepEqual(gateUp.args.slice(6), [T, 2, 8, 128, 64, 64]);
    const down = calls.find((c) => c.fn === "moeDecodeDown")!;
    assert.ok(down.args[3]! > 0, "shared down passed");
    assert.ok(
      down.args[4] === route.args[5] && down.args[5] === route.args[6],
      "the route's ids and weights",
    );
    assert.deepEqual(down.args.slice(7), [T, 2, 8, 128, 64, 64]);
  });
});
