import type { Backend, Tensor } from "../backends/backend.js";
import { shardOf } from "../core/tensor_parallel.js";
import { type MlpLayer, type ModelParallel, NO_PARALLEL, reduceRowParallel } from "./blocks.js";
import type { WeightLoader, WeightShard } from "./weight_loader.js";

/**
 * The SiLU-gated MLP (HF LlamaMLP / Qwen3MoeMLP / Glm4MoeMLP; also MoE shared experts):
 * down(silu(gate(x)) * up(x)), gate and up fused into one [2I, H] matmul (gate rows first).
 */
export class DenseMlp implements MlpLayer {
  private constructor(
    private readonly backend: Backend,
    private readonly gateUpProj: Tensor, // [2 * I, H]
    private readonly gateUpBias: Tensor | null, // [2 * I]
    private readonly downProj: Tensor, // [H, I]
    private readonly downBias: Tensor | null, // [H]
    private readonly tp: ModelParallel,
  ) {}

  /**
   * Loads `${prefix}.gate_proj`, `.up_proj`, `.down_proj` (+ biases when `bias`), e.g. prefix
   * `model.layers.0.mlp` or `model.layers.3.mlp.shared_experts`. Under tensor parallelism (vLLM
   * MergedColumnParallelLinear + RowParallelLinear) a rank holds its I / size rows of gate and of
   * up, the matching columns of down, and down's bias on rank 0 only.
   * @throws WeightLoadError when a tensor is missing or has the wrong shape.
   */
  static load(
    loader: WeightLoader,
    prefix: string,
    H: number,
    I: number,
    bias: boolean,
    tp: ModelParallel = NO_PARALLEL,
  ): DenseMlp {
    const s = shardOf(I, tp);
    const col: WeightShard | null = tp.size === 1 ? null : { dim: 0, ...s };
    const row: WeightShard | null = tp.size === 1 ? null : { dim: 1, ...s };
    const gateUp = [`${prefix}.gate_proj`, `${prefix}.up_proj`];
    return new DenseMlp(
      loader.backend,
      loader.uploadCat(
        gateUp.map((n) => `${n}.weight`),
        [
          [I, H],
          [I, H],
        ],
        undefined,
        [col, col],
      ),
      bias
        ? loader.uploadCat(
            gateUp.map((n) => `${n}.bias`),
            [[I], [I]],
            undefined,
            [col, col],
          )
        : null,
      loader.upload(`${prefix}.down_proj.weight`, [H, I], row),
      loader.uploadOpt(`${prefix}.down_proj.bias`, [H], bias && tp.rank === 0),
      tp,
    );
  }

  get weights(): readonly Tensor[] {
    return [this.gateUpProj, this.gateUpBias, this.downProj, this.downBias].filter(
      (t): t is Tensor => t !== null,
    );
  }

  /**
   * The fused gate_up [2I, H] and down [H, I] weights, for a caller that computes the block
   * itself (the MoE small-batch path folds shared experts in); null with biases or under tensor
   * parallelism (the all-reduce is this block's).
   */
  get plainWeights(): { gateUp: Tensor; down: Tensor } | null {
    if (this.gateUpBias !== null || this.downBias !== null || this.tp.size !== 1) return null;
    return { gateUp: this.gateUpProj, down: this.downProj };
  }

  /** x: [T, H] -> [T, H]. */
  forward(x: Tensor): Tensor {
    const b = this.backend;
    const h =
      b.linearSiluAndMul?.(x, this.gateUpProj, this.gateUpBias) ??
      b.siluAndMul(b.linear(x, this.gateUpProj, this.gateUpBias));
    return reduceRowParallel(b.linear(h, this.downProj, this.downBias), this.tp);
  }
}
