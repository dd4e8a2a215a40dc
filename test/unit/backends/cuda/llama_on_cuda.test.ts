/**
 * LlamaForCausalLM driven through the CUDA backend's TS layer on the host-memory addon double:
 * every op the model issues passes the CUDA ops' shape and dtype checks, launches the expected
 * kernels in order, and a decode step can be captured and replayed. (Numerics are checked on the
 * GPU machine by test/native/model.test.ts.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DensePagedAttention } from "../../../../src/attention/backend.js";
import type { AttentionMetadata, HostTensorData, Tensor } from "../../../../src/backends/backend.js";
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import type { ModelConfig } from "../../../../src/config/model_config.js";
import { LlamaForCausalLM } from "../../../../src/models/llama.js";
import type { WeightSource } from "../../../../src/models/weights.js";
import { createFakeAddon } from "./fake_addon.js";

const config: ModelConfig = {
  architecture: "Qwen3ForCausalLM",
  family: "qwen3",
  hiddenSize: 64,
  intermediateSize: 96,
  numHiddenLayers: 2,
  numAttentionHeads: 4,
  numKeyValueHeads: 2,
  headDim: 32,
  vocabSize: 50,
  rmsNormEps: 1e-6,
  maxPositionEmbeddings: 64,
  tieWordEmbeddings: true,
  attentionBias: true,
  oProjBias: false,
  mlpBias: false,
  qkNorm: true,
  rope: {
    type: "default",
    theta: 10000,
    factor: 1,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: 64,
  },
  dtype: "bfloat16",
  bosTokenId: null,
  eosTokenIds: [],
};

/** Zero-filled f32 weights of the right shapes (values do not matter on the double). */
function weights(): WeightSource {
  const {
    hiddenSize: H,
    intermediateSize: I,
    headDim: D,
    numAttentionHeads: Hq,
    numKeyValueHeads: Hkv,
  } = config;
  const shapes = new Map<string, number[]>([
    ["model.embed_tokens.weight", [config.vocabSize, H]],
    ["model.norm.weight", [H]],
  ]);
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const p = `model.layers.${l}`;
    for (const [n, s] of [
      ["input_layernorm.weight", [H]],
      ["post_attention_layernorm.weight", [H]],
      ["self_attn.q_proj.weight", [Hq * D, H]],
      ["self_attn.k_proj.weight", [Hkv * D, H]],
      ["self_attn.v_proj.weight", [Hkv * D, H]],
      ["self_attn.q_proj.bias", [Hq * D]],
      ["self_attn.k_proj.bias", [Hkv * D]],
      ["self_attn.v_proj.bias", [Hkv * D]],
      ["self_attn.q_norm.weight", [D]],
      ["self_attn.k_norm.weight", [D]],
      ["self_attn.o_proj.weight", [H, Hq * D]],
      ["mlp.gate_proj.weight", [I, H]],
      ["mlp.up_proj.weight", [I, H]],
      ["mlp.down_proj.weight", [H, I]],
    ] as const) {
      shapes.set(`${p}.${n}`, [...s]);
    }
  }
  return {
    names: [...shapes.keys()],
    has: (n) => shapes.has(n),
    get: (n): HostTensorData => {
      const shape = shapes.get(n)!;
      return { data: new Float32Array(shape.reduce((a, b) => a * b, 1)), dtype: "f32", shape };
    },
    close: () => {},
  };
}

describe("LlamaForCausalLM on the CUDA backend's TS layer (fake addon)", () => {
  const fake = createFakeAddon();
  const be = new CudaBackend({ addon: fake, workspaceBytes: 4 << 20, stagingBytes: 4096 });
  const model = LlamaForCausalLM.load(config, weights(), be, 64);
  const attention = new DensePagedAttention(be, model.layout, 16);
  const kvCaches = be.allocateKvCache({
    numLayers: 2,
    numBlocks: 8,
    blockSize: 16,
    numKvHeads: 2,
    headDim: 32,
    dtype: "bf16",
  });
  const table = Int32Array.from([3, 1, 0, 0]);

  function meta(T: number, seqLen: number, persistent: boolean): AttentionMetadata {
    const put = (d: Int32Array, s: number[]) => (persistent ? be.upload(d, s, "i32") : be.stage(d, s, "i32"));
    const positions = Int32Array.from({ length: T }, (_, t) => seqLen - T + t);
    const host = {
      queryStartLoc: Int32Array.from([0, T]),
      seqLens: Int32Array.from([seqLen]),
      blockTables: table,
      maxBlocksPerReq: 4,
      slotMapping: Int32Array.from(positions, (p) => table[Math.floor(p / 16)]! * 16 + (p % 16)),
      positions,
    };
    return {
      numReqs: 1,
      numTokens: T,
      queryStartLoc: put(host.queryStartLoc, [2]),
      seqLens: put(host.seqLens, [1]),
      blockTables: put(table, [1, 4]),
      slotMapping: put(host.slotMapping, [T]),
      maxQueryLen: T,
      maxSeqLen: seqLen,
      host,
    };
  }

  it("a prefill step issues the per-layer kernel sequence and returns f32 logits [1, V]", () => {
    be.denseGemvMaxTokens = 0; // cuBLAS for every linear (the path above the skinny GEMM's limit)
    fake.calls.length = 0;
    be.resetWorkspace();
    const m = meta(5, 5, false);
    const ids = be.stage(Int32Array.from([1, 2, 3, 4, 5]), [5], "i32");
    const pos = be.stage(m.host.positions, [5], "i32");
    const logits = model.forward(
      ids,
      pos,
      { meta: m, attention, kvCaches },
      be.stage(Int32Array.from([4]), [1], "i32"),
    );
    assert.deepEqual(logits.shape, [1, config.vocabSize]);
    assert.equal(logits.dtype, "f32");
    const perLayer = [
      "linear",
      "qkNormRotaryEmbedding",
      "reshapeAndCache",
      "pagedPrefillAttention",
      "linear",
      "fusedAddRmsNorm",
      "linear",
      "siluAndMul",
      "linear",
    ];
    const expected = ["rmsNorm", ...perLayer, "fusedAddRmsNorm", ...perLayer, "fusedAddRmsNorm", "linear"];
    assert.deepEqual(
      fake.calls.map((c) => c.fn),
      expected,
    );
    const lmHead = fake.calls.at(-1)!;
    assert.deepEqual(
      lmHead.args.slice(5, 11),
      [1, config.vocabSize, config.hiddenSize, 1, 0, 0],
      "lm_head: T=1, f32 out, no bias",
    );
    be.denseGemvMaxTokens = 8;
  });

  it("with T <= denseGemvMaxTokens every linear is the skinny GEMM and gate_up fuses silu_and_mul", () => {
    assert.equal(be.denseGemvMaxTokens, 8, "the default limit");
    fake.calls.length = 0;
    be.resetWorkspace();
    const m = meta(5, 5, false);
    const ids = be.stage(Int32Array.from([1, 2, 3, 4, 5]), [5], "i32");
    const pos = be.stage(m.host.positions, [5], "i32");
    model.forward(ids, pos, { meta: m, attention, kvCaches }, be.stage(Int32Array.from([4]), [1], "i32"));
    const perLayer = [
      "denseGemv",
      "qkNormRotaryEmbedding",
      "reshapeAndCache",
      "pagedPrefillAttention",
      "denseGemv",
      "fusedAddRmsNorm",
      "denseGemv",
      "denseGemv",
    ];
    const expected = ["rmsNorm", ...perLayer, "fusedAddRmsNorm", ...perLayer, "fusedAddRmsNorm", "denseGemv"];
    assert.deepEqual(
      fake.calls.map((c) => c.fn),
      expected,
    );
    const epilogues = fake.calls.filter((c) => c.fn === "denseGemv").map((c) => c.args[11]);
    assert.deepEqual(epilogues, [0, 0, 1, 0, 0, 0, 1, 0, 0], "gate_up: the silu_and_mul epilogue (1)");
    const qkv = fake.calls[1]!;
    const { numAttentionHeads: Hq, numKeyValueHeads: Hkv, headDim: D, hiddenSize: H } = config;
    assert.deepEqual(
      qkv.args.slice(5, 11),
      [5, (Hq + 2 * Hkv) * D, H, 1, 1, 1],
      "qkv: T=5, N=(Hq+2Hkv)D, K=H, bf16 in and out, bf16 bias",
    );
    assert.deepEqual(
      fake.calls.at(-1)!.args.slice(5, 12),
      [1, config.vocabSize, H, 1, 0, 0, 0],
      "lm_head: f32 out",
    );
  });

  it("a decode step over persistent inputs is captured once and replayed", () => {
    const m = meta(1, 6, true);
    const ids = be.upload(Int32Array.from([7]), [1], "i32");
    const pos = be.upload(Int32Array.from([5]), [1], "i32");
    const last = be.upload(Int32Array.from([0]), [1], "i32");
    const forward = () => model.forward(ids, pos, { meta: m, attention, kvCaches }, last);
    be.resetWorkspace();
    forward();
    assert.equal(
      fake.calls.filter((c) => c.fn === "pagedDecodeAttention").length,
      2,
      "decode kernel for T = 1",
    );
    be.resetWorkspace();
    let out: Tensor | null = null;
    const g = be.graphs.capture(() => {
      out = forward();
    });
    be.resetWorkspace();
    be.writeTensor(ids, Int32Array.from([9]));
    be.graphs.replay(g);
    assert.equal(be.toHost(out!).length, config.vocabSize);
    be.graphs.dispose(g);
  });
});
