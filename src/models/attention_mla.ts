import type { Backend, BackendMlaOps, MlaDims, QkvLayout, Tensor } from "../backends/backend.js";
import { indexerSourceLayer } from "../config/mla_config.js";
import { type MlaConfig, type ModelConfig, ModelConfigError } from "../config/model_config.js";
import type { AttentionKind, AttentionLayer, ForwardContext } from "./blocks.js";
import { DsaIndexer, indexerWeightSpecs } from "./dsa_indexer.js";
import { buildCosSinCache, computeInvFreq, ropeAttentionFactor } from "./rope.js";
import type { WeightLoader } from "./weight_loader.js";
import type { WeightSpec } from "./weight_spec.js";
import { concatRows } from "./weights.js";

/** eps of q_a_layernorm and kv_a_layernorm (HF DeepseekV3RMSNorm(rank) keeps its 1e-6 default). */
const LORA_NORM_EPS = 1e-6;

/**
 * Column layout of the fused down projection `a = x @ A^T` of one layer: the rows of q_a_proj
 * (qL) or q_proj (Hq * (N + R)) first, then kv_a_proj_with_mqa (C + R), then, in a full DSA
 * layer, the indexer's wk (Di) and weights_proj (Hi). One GEMM reads x once for all of them.
 */
interface FusedLayout {
  /** Width of the query part (qL, or Hq * (N + R) without q-LoRA). */
  q: number;
  /** First column of the compressed KV (C), followed by k_pe (R). */
  kv: number;
  /** First column of the indexer key (Di) and head weights (Hi), or -1. */
  indexer: number;
  width: number;
}

function fusedLayout(c: ModelConfig, m: MlaConfig, indexerLayer: boolean): FusedLayout {
  const q = m.qLoraRank ?? c.numAttentionHeads * (m.qkNopeHeadDim + m.qkRopeHeadDim);
  const kv = q;
  const afterKv = kv + m.kvLoraRank + m.qkRopeHeadDim;
  const ix = m.indexer;
  if (!indexerLayer || ix === null) return { q, kv, indexer: -1, width: afterKv };
  return { q, kv, indexer: afterKv, width: afterKv + ix.headDim + ix.numHeads };
}

/** The MlaDims of a config. */
export function mlaDims(c: ModelConfig, m: MlaConfig): MlaDims {
  return {
    numHeads: c.numAttentionHeads,
    qkNopeHeadDim: m.qkNopeHeadDim,
    qkRopeHeadDim: m.qkRopeHeadDim,
    vHeadDim: m.vHeadDim,
    kvLoraRank: m.kvLoraRank,
    softmaxScale: m.softmaxScale,
  };
}

/**
 * Multi-head latent attention of one layer (HF DeepseekV3Attention / DeepseekV32Attention /
 * GlmMoeDsaAttention; math in config/mla_config.ts), against Backend.mla and the
 * MlaAttentionBackend of the step (ctx.mlaAttention): fused down projection, q-LoRA norm and
 * up projection, RoPE on the rope parts, the latent row (normed compressed KV + rotated k_pe),
 * the DSA selection (own indexer in a full layer, the nearest full layer's top-k in a shared
 * one), attention over the latent rows, o_proj.
 */
class MlaAttentionLayer implements AttentionLayer {
  constructor(
    private readonly backend: Backend,
    private readonly ops: BackendMlaOps,
    private readonly mla: MlaConfig,
    private readonly dims: MlaDims,
    private readonly layout: FusedLayout,
    private readonly cosSin: Tensor, // f32 [maxPositions, R]
    private readonly fusedA: Tensor, // [layout.width, H]
    private readonly fusedABias: Tensor | null, // [layout.width]
    private readonly qALayernorm: Tensor | null, // [qL]
    private readonly qBProj: Tensor | null, // [Hq * (N + R), qL]
    private readonly kvALayernorm: Tensor, // [C]
    private readonly kvBProj: Tensor, // [Hq * (N + Vd), C]
    private readonly oProj: Tensor, // [H, Hq * Vd]
    private readonly oBias: Tensor | null, // [H]
    private readonly indexer: DsaIndexer | null,
    /** The full layer whose top-k this layer uses (itself when full); -1 without DSA. */
    private readonly topkSource: number,
  ) {}

  get weights(): readonly Tensor[] {
    const own = [this.fusedA, this.fusedABias, this.qALayernorm, this.qBProj, this.kvALayernorm];
    return [...own, this.kvBProj, this.oProj, this.oBias, ...(this.indexer?.weights ?? [])].filter(
      (t): t is Tensor => t !== null,
    );
  }

  forward(l: number, x: Tensor, positions: Tensor, ctx: ForwardContext): Tensor {
    const { backend: b, ops, dims, layout: f } = this;
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, kvLoraRank: C } = dims;
    const interleave = this.mla.ropeInterleave;
    const a = b.linear(x, this.fusedA, this.fusedABias);
    let qr: Tensor | null = null;
    let q: Tensor;
    if (this.qBProj !== null) {
      qr = b.rmsNorm(ops.sliceColumns(a, 0, f.q), this.qALayernorm!, LORA_NORM_EPS);
      q = b.linear(qr, this.qBProj, null);
    } else q = ops.sliceColumns(a, 0, f.q);
    ops.rotaryStrided(q, { offset: N, stride: N + R, count: Hq }, positions, this.cosSin, interleave);
    const kvc = b.rmsNorm(ops.sliceColumns(a, f.kv, C), this.kvALayernorm, LORA_NORM_EPS);
    const kpe = ops.sliceColumns(a, f.kv + C, R);
    ops.rotaryStrided(kpe, { offset: 0, stride: R, count: 1 }, positions, this.cosSin, interleave);
    const topkIndices = this.selection(l, qr, a, positions, ctx);
    const attention = ctx.mlaAttention;
    if (attention === undefined)
      throw new Error(`layer ${l} is an MLA layer but the step has no MLA attention backend`);
    const o = attention.forward(
      l,
      { q, kvc, kpe, kvBProj: this.kvBProj, dims, topkIndices },
      ctx.kvCaches[l]!,
      ctx.meta,
    );
    return b.linear(o, this.oProj, this.oBias);
  }

  /** The DSA top-k of this layer (null without DSA); a full layer records it for shared ones. */
  private selection(
    l: number,
    qr: Tensor | null,
    a: Tensor,
    positions: Tensor,
    ctx: ForwardContext,
  ): Tensor | null {
    if (this.topkSource < 0) return null;
    if (this.indexer === null) {
      const t = ctx.dsaTopk?.get(this.topkSource);
      if (t === undefined)
        throw new Error(`shared DSA layer ${l} runs before its full layer ${this.topkSource}`);
      return t;
    }
    const t =
      ctx.dsaForcedTopk?.get(l) ??
      this.indexer.forward(this.backend, l, qr!, a, this.layout.indexer, positions, this.cosSin, ctx);
    ctx.dsaTopk?.set(l, t);
    return t;
  }
}

/**
 * The MLA attention kind (DeepSeek-V3, DeepSeek-V3.2, GLM-5). `layout` is the MQA view of MLA
 * (one shared KV "head" of C + R, as the absorbed form reads it); the GQA-only paths that use
 * a QkvLayout (HiSparse's Quest path, fastPrefill) refuse MLA models before using it.
 */
export const MLA_ATTENTION: AttentionKind = {
  layout: (c): QkvLayout => ({
    numHeads: c.numAttentionHeads,
    numKvHeads: 1,
    headDim: c.mla!.kvLoraRank + c.mla!.qkRopeHeadDim,
  }),

  /** The cos/sin table of the rope parts, [maxPositions, qk_rope_head_dim], YaRN factor applied. */
  loadShared(config, loader, maxPositions) {
    const R = config.mla!.qkRopeHeadDim;
    const cos = buildCosSinCache(
      computeInvFreq(config.rope, R),
      maxPositions,
      ropeAttentionFactor(config.rope),
    );
    return [loader.backend.upload(cos, [maxPositions, R], "f32")];
  },

  /**
   * @throws ModelConfigError when the backend has no MLA ops.
   * @throws WeightLoadError when a tensor is missing or misshapen.
   */
  loadLayer(config, loader, l, shared) {
    const m = config.mla!;
    const ops = loader.backend.mla;
    if (ops === undefined)
      throw new ModelConfigError(
        `the ${loader.backend.name} backend cannot run multi-head latent attention (${config.architecture}) yet; use --device cpu`,
      );
    const { hiddenSize: H, numAttentionHeads: Hq } = config;
    const { qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = m;
    const full = m.indexer !== null && m.indexer.layerTypes[l] === "full";
    const f = fusedLayout(config, m, full);
    const a = `model.layers.${l}.self_attn`;
    const parts = fusedParts(config, m, l, full);
    const fusedA = loader.backend.uploadWeight(concatRows(parts.map(([n, s]) => loader.get(n, s))));
    const qL = m.qLoraRank;
    return new MlaAttentionLayer(
      loader.backend,
      ops,
      m,
      mlaDims(config, m),
      f,
      shared[0]!,
      fusedA,
      config.attentionBias ? fusedBias(loader, a, qL === null ? Hq * (N + R) : qL, f, qL !== null) : null,
      qL === null ? null : loader.upload(`${a}.q_a_layernorm.weight`, [qL]),
      qL === null ? null : loader.upload(`${a}.q_b_proj.weight`, [Hq * (N + R), qL]),
      loader.upload(`${a}.kv_a_layernorm.weight`, [C]),
      loader.upload(`${a}.kv_b_proj.weight`, [Hq * (N + Vd), C]),
      loader.upload(`${a}.o_proj.weight`, [H, Hq * Vd]),
      loader.uploadOpt(`${a}.o_proj.bias`, [H], config.attentionBias),
      full ? DsaIndexer.load(m, loader, l) : null,
      m.indexer === null ? -1 : indexerSourceLayer(m.indexer, l),
    );
  },
};

/** [name, shape] of the rows of layer l's fused down projection, in column order. */
function fusedParts(c: ModelConfig, m: MlaConfig, l: number, full: boolean): [string, number[]][] {
  const H = c.hiddenSize;
  const a = `model.layers.${l}.self_attn`;
  const q: [string, number[]] =
    m.qLoraRank === null
      ? [`${a}.q_proj.weight`, [c.numAttentionHeads * (m.qkNopeHeadDim + m.qkRopeHeadDim), H]]
      : [`${a}.q_a_proj.weight`, [m.qLoraRank, H]];
  const parts: [string, number[]][] = [
    q,
    [`${a}.kv_a_proj_with_mqa.weight`, [m.kvLoraRank + m.qkRopeHeadDim, H]],
  ];
  if (full) {
    const ix = m.indexer!;
    parts.push(
      [`${a}.indexer.wk.weight`, [ix.headDim, H]],
      [`${a}.indexer.weights_proj.weight`, [ix.numHeads, H]],
    );
  }
  return parts;
}

/**
 * The fused projection's bias with `attention_bias` (HF: q_a_proj and kv_a_proj_with_mqa have
 * biases; q_proj and the indexer's projections have none, so their columns get zeros).
 */
function fusedBias(
  loader: WeightLoader,
  a: string,
  qWidth: number,
  f: FusedLayout,
  qHasBias: boolean,
): Tensor {
  const kvWidth = (f.indexer < 0 ? f.width : f.indexer) - f.kv;
  const kv = loader.get(`${a}.kv_a_proj_with_mqa.bias`, [kvWidth]);
  const zeros = (n: number) => ({
    data: kv.data instanceof Float32Array ? new Float32Array(n) : new Uint16Array(n),
    dtype: kv.dtype,
    shape: [n],
  });
  const q = qHasBias ? loader.get(`${a}.q_a_proj.bias`, [qWidth]) : zeros(qWidth);
  const parts = [q, kv];
  if (f.indexer >= 0) parts.push(zeros(f.width - f.indexer));
  return loader.backend.uploadWeight(concatRows(parts));
}

/**
 * Names, shapes and kinds of layer `l`'s MLA attention tensors for `--load-format dummy`, in
 * checkpoint order (HF DeepseekV3Attention; + the indexer of a full DSA layer).
 */
export function mlaAttentionWeightSpecs(c: ModelConfig, m: MlaConfig, l: number): WeightSpec[] {
  const { hiddenSize: H, numAttentionHeads: Hq } = c;
  const { qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = m;
  const a = `model.layers.${l}.self_attn`;
  const specs: WeightSpec[] = [];
  const add = (name: string, shape: number[], kind: WeightSpec["kind"], present = true) => {
    if (present) specs.push({ name: `${a}.${name}`, shape, kind });
  };
  const bias = c.attentionBias;
  if (m.qLoraRank === null) add("q_proj.weight", [Hq * (N + R), H], "matrix");
  else {
    add("q_a_proj.weight", [m.qLoraRank, H], "matrix");
    add("q_a_proj.bias", [m.qLoraRank], "bias", bias);
    add("q_a_layernorm.weight", [m.qLoraRank], "norm");
    add("q_b_proj.weight", [Hq * (N + R), m.qLoraRank], "matrix");
  }
  add("kv_a_proj_with_mqa.weight", [C + R, H], "matrix");
  add("kv_a_proj_with_mqa.bias", [C + R], "bias", bias);
  add("kv_a_layernorm.weight", [C], "norm");
  add("kv_b_proj.weight", [Hq * (N + Vd), C], "matrix");
  add("o_proj.weight", [H, Hq * Vd], "matrix");
  add("o_proj.bias", [H], "bias", bias);
  if (m.indexer !== null && m.indexer.layerTypes[l] === "full") specs.push(...indexerWeightSpecs(c, m, l));
  return specs;
}
