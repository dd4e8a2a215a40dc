/**
 * Set-up pieces of bench/moe_bench.ts: a cut-down config (--num-layers), a fast dummy weight
 * source, a counter of the experts each MoE layer activates, the bytes a decode step reads, and
 * the LM head's time (shared with bench/mla_bench.ts).
 */
import { performance } from "node:perf_hooks";
import type {
  Backend,
  BackendMoeOps,
  HostTensorData,
  MoeLayerWeights,
  MoePermutation,
  MoeSmallBatchOps,
  Tensor,
} from "../src/backends/backend.js";
import type { CudaBackend } from "../src/backends/cuda/cuda_backend.js";
import { type ModelConfig, mlpKindOf } from "../src/config/model_config.js";
import type { MoeRoutingRule } from "../src/config/moe_config.js";
import { DummyWeights, llamaWeightSpecs } from "../src/models/dummy.js";
import type { WeightSource } from "../src/models/weights.js";

/**
 * The config with its first `numLayers` layers only (MoE layer list cut to match), or unchanged
 * when numLayers is undefined. @throws Error when numLayers is not in [1, numHiddenLayers].
 */
export function cutLayers(config: ModelConfig, numLayers: number | undefined): ModelConfig {
  if (numLayers === undefined) return config;
  if (!(Number.isInteger(numLayers) && numLayers >= 1 && numLayers <= config.numHiddenLayers))
    throw new Error(`--num-layers must be an integer in [1, ${config.numHiddenLayers}], got ${numLayers}`);
  const moe = config.moe ?? null;
  return {
    ...config,
    numHiddenLayers: numLayers,
    ...(moe === null ? {} : { moe: { ...moe, moeLayers: moe.moeLayers.filter((l) => l < numLayers) } }),
  };
}

/** bf16 bits of 2^-7, the value of every constant tensor below. */
const CONST_BF16 = 0x3c00;

/**
 * Dummy weights that load in seconds: seeded random (DummyWeights) for everything that decides
 * the routing (embedding, attention, norms, routers), a constant bf16 value for the routed and
 * shared experts and lm_head. A GEMM reads every byte whatever the values, so the step times are
 * those of random experts; the tokens' routing stays as diverse as with random experts, since
 * the router sees hidden states built from random embeddings and attention.
 */
export class FastDummyWeights implements WeightSource {
  private readonly inner: DummyWeights;
  private readonly shapes: Map<string, number[]>;
  readonly names: readonly string[];
  constructor(config: ModelConfig, seed: number) {
    this.inner = new DummyWeights(config, { seed, dtype: "bf16" });
    this.shapes = new Map(llamaWeightSpecs(config).map((s) => [s.name, s.shape]));
    this.names = this.inner.names;
  }
  has(name: string): boolean {
    return this.inner.has(name);
  }
  get(name: string): HostTensorData {
    const shape = this.shapes.get(name);
    if (shape === undefined || !/\.experts\.|shared_experts\.|^lm_head\./.test(name))
      return this.inner.get(name);
    const data = new Uint16Array(shape.reduce((a, b) => a * b, 1)).fill(CONST_BF16);
    return { data, dtype: "bf16", shape: [...shape] };
  }
  close(): void {}
}

/**
 * Wraps backend.moe so that, while `counting` is on (eager runs only), each MoE layer call
 * records how many experts received at least one token: `counts[i]` for the i-th MoE layer call
 * of the pass. The grouped path counts the permutation's non-empty segments; the small-batch path
 * (which has no permutation) is counted by routing the same logits on the side (outside the timed
 * replays).
 */
export class ExpertCounter {
  counting = false;
  counts: number[] = [];

  /** @param capturing true while a graph is being captured (no device reads then). */
  constructor(backend: Backend, capturing: () => boolean) {
    const ops = backend.moe;
    if (ops === undefined) throw new Error(`the ${backend.name} backend has no MoE ops`);
    const permute = ops.permute.bind(ops);
    const wrapped: BackendMoeOps = Object.create(ops) as BackendMoeOps;
    const counted = () => this.counting && !capturing();
    (wrapped as { permute: BackendMoeOps["permute"] }).permute = (x, ids, E): MoePermutation => {
      const p = permute(x, ids, E);
      if (counted()) this.counts.push(activeExperts(backend.toHost(p.expertOffsets) as Int32Array));
      return p;
    };
    const small = ops.smallBatch;
    if (small !== undefined) {
      const sideRoute = (x: Tensor, w: MoeLayerWeights, rule: MoeRoutingRule) => {
        const r = ops.route(backend.linear(x, w.router, null, "f32"), rule, w.correctionBias);
        this.counts.push(new Set(backend.toHost(r.topkIds) as Int32Array).size);
      };
      const smallBatch: MoeSmallBatchOps = {
        maxTokens: small.maxTokens,
        prepare: (w, rule) => small.prepare(w, rule),
        forward: (x, w, rule) => {
          if (counted()) sideRoute(x, w, rule);
          return small.forward(x, w, rule);
        },
      };
      Object.defineProperty(wrapped, "smallBatch", { value: smallBatch });
    }
    Object.defineProperty(backend, "moe", { value: wrapped, configurable: true });
  }

  /** Runs fn with counting on; returns the per-layer counts. */
  count(fn: () => void): number[] {
    this.counts = [];
    this.counting = true;
    try {
      fn();
    } finally {
      this.counting = false;
    }
    return this.counts;
  }
}

function activeExperts(offsets: Int32Array): number {
  let n = 0;
  for (let e = 0; e + 1 < offsets.length; e++) if (offsets[e + 1]! > offsets[e]!) n++;
  return n;
}

/** Bytes of the weights of one decoder layer outside its routed experts (bf16). */
export function layerBytesWithoutExperts(c: ModelConfig, l: number): number {
  const H = c.hiddenSize;
  const D = c.headDim;
  const attn = H * (c.numAttentionHeads + 2 * c.numKeyValueHeads) * D + c.numAttentionHeads * D * H;
  const moe = c.moe ?? null;
  if (moe === null || mlpKindOf(moe, l) === "dense") return 2 * (attn + 3 * H * c.intermediateSize);
  const router = moe.numExperts * H;
  const shared = 3 * H * moe.moeIntermediateSize * moe.numSharedExperts;
  return 2 * (attn + router + shared);
}

/** Bytes of one routed expert (gate, up and down projections, bf16). */
export function expertBytes(c: ModelConfig): number {
  const moe = c.moe;
  return moe == null ? 0 : 2 * 3 * c.hiddenSize * moe.moeIntermediateSize;
}

/** Tensors a bench allocates; freed together. */
export function freeAll(b: Backend, ts: (Tensor | null)[]): void {
  for (const t of ts) if (t !== null) b.free(t);
}

/**
 * Milliseconds of the LM head (a [vocab, hidden] bf16 GEMV/GEMM with f32 output) for B rows,
 * the mean of 20 runs after one warm-up, on freshly filled tensors (freed before returning).
 * `sync` waits for the device (a host read of a probe tensor).
 */
export function lmHeadMs(
  backend: CudaBackend,
  config: Pick<ModelConfig, "vocabSize" | "hiddenSize">,
  B: number,
  sync: () => void,
): number {
  const w = backend.allocateFilled([config.vocabSize, config.hiddenSize], "bf16");
  backend.resetWorkspace();
  const x = backend.allocateFilled([B, config.hiddenSize], "bf16");
  backend.linear(x, w, null, "f32");
  sync();
  const t = performance.now();
  for (let i = 0; i < 20; i++) {
    backend.resetWorkspace();
    backend.linear(x, w, null, "f32");
  }
  sync();
  const ms = (performance.now() - t) / 20;
  backend.free(w);
  backend.free(x);
  return ms;
}
