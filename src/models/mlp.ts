import type { Backend, Tensor } from "../backends/backend.js";
import type { MlpLayer } from "./blocks.js";
import type { WeightLoader } from "./weight_loader.js";

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
  ) {}

  /**
   * Loads `${prefix}.gate_proj`, `.up_proj`, `.down_proj` (+ biases when `bias`), e.g. prefix
   * `model.layers.0.mlp` or `model.layers.3.mlp.shared_experts`.
   * @throws WeightLoadError when a tensor is missing or has the wrong shape.
   */
  static load(loader: WeightLoader, prefix: string, H: number, I: number, bias: boolean): DenseMlp {
    return new DenseMlp(
      loader.backend,
      loader.uploadCat(
        [`${prefix}.gate_proj.weight`, `${prefix}.up_proj.weight`],
        [
          [I, H],
          [I, H],
        ],
      ),
      bias ? loader.uploadCat([`${prefix}.gate_proj.bias`, `${prefix}.up_proj.bias`], [[I], [I]]) : null,
      loader.upload(`${prefix}.down_proj.weight`, [H, I]),
      loader.uploadOpt(`${prefix}.down_proj.bias`, [H], bias),
    );
  }

  get weights(): readonly Tensor[] {
    return [this.gateUpProj, this.gateUpBias, this.downProj, this.downBias].filter(
      (t): t is Tensor => t !== null,
    );
  }

  /** x: [T, H] -> [T, H]. */
  forward(x: Tensor): Tensor {
    const b = this.backend;
    const gateUp = b.linear(x, this.gateUpProj, this.gateUpBias);
    return b.linear(b.siluAndMul(gateUp), this.downProj, this.downBias);
  }
}
