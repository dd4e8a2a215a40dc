import type { Backend, BackendMoeOps, MoeLayerWeights, Tensor } from "../backends/backend.js";
import type { ModelConfig, MoeConfig, MoeRoutingRule } from "../config/model_config.js";
import type { MlpLayer } from "./blocks.js";
import { DenseMlp } from "./mlp.js";
import type { WeightLoader } from "./weight_loader.js";
import type { WeightSpec } from "./weight_spec.js";

/**
 * The mixture-of-experts MLP block (HF Qwen3MoeSparseMoeBlock; Glm4MoeMoE / DeepseekV3MoE with
 * their shared experts), written against Backend.moe (the op sequence of BackendMoeOps):
 * router logits in fp32, routing, permutation by expert, grouped gate_up and down GEMMs,
 * weighted un-permute plus the shared experts' output. Batches of up to
 * Backend.moe.smallBatch.maxTokens tokens take the backend's small-batch path instead when it
 * takes the block (decode: no permutation, the shared experts folded in).
 */
export class MoeMlp implements MlpLayer {
  /** The block as the small-batch path takes it; null when the backend has none or refuses it. */
  private readonly smallBatchWeights: MoeLayerWeights | null;

  private constructor(
    private readonly backend: Backend,
    private readonly ops: BackendMoeOps,
    private readonly routing: MoeRoutingRule,
    private readonly numExperts: number,
    private readonly router: Tensor, // [E, H]
    private readonly correctionBias: Tensor | null, // f32 [E]
    private readonly gateUp: Tensor, // [E, 2 * I, H], gate rows first
    private readonly down: Tensor, // [E, H, I]
    private readonly shared: DenseMlp | null,
  ) {
    const sharedWeights = shared?.plainWeights ?? null;
    const w: MoeLayerWeights = { router, correctionBias, gateUp, down, shared: sharedWeights };
    const foldable = shared === null || sharedWeights !== null;
    this.smallBatchWeights = foldable && ops.smallBatch?.prepare(w, routing) === true ? w : null;
  }

  /**
   * Loads layer `l`'s router (`mlp.gate.weight`, `mlp.gate.e_score_correction_bias` for
   * noaux_tc), experts (either form, see loadExperts) and shared experts
   * (`mlp.shared_experts.*`, intermediate moe_intermediate_size * n_shared_experts).
   * @throws Error when the backend has no MoE ops (decoder.ts checks this first).
   * @throws WeightLoadError when a tensor is missing or has the wrong shape.
   */
  static load(config: ModelConfig, moe: MoeConfig, loader: WeightLoader, l: number): MoeMlp {
    const ops = loader.backend.moe;
    if (ops === undefined) throw new Error(`the ${loader.backend.name} backend has no MoE ops`);
    const { hiddenSize: H } = config;
    const { numExperts: E, moeIntermediateSize: I } = moe;
    const p = `model.layers.${l}.mlp`;
    const router = loader.upload(`${p}.gate.weight`, [E, H]);
    const bias = moe.routing.correctionBias
      ? loader.uploadF32(`${p}.gate.e_score_correction_bias`, [E])
      : null;
    const { gateUp, down } = loadExperts(loader, p, E, I, H);
    const shared =
      moe.numSharedExperts > 0
        ? DenseMlp.load(loader, `${p}.shared_experts`, H, I * moe.numSharedExperts, false)
        : null;
    return new MoeMlp(loader.backend, ops, moe.routing, E, router, bias, gateUp, down, shared);
  }

  get weights(): readonly Tensor[] {
    const own = [this.router, this.correctionBias, this.gateUp, this.down].filter(
      (t): t is Tensor => t !== null,
    );
    return [...own, ...(this.shared?.weights ?? [])];
  }

  /** x: [T, H] -> [T, H]. */
  forward(x: Tensor): Tensor {
    const { backend: b, ops } = this;
    const small = ops.smallBatch;
    const T = x.shape[0] ?? 0;
    if (this.smallBatchWeights !== null && small !== undefined && T >= 1 && T <= small.maxTokens)
      return small.forward(x, this.smallBatchWeights, this.routing);
    const logits = b.linear(x, this.router, null, "f32");
    const r = ops.route(logits, this.routing, this.correctionBias);
    const p = ops.permute(x, r.topkIds, this.numExperts);
    const h =
      ops.groupedGateUpSilu?.(p.hidden, this.gateUp, p.expertOffsets) ??
      b.siluAndMul(ops.groupedLinear(p.hidden, this.gateUp, p.expertOffsets));
    const y = ops.groupedLinear(h, this.down, p.expertOffsets);
    const shared = this.shared === null ? null : this.shared.forward(x);
    return ops.unpermute(y, p.slotToRow, r.topkWeights, shared);
  }
}

/**
 * The routed experts of `${p}.experts` as two packed weights, from either checkpoint form:
 * - packed (transformers 5.x in-memory layout): `experts.gate_up_proj` [E, 2I, H] (gate rows
 *   first) and `experts.down_proj` [E, H, I], uploaded as they are;
 * - per expert (what `save_pretrained` writes, and the published checkpoints):
 *   `experts.{e}.gate_proj.weight` [I, H], `.up_proj.weight` [I, H], `.down_proj.weight` [H, I],
 *   stacked into the packed layout.
 * @throws WeightLoadError naming the first missing or misshapen tensor (e.g. a missing expert).
 */
export function loadExperts(
  loader: WeightLoader,
  p: string,
  E: number,
  I: number,
  H: number,
): { gateUp: Tensor; down: Tensor } {
  const packed = `${p}.experts.gate_up_proj`;
  if (loader.has(packed)) {
    return {
      gateUp: loader.upload(packed, [E, 2 * I, H]),
      down: loader.upload(`${p}.experts.down_proj`, [E, H, I]),
    };
  }
  // Each expert's tensors go straight into their rows of the stacked weight (WeightLoader.uploadCat).
  const gateUp: string[] = [];
  const down: string[] = [];
  for (let e = 0; e < E; e++) {
    const x = `${p}.experts.${e}`;
    gateUp.push(`${x}.gate_proj.weight`, `${x}.up_proj.weight`);
    down.push(`${x}.down_proj.weight`);
  }
  return {
    gateUp: loader.uploadCat(
      gateUp,
      gateUp.map(() => [I, H]),
      [E, 2 * I, H],
    ),
    down: loader.uploadCat(
      down,
      down.map(() => [H, I]),
      [E, H, I],
    ),
  };
}

/**
 * Names, shapes and kinds of layer `l`'s MoE tensors for `--load-format dummy`: the router
 * (+ correction bias), the experts in the packed form (so no stacking at load) and the shared
 * experts.
 */
export function moeWeightSpecs(config: ModelConfig, moe: MoeConfig, l: number): WeightSpec[] {
  const H = config.hiddenSize;
  const { numExperts: E, moeIntermediateSize: I } = moe;
  const p = `model.layers.${l}.mlp`;
  const specs: WeightSpec[] = [{ name: `${p}.gate.weight`, shape: [E, H], kind: "matrix" }];
  if (moe.routing.correctionBias)
    specs.push({ name: `${p}.gate.e_score_correction_bias`, shape: [E], kind: "bias" });
  specs.push(
    { name: `${p}.experts.gate_up_proj`, shape: [E, 2 * I, H], kind: "matrix" },
    { name: `${p}.experts.down_proj`, shape: [E, H, I], kind: "matrix" },
  );
  const S = I * moe.numSharedExperts;
  if (S > 0) {
    const x = `${p}.shared_experts`;
    specs.push(
      { name: `${x}.gate_proj.weight`, shape: [S, H], kind: "matrix" },
      { name: `${x}.up_proj.weight`, shape: [S, H], kind: "matrix" },
      { name: `${x}.down_proj.weight`, shape: [H, S], kind: "matrix" },
    );
  }
  return specs;
}
