/**
 * A short but complete op sequence on the CUDA backend, for `compute-sanitizer --tool memcheck`
 * (scripts/gpu/check.sh): a 2-layer Llama-shaped model with random weights and every optional
 * part switched on (q/k/v, o and MLP biases, Qwen3 q/k norm, untied lm_head), run through
 * LlamaForCausalLM for a batched prefill, a decode step and a mixed prefill+decode step, with
 * device sampling; once with cuBLASLt and once with cublasGemmEx; then a decode step captured as
 * a CUDA graph and replayed.
 *
 * The first two passes use a non-caching allocator and one allocation per op output
 * (exactWorkspace), so memcheck sees the exact bounds of every tensor.
 * Run (compiled): node dist/scripts/gpu/op_sequence.js   -> prints "op-sequence: ok ..." and exits 0.
 */
import type { AttentionMetadata, HostTensorData, Tensor } from "../../src/backends/backend.js";
import { CudaBackend, type CudaBackendOptions } from "../../src/backends/cuda/cuda_backend.js";
import { f32ToBf16Bits } from "../../src/backends/cuda/half.js";
import { makeEngineArgs } from "../../src/config/engine_args.js";
import type { ModelConfig } from "../../src/config/model_config.js";
import { LlamaForCausalLM } from "../../src/models/llama.js";
import type { WeightSource } from "../../src/models/weights.js";
import { stageAttentionMetadata } from "../../src/worker/input_batch.js";
import { createKVCacheSetup } from "../../src/worker/kv_cache_registry.js";

const BLOCK = 16;
const MAX_POS = 256;
const NUM_BLOCKS = 64;
const MAX_BLOCKS = MAX_POS / BLOCK;

const config: ModelConfig = {
  architecture: "LlamaForCausalLM",
  family: "llama",
  hiddenSize: 384,
  intermediateSize: 1024,
  numHiddenLayers: 2,
  numAttentionHeads: 6,
  numKeyValueHeads: 2,
  headDim: 128,
  vocabSize: 3000,
  rmsNormEps: 1e-5,
  maxPositionEmbeddings: MAX_POS,
  tieWordEmbeddings: false,
  attentionBias: true,
  oProjBias: true,
  mlpBias: true,
  qkNorm: true,
  rope: {
    type: "default",
    theta: 10000,
    factor: 1,
    lowFreqFactor: 1,
    highFreqFactor: 4,
    originalMaxPositionEmbeddings: MAX_POS,
  },
  dtype: "bfloat16",
  bosTokenId: null,
  eosTokenIds: [],
};

/** Seeded random bf16 weights in HF naming for `config` (norm weights near 1). */
function randomWeights(seed: number): WeightSource {
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
    ["lm_head.weight", [config.vocabSize, H]],
  ]);
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const p = `model.layers.${l}`;
    const add = (n: string, s: number[]) => shapes.set(`${p}.${n}`, s);
    add("input_layernorm.weight", [H]);
    add("post_attention_layernorm.weight", [H]);
    for (const [n, rows] of [
      ["q", Hq * D],
      ["k", Hkv * D],
      ["v", Hkv * D],
    ] as const) {
      add(`self_attn.${n}_proj.weight`, [rows, H]);
      add(`self_attn.${n}_proj.bias`, [rows]);
    }
    add("self_attn.q_norm.weight", [D]);
    add("self_attn.k_norm.weight", [D]);
    add("self_attn.o_proj.weight", [H, Hq * D]);
    add("self_attn.o_proj.bias", [H]);
    for (const n of ["gate", "up"]) {
      add(`mlp.${n}_proj.weight`, [I, H]);
      add(`mlp.${n}_proj.bias`, [I]);
    }
    add("mlp.down_proj.weight", [H, I]);
    add("mlp.down_proj.bias", [H]);
  }
  let state = seed >>> 0;
  const rand = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 4294967296 - 0.5;
  };
  return {
    names: [...shapes.keys()],
    has: (n) => shapes.has(n),
    get: (n): HostTensorData => {
      const shape = shapes.get(n);
      if (shape === undefined) throw new Error(`no tensor ${n}`);
      const count = shape.reduce((a, b) => a * b, 1);
      const isNorm = n.endsWith("norm.weight");
      const scale = isNorm ? 0.2 : 2 / Math.sqrt(shape[shape.length - 1]!);
      const data = new Uint16Array(count);
      for (let i = 0; i < count; i++) data[i] = f32ToBf16Bits((isNorm ? 1 : 0) + rand() * scale);
      return { data, dtype: "bf16", shape };
    },
    close: () => {},
  };
}

interface Req {
  numComputed: number;
  tokens: number[];
  blockIds: number[];
}

/** Attention metadata, positions and logits indices (last token of each request) as workspace tensors. */
function stageBatch(be: CudaBackend, reqs: Req[]) {
  const T = reqs.reduce((s, r) => s + r.tokens.length, 0);
  const queryStartLoc = new Int32Array(reqs.length + 1);
  const seqLens = new Int32Array(reqs.length);
  const blockTables = new Int32Array(reqs.length * MAX_BLOCKS);
  const slotMapping = new Int32Array(T);
  const positions = new Int32Array(T);
  const ids = new Int32Array(T);
  const last = new Int32Array(reqs.length);
  let t = 0;
  reqs.forEach((r, i) => {
    queryStartLoc[i + 1] = queryStartLoc[i]! + r.tokens.length;
    seqLens[i] = r.numComputed + r.tokens.length;
    blockTables.set(r.blockIds, i * MAX_BLOCKS);
    for (const [j, tok] of r.tokens.entries()) {
      const pos = r.numComputed + j;
      positions[t] = pos;
      ids[t] = tok;
      slotMapping[t] = r.blockIds[Math.floor(pos / BLOCK)]! * BLOCK + (pos % BLOCK);
      t++;
    }
    last[i] = t - 1;
  });
  const n = reqs.length;
  const meta = stageAttentionMetadata(be, {
    queryStartLoc,
    seqLens,
    blockTables,
    maxBlocksPerReq: MAX_BLOCKS,
    slotMapping,
    positions,
    maxQueryLen: Math.max(...reqs.map((r) => r.tokens.length)),
    maxSeqLen: Math.max(...seqLens),
  });
  return {
    meta,
    ids: be.stage(ids, [T], "i32"),
    positions: be.stage(positions, [T], "i32"),
    last: be.stage(last, [n], "i32"),
  };
}

function setup(options: CudaBackendOptions) {
  const be = new CudaBackend({ workspaceBytes: 64 * 2 ** 20, stagingBytes: 4 * 2 ** 20, ...options });
  const model = LlamaForCausalLM.load(config, randomWeights(1), be, MAX_POS);
  // The dense engine's KV set-up with a fixed pool (--num-gpu-blocks-override NUM_BLOCKS).
  const { attention, kvCaches } = createKVCacheSetup(be, {
    model,
    args: makeEngineArgs({ blockSize: BLOCK, numGpuBlocksOverride: NUM_BLOCKS }),
    kvCacheDtype: "bf16",
    deviceBudgetBytes: 0,
    maxModelLen: MAX_POS,
  });
  const step = (reqs: Req[]): Tensor => {
    const s = stageBatch(be, reqs);
    return model.forward(s.ids, s.positions, { meta: s.meta, attention, kvCaches }, s.last);
  };
  return { be, model, attention, kvCaches, step };
}

const tokens = (n: number, seed: number) =>
  Array.from({ length: n }, (_, i) => (seed * 131 + i * 17) % config.vocabSize);

/** Prefill of two requests, a decode step, a mixed step with a new request, device sampling. */
function eagerPass(gemm: "lt" | "gemmex"): number[] {
  const { be, step } = setup({ gemm, cachingAllocator: false, exactWorkspace: true });
  const a: Req = { numComputed: 0, tokens: tokens(37, 1), blockIds: [5, 9, 2] };
  const b: Req = { numComputed: 0, tokens: tokens(20, 2), blockIds: [11, 3] };
  const first = be.toHost(step([a, b])) as Float32Array;
  if (!first.every(Number.isFinite)) throw new Error(`${gemm}: non-finite logits after prefill`);
  be.resetWorkspace();
  step([
    { ...a, numComputed: 37, tokens: [7] },
    { ...b, numComputed: 20, tokens: [8] },
  ]);
  be.resetWorkspace();
  const c: Req = { numComputed: 0, tokens: tokens(11, 3), blockIds: [40] };
  const logits = step([{ ...a, numComputed: 38, tokens: [9] }, c]);
  const ids = be.sampleOnDevice(logits, {
    temperature: Float32Array.from([0, 0.8]),
    topK: Int32Array.from([0, 50]),
    topP: Float32Array.from([1, 0.9]),
    minP: Float32Array.from([0, 0.02]),
    uniform: Float32Array.from([0.3, 0.7]),
  });
  if (ids === null) throw new Error("the addon has no device sampler");
  be.dispose();
  return Array.from(ids);
}

/** A decode step of two requests captured once and replayed three times. */
function graphPass(): number {
  const { be, model, attention, kvCaches } = setup({});
  const seqLens = [30, 70];
  const table = Int32Array.from({ length: 2 * MAX_BLOCKS }, (_, i) => i % NUM_BLOCKS);
  const p = (data: Int32Array, shape: number[]) => be.upload(data, shape, "i32");
  const meta: AttentionMetadata = {
    numReqs: 2,
    numTokens: 2,
    queryStartLoc: p(Int32Array.from([0, 1, 2]), [3]),
    seqLens: p(Int32Array.from(seqLens), [2]),
    blockTables: p(table, [2, MAX_BLOCKS]),
    slotMapping: p(Int32Array.from([29, MAX_BLOCKS * BLOCK + 69]), [2]),
    maxQueryLen: 1,
    maxSeqLen: MAX_POS,
    host: {
      queryStartLoc: new Int32Array(3),
      seqLens: new Int32Array(2),
      blockTables: table,
      maxBlocksPerReq: MAX_BLOCKS,
      slotMapping: new Int32Array(2),
      positions: new Int32Array(2),
    },
  };
  const ids = p(Int32Array.from([1, 2]), [2]);
  const positions = p(Int32Array.from([29, 69]), [2]);
  const last = p(Int32Array.from([0, 1]), [2]);
  const forward = () => model.forward(ids, positions, { meta, attention, kvCaches }, last);
  be.resetWorkspace();
  be.toHost(forward()); // warm-up
  be.resetWorkspace();
  let out: Tensor | null = null;
  const g = be.graphs.capture(() => {
    out = forward();
  });
  for (let r = 0; r < 3; r++) {
    be.resetWorkspace();
    be.writeTensor(ids, Int32Array.from([r + 3, r + 4]));
    be.graphs.replay(g);
    if (!(be.toHost(out!) as Float32Array).every(Number.isFinite))
      throw new Error("non-finite logits after replay");
  }
  be.dispose();
  return 3;
}

try {
  const lt = eagerPass("lt");
  const gemmex = eagerPass("gemmex");
  const replays = graphPass();
  console.log(`op-sequence: ok (sampled ids lt=${lt} gemmex=${gemmex}; ${replays} graph replays)`);
} catch (err) {
  console.error(`op-sequence: FAILED: ${(err as Error).stack ?? err}`);
  process.exit(1);
}
