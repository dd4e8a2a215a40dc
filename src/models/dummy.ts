import type { HostTensorData } from "../backends/backend.js";
import { generateFill, mix32, WEIGHT_FILL_TABLE_SIZE, type WeightFill } from "../backends/weight_fill.js";
import { type ModelConfig, mlpKindOf } from "../config/model_config.js";
import { mlaAttentionWeightSpecs } from "./attention_mla.js";
import { moeWeightSpecs } from "./moe_mlp.js";
import type { DummyTensorKind, WeightSpec } from "./weight_spec.js";
import { WeightLoadError, type WeightLocation, type WeightSource } from "./weights.js";

export type { DummyTensorKind, WeightSpec } from "./weight_spec.js";

/**
 * Seeded random weights for `--load-format dummy` (vLLM's DummyModelLoader): every tensor the
 * Llama family needs for a ModelConfig, under its HF name, so benchmarks can run a real model
 * shape without its checkpoint. Each tensor is a counter-based fill (backends/weight_fill.ts):
 * element i is a table entry picked by 16 bits of a keyed hash of i, with keys from (seed, FNV-1a
 * hash of the name). So any element of any tensor is reproducible on its own, across runs and
 * platforms, and the CUDA backend generates the same bits on the device (`locate` hands it the
 * rule; `get` computes the host copy). The normal table uses only IEEE-exact ops and V8's fdlibm
 * `Math.log`/`Math.sqrt` and is made on the host for every backend.
 */

/** Std of matrix weights (embeddings, projections, lm_head): HF `initializer_range` default. */
export const DUMMY_MATRIX_STD = 0.02;
/** Std of bias vectors: small, so biases perturb but do not dominate the projections. */
export const DUMMY_BIAS_STD = 0.01;
/** Value of every RMSNorm weight (HF initialises norms to ones). */
export const DUMMY_NORM_VALUE = 1.0;
/**
 * Number of equiprobable levels of the normal distribution. Each 32-bit PRNG output yields two
 * 16-bit indices into a table of standard-normal quantiles Φ⁻¹((i + 0.5) / 65536), which is
 * finer than bf16's resolution over the bulk and truncates tails at about ±4.2σ. A table lookup
 * per element keeps an 8B-parameter dummy load at a few seconds per GB.
 */
const NORMAL_LEVELS = WEIGHT_FILL_TABLE_SIZE;

/**
 * Every HF tensor name and shape of a Llama-family model (transformers modeling_llama.py,
 * modeling_qwen2.py, modeling_qwen3.py, modeling_mistral.py), in checkpoint order:
 * embed_tokens [V, H]; per layer input_layernorm [H], q/k/v_proj [Hq*D | Hkv*D, H] (+ biases
 * when `attentionBias`), o_proj [H, Hq*D] (+ bias when `oProjBias`), q_norm/k_norm [D] (Qwen3),
 * post_attention_layernorm [H], gate/up_proj [I, H], down_proj [H, I] (+ biases when `mlpBias`)
 * or, in MoE layers, the router, packed experts and shared experts (moe_mlp.ts moeWeightSpecs);
 * norm [H]; lm_head [V, H] unless `tieWordEmbeddings`. MLA models (DeepSeek-V3 / V3.2, GLM-5)
 * have MLA attention tensors instead (attention_mla.ts mlaAttentionWeightSpecs).
 */
export function llamaWeightSpecs(config: ModelConfig): WeightSpec[] {
  const { hiddenSize: H, intermediateSize: I, vocabSize: V } = config;
  const specs: WeightSpec[] = [{ name: "model.embed_tokens.weight", shape: [V, H], kind: "matrix" }];
  const add = (name: string, shape: number[], kind: DummyTensorKind, present = true) => {
    if (present) specs.push({ name, shape, kind });
  };
  for (let l = 0; l < config.numHiddenLayers; l++) {
    const p = `model.layers.${l}`;
    add(`${p}.input_layernorm.weight`, [H], "norm");
    if (config.mla != null) specs.push(...mlaAttentionWeightSpecs(config, config.mla, l));
    else addGqaSpecs(add, p, config);
    add(`${p}.post_attention_layernorm.weight`, [H], "norm");
    if (config.moe != null && mlpKindOf(config.moe, l) === "moe") {
      specs.push(...moeWeightSpecs(config, config.moe, l));
      continue;
    }
    add(`${p}.mlp.gate_proj.weight`, [I, H], "matrix");
    add(`${p}.mlp.gate_proj.bias`, [I], "bias", config.mlpBias);
    add(`${p}.mlp.up_proj.weight`, [I, H], "matrix");
    add(`${p}.mlp.up_proj.bias`, [I], "bias", config.mlpBias);
    add(`${p}.mlp.down_proj.weight`, [H, I], "matrix");
    add(`${p}.mlp.down_proj.bias`, [H], "bias", config.mlpBias);
  }
  add("model.norm.weight", [H], "norm");
  add("lm_head.weight", [V, H], "matrix", !config.tieWordEmbeddings);
  return specs;
}

/** Layer `p`'s GQA attention tensors (q/k/v/o projections, biases, q/k norms). */
function addGqaSpecs(
  add: (name: string, shape: number[], kind: DummyTensorKind, present?: boolean) => void,
  p: string,
  config: ModelConfig,
): void {
  const { hiddenSize: H, headDim: D } = config;
  const q = config.numAttentionHeads * D;
  const kv = config.numKeyValueHeads * D;
  for (const [proj, rows] of [
    ["q_proj", q],
    ["k_proj", kv],
    ["v_proj", kv],
  ] as const) {
    add(`${p}.self_attn.${proj}.weight`, [rows, H], "matrix");
    add(`${p}.self_attn.${proj}.bias`, [rows], "bias", config.attentionBias);
  }
  add(`${p}.self_attn.o_proj.weight`, [H, q], "matrix");
  add(`${p}.self_attn.o_proj.bias`, [H], "bias", config.oProjBias);
  add(`${p}.self_attn.q_norm.weight`, [D], "norm", config.qkNorm);
  add(`${p}.self_attn.k_norm.weight`, [D], "norm", config.qkNorm);
}

/** Options of {@link DummyWeights}. */
export interface DummyWeightsOptions {
  /** Seed of every tensor's generator (`--seed`); any safe integer. */
  seed: number;
  /** Element type of the returned tensors (default bf16, the dtype of the real checkpoints). */
  dtype?: HostTensorData["dtype"];
}

/**
 * A WeightSource of seeded random tensors: normal(0, DUMMY_MATRIX_STD) matrices,
 * normal(0, DUMMY_BIAS_STD) biases, DUMMY_NORM_VALUE norm weights.
 */
export class DummyWeights implements WeightSource {
  readonly names: readonly string[];
  readonly dtype: HostTensorData["dtype"];
  private readonly specs: Map<string, WeightSpec>;
  private readonly seed: number;

  /** @throws WeightLoadError when the seed is not a safe integer. */
  constructor(config: ModelConfig, opts: DummyWeightsOptions) {
    if (!Number.isSafeInteger(opts.seed))
      throw new WeightLoadError(`dummy weights need an integer seed, got ${opts.seed}`);
    this.seed = opts.seed;
    this.dtype = opts.dtype ?? "bf16";
    this.specs = new Map(llamaWeightSpecs(config).map((s) => [s.name, s]));
    this.names = [...this.specs.keys()];
  }

  has(name: string): boolean {
    return this.specs.has(name);
  }

  /** The rule of a tensor's values, which a backend runs itself (Backend.fillWeight). */
  locate(name: string): WeightLocation | undefined {
    const spec = this.specs.get(name);
    if (spec === undefined) return undefined;
    return { kind: "generated", shape: [...spec.shape], fill: this.fillOf(spec) };
  }

  /**
   * Generates one tensor on the host (a new array on every call, with identical values).
   * @throws WeightLoadError when the model has no tensor of that name.
   */
  get(name: string): HostTensorData {
    const spec = this.specs.get(name);
    if (spec === undefined) throw new WeightLoadError(`dummy weights have no tensor ${name}`);
    const numel = spec.shape.reduce((a, b) => a * b, 1);
    const data = this.dtype === "f32" ? new Float32Array(numel) : new Uint16Array(numel);
    generateFill(this.fillOf(spec), 0, numel, data);
    return { data, dtype: this.dtype, shape: [...spec.shape] };
  }

  /** Nothing to release. */
  close(): void {}

  /** Norms: the constant DUMMY_NORM_VALUE; matrices and biases: the normal table of their std. */
  private fillOf(spec: WeightSpec): WeightFill {
    if (spec.kind === "norm")
      return { kind: "constant", dtype: this.dtype, value: encodeScalar(DUMMY_NORM_VALUE, this.dtype) };
    const std = spec.kind === "matrix" ? DUMMY_MATRIX_STD : DUMMY_BIAS_STD;
    const [key0, key1] = dummyFillKeys(this.seed, spec.name);
    return { kind: "table", dtype: this.dtype, table: normalTable(std, this.dtype), key0, key1 };
  }
}

/** 32-bit FNV-1a over the UTF-8 bytes of `s` (http://www.isthe.com/chongo/tech/comp/fnv/). */
export function fnv1a32(s: string): number {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(s)) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/**
 * The two 32-bit keys of a tensor's fill: keyed mix32 rounds (backends/weight_fill.ts) over the
 * seed's high word, its low word and the FNV-1a hash of the name. Negative seeds use their two's
 * complement words.
 */
export function dummyFillKeys(seed: number, name: string): [number, number] {
  const lo = seed >>> 0;
  const hi = Math.floor(seed / 2 ** 32) >>> 0;
  const key0 = mix32(mix32(mix32(hi ^ 0x243f6a88) ^ lo) ^ fnv1a32(name));
  return [key0, mix32(key0 ^ 0x85a308d3)];
}

const tableCache = new Map<string, Float32Array | Uint16Array>();

/**
 * NORMAL_LEVELS equiprobable quantiles of normal(0, std), encoded in `dtype` (cached per
 * std and dtype; the tables are pure functions of their key).
 */
export function normalTable(std: number, dtype: HostTensorData["dtype"]): Float32Array | Uint16Array {
  const key = `${std}:${dtype}`;
  const hit = tableCache.get(key);
  if (hit !== undefined) return hit;
  const table = dtype === "f32" ? new Float32Array(NORMAL_LEVELS) : new Uint16Array(NORMAL_LEVELS);
  for (let i = 0; i < NORMAL_LEVELS / 2; i++) {
    // Lower half from the quantile function, upper half mirrored so the table is exactly symmetric.
    const x = std * inverseNormalCdf((i + 0.5) / NORMAL_LEVELS);
    table[i] = encodeScalar(x, dtype);
    table[NORMAL_LEVELS - 1 - i] = encodeScalar(-x, dtype);
  }
  tableCache.set(key, table);
  return table;
}

/**
 * Standard normal quantile Φ⁻¹(p) for p in (0, 1), relative error below 1.15e-9: P. J. Acklam,
 * "An algorithm for computing the inverse normal cumulative distribution function" (2003).
 */
export function inverseNormalCdf(p: number): number {
  const a = [
    -39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716,
    2.506628277459239,
  ];
  const b = [
    -54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572,
  ];
  const c = [
    -0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968,
    2.938163982698783,
  ];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const pLow = 0.02425;
  const tail = (q: number) =>
    (((((c[0]! * q + c[1]!) * q + c[2]!) * q + c[3]!) * q + c[4]!) * q + c[5]!) /
    ((((d[0]! * q + d[1]!) * q + d[2]!) * q + d[3]!) * q + 1);
  if (p < pLow) return tail(Math.sqrt(-2 * Math.log(p)));
  if (p > 1 - pLow) return -tail(Math.sqrt(-2 * Math.log(1 - p)));
  const q = p - 0.5;
  const r = q * q;
  return (
    ((((((a[0]! * r + a[1]!) * r + a[2]!) * r + a[3]!) * r + a[4]!) * r + a[5]!) * q) /
    (((((b[0]! * r + b[1]!) * r + b[2]!) * r + b[3]!) * r + b[4]!) * r + 1)
  );
}

/** Encodes a number as an element of `dtype`: f32 value, or bf16/f16 bits (round to nearest even). */
function encodeScalar(x: number, dtype: HostTensorData["dtype"]): number {
  if (dtype === "f32") return Math.fround(x);
  return dtype === "bf16" ? f32ToBf16Bits(x) : f32ToF16Bits(x);
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** bf16 bits of fp32(x), round to nearest even; NaN -> 0x7fc0 (as torch's float -> bfloat16). */
export function f32ToBf16Bits(x: number): number {
  f32Scratch[0] = x;
  const u = u32Scratch[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

/**
 * IEEE binary16 bits of fp32(x), round to nearest even, with subnormals, overflow to ±inf and
 * NaN -> 0x7e00 (numpy's npy_floatbits_to_halfbits rules).
 */
export function f32ToF16Bits(x: number): number {
  f32Scratch[0] = x;
  const u = u32Scratch[0]!;
  const sign = (u >>> 16) & 0x8000;
  const exp = ((u >>> 23) & 0xff) - 127;
  const mant = u & 0x7fffff;
  if (exp === 128) return mant !== 0 ? 0x7e00 : sign | 0x7c00;
  if (exp > 15) return sign | 0x7c00;
  if (exp >= -14) {
    // Normal half: keep 10 mantissa bits, round the 13 dropped ones to nearest even; a carry
    // out of the mantissa correctly bumps the exponent (up to inf).
    let h = ((exp + 15) << 10) | (mant >>> 13);
    const rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h += 1;
    return sign | h;
  }
  // Subnormal half: value / 2^-24, exact in a double, rounded half to even.
  const scaled = Math.abs(f32Scratch[0]!) * 2 ** 24;
  let m = Math.floor(scaled);
  const frac = scaled - m;
  if (frac > 0.5 || (frac === 0.5 && m % 2 === 1)) m += 1;
  return sign | m;
}
