/**
 * The CUDA backend's mixture-of-experts ops (Backend.moe; contract in ../backend.ts): shape and
 * dtype checks in TS, then one launcher call each (native/kernels/moe.h). Every output and the
 * permutation's scratch come from the step workspace, every count stays in device memory, and
 * each grid depends on (T, k, E) and the model dims only, so a MoE layer replays inside the
 * decode CUDA graphs with no host round trip.
 *
 * The permutation keeps P = T * k rows (no padding: the grouped GEMM schedules its tiles from
 * the offsets itself, moe.h), so its outputs equal the CPU backend's exactly.
 */
import type { MoeRoutingRule } from "../../config/moe_config.js";
import type {
  BackendMoeOps,
  DType,
  MoePermutation,
  MoeRouting,
  MoeSmallBatchOps,
  Tensor,
} from "../backend.js";
import { DTYPE_BYTES } from "../backend.js";
import { DTYPE_CODE, MOE_LIMITS, MOE_SCORING } from "./addon.js";
import { type CudaMoeContext, CudaMoeSmallBatch } from "./moe_small_batch.js";
import { describe, expectDtype, expectShape } from "./tensor.js";

const FLOAT_DTYPES: readonly DType[] = ["f32", "bf16", "f16"];

function dim(t: Tensor, i: number): number {
  return t.shape[i] ?? 0;
}

/** @throws Error unless the rule can run on the routing kernel (the CPU backend's checks plus its limits). */
function checkRule(rule: MoeRoutingRule, E: number): void {
  const k = rule.topK;
  if (!(Number.isInteger(k) && k >= 1 && k <= E))
    throw new Error(`moe.route: topK ${k} is outside [1, ${E}]`);
  const G = rule.numGroups;
  if (!(G >= 1 && E % G === 0 && rule.topkGroup >= 1 && rule.topkGroup <= G && k <= rule.topkGroup * (E / G)))
    throw new Error(`moe.route: ${G} groups / topkGroup ${rule.topkGroup} cannot pick ${k} of ${E} experts`);
  if (E > MOE_LIMITS.maxExperts || k > MOE_LIMITS.maxTopK || G > MOE_LIMITS.maxGroups)
    throw new Error(
      `moe.route: the CUDA routing kernel takes at most ${MOE_LIMITS.maxExperts} experts, top-${MOE_LIMITS.maxTopK} and ${MOE_LIMITS.maxGroups} groups, got ${E}, ${k}, ${G}`,
    );
}

/**
 * Default largest batch of the small-batch path. Measured on the H200 (Qwen3-30B-A3B layer,
 * scripts/gpu/moe_bench.sh, bench/results/moe_qwen3_30b_a3b_h200.md): faster than the grouped
 * path at T = 1, 2, 4 (1.19x, 1.21x, 1.11x per layer), slower at 8 (0.84x) and 16 (0.72x).
 */
export const DEFAULT_SMALL_BATCH_MAX_TOKENS = 4;

export class CudaMoeOps implements BackendMoeOps {
  /** The small-batch path (moe_small_batch.ts), absent when smallBatchMaxTokens is 0. */
  readonly smallBatch?: MoeSmallBatchOps;

  /**
   * @param fuseActivation when false, groupedGateUpSilu is absent and models run the unfused
   *   GEMM + siluAndMul pair (benchmarks compare the two; the results are bitwise equal).
   * @param smallBatchMaxTokens blocks of up to this many tokens take the small-batch path
   *   (0: never; benchmarks compare).
   */
  constructor(
    private readonly ctx: CudaMoeContext,
    fuseActivation = true,
    smallBatchMaxTokens = DEFAULT_SMALL_BATCH_MAX_TOKENS,
  ) {
    if (smallBatchMaxTokens > 0) this.smallBatch = new CudaMoeSmallBatch(ctx, smallBatchMaxTokens);
    if (fuseActivation)
      this.groupedGateUpSilu = (x, gateUp, offsets) =>
        this.grouped(x, gateUp, offsets, true, "moe.groupedGateUpSilu");
  }

  /**
   * logits: f32 [T, E]; correctionBias: f32 [E] | null -> ids i32 [T, k], weights f32 [T, k].
   * A row with fewer than k selectable experts (NaN logits) gets the lowest unpicked ids instead
   * of the CPU backend's error (a device kernel cannot throw; moe.h).
   * @throws Error on shapes, a bias given or missing against rule.correctionBias, a rule that
   *   cannot pick k experts, or one beyond the kernel's limits.
   */
  route(logits: Tensor, rule: MoeRoutingRule, correctionBias: Tensor | null): MoeRouting {
    const { ctx } = this;
    const l = ctx.dev(logits, "moe.route logits");
    expectShape(logits, "moe.route logits", [null, null]);
    expectDtype(logits, "moe.route logits", ["f32"]);
    const [T, E] = [dim(logits, 0), dim(logits, 1)];
    checkRule(rule, E);
    if (rule.correctionBias !== (correctionBias !== null))
      throw new Error(`moe.route: the rule ${rule.correctionBias ? "needs" : "has no"} a correction bias`);
    let biasPtr = 0;
    if (correctionBias !== null) {
      biasPtr = ctx.dev(correctionBias, "moe.route correctionBias").ptr;
      expectShape(correctionBias, "moe.route correctionBias", [E]);
      expectDtype(correctionBias, "moe.route correctionBias", ["f32"]);
    }
    const k = rule.topK;
    const topkIds = ctx.out([T, k], "i32");
    const topkWeights = ctx.out([T, k], "f32");
    ctx.addon.moeRoute(
      ctx.stream,
      l.ptr,
      biasPtr,
      topkIds.ptr,
      topkWeights.ptr,
      T,
      E,
      k,
      MOE_SCORING[rule.scoring],
      rule.renormalize,
      rule.numGroups,
      rule.topkGroup,
      rule.routedScalingFactor,
    );
    return { topkIds, topkWeights };
  }

  /**
   * x: [T, H]; topkIds: i32 [T, k] -> hidden [T*k, H] (x's dtype), offsets i32 [E + 1],
   * slotToRow i32 [T, k]. Ids outside [0, E) cannot be checked without a device read: such slots
   * get row -1 and no segment (moe.h).
   * @throws Error on shapes or dtypes.
   */
  permute(x: Tensor, topkIds: Tensor, numExperts: number): MoePermutation {
    const { ctx } = this;
    const xt = ctx.dev(x, "moe.permute x");
    const ids = ctx.dev(topkIds, "moe.permute topkIds");
    expectShape(x, "moe.permute x", [null, null]);
    expectDtype(x, "moe.permute x", FLOAT_DTYPES);
    const [T, H] = [dim(x, 0), dim(x, 1)];
    expectShape(topkIds, "moe.permute topkIds", [T, null]);
    expectDtype(topkIds, "moe.permute topkIds", ["i32"]);
    const k = dim(topkIds, 1);
    if (!(Number.isInteger(numExperts) && numExperts >= 1 && numExperts <= MOE_LIMITS.maxExperts))
      throw new Error(
        `moe.permute: numExperts must be an integer in [1, ${MOE_LIMITS.maxExperts}], got ${numExperts}`,
      );
    const rowBytes = H * DTYPE_BYTES[x.dtype];
    if (rowBytes % 4 !== 0)
      throw new Error(`moe.permute: rows of ${describe(x)} are not a multiple of 4 bytes`);
    const hidden = ctx.out([T * k, H], x.dtype);
    const expertOffsets = ctx.out([numExperts + 1], "i32");
    const slotToRow = ctx.out([T, k], "i32");
    const scratchBytes = k > 0 ? ctx.addon.moePermuteScratchBytes(T, k, numExperts) : 0;
    const scratch = scratchBytes > 0 ? ctx.scratch(scratchBytes) : 0;
    ctx.addon.moePermute(
      ctx.stream,
      xt.ptr,
      ids.ptr,
      hidden.ptr,
      expertOffsets.ptr,
      slotToRow.ptr,
      scratch,
      scratchBytes,
      T,
      rowBytes,
      k,
      numExperts,
    );
    return { hidden, expertOffsets, slotToRow };
  }

  /**
   * x: bf16 [P, K]; weight: bf16 [E, N, K]; expertOffsets: i32 [E + 1] -> bf16 [P, N]; rows
   * outside every segment are not written. @throws Error on shapes or dtypes.
   */
  groupedLinear(x: Tensor, weight: Tensor, expertOffsets: Tensor): Tensor {
    return this.grouped(x, weight, expertOffsets, false, "moe.groupedLinear");
  }

  /**
   * Fused siluAndMul(groupedLinear(x, gateUp, expertOffsets)): the GEMM epilogue applies
   * silu_and_mul, bitwise equal to the two ops, without the [P, 2I] intermediate and one launch
   * fewer per MoE layer. x: bf16 [P, H]; gateUp: bf16 [E, 2I, H] -> bf16 [P, I].
   */
  readonly groupedGateUpSilu?: (x: Tensor, gateUp: Tensor, expertOffsets: Tensor) => Tensor;

  /**
   * y: [P, H]; slotToRow: i32 [T, k]; topkWeights: f32 [T, k]; shared: [T, H] | null -> [T, H]
   * (y's dtype, one rounding of the f32 sum). @throws Error on shapes or dtypes.
   */
  unpermute(y: Tensor, slotToRow: Tensor, topkWeights: Tensor, shared: Tensor | null): Tensor {
    const { ctx } = this;
    const yt = ctx.dev(y, "moe.unpermute y");
    const rows = ctx.dev(slotToRow, "moe.unpermute slotToRow");
    const w = ctx.dev(topkWeights, "moe.unpermute topkWeights");
    expectShape(y, "moe.unpermute y", [null, null]);
    expectDtype(y, "moe.unpermute y", FLOAT_DTYPES);
    const [P, H] = [dim(y, 0), dim(y, 1)];
    expectShape(slotToRow, "moe.unpermute slotToRow", [null, null]);
    expectDtype(slotToRow, "moe.unpermute slotToRow", ["i32"]);
    const [T, k] = [dim(slotToRow, 0), dim(slotToRow, 1)];
    expectShape(topkWeights, "moe.unpermute topkWeights", [T, k]);
    expectDtype(topkWeights, "moe.unpermute topkWeights", ["f32"]);
    let sharedPtr = 0;
    if (shared !== null) {
      sharedPtr = ctx.dev(shared, "moe.unpermute shared").ptr;
      expectShape(shared, "moe.unpermute shared", [T, H]);
      expectDtype(shared, "moe.unpermute shared", [y.dtype]);
    }
    const out = ctx.out([T, H], y.dtype);
    if (k === 0) throw new Error("moe.unpermute: topK must be at least 1");
    ctx.addon.moeUnpermute(
      ctx.stream,
      yt.ptr,
      rows.ptr,
      w.ptr,
      sharedPtr,
      out.ptr,
      T,
      k,
      H,
      P,
      DTYPE_CODE[y.dtype],
    );
    return out;
  }

  private grouped(x: Tensor, weight: Tensor, expertOffsets: Tensor, silu: boolean, what: string): Tensor {
    const { ctx } = this;
    const xt = ctx.dev(x, `${what} x`);
    const w = ctx.dev(weight, `${what} weight`);
    const off = ctx.dev(expertOffsets, `${what} expertOffsets`);
    expectShape(x, `${what} x`, [null, null]);
    expectDtype(x, `${what} x`, ["bf16"]);
    const [P, K] = [dim(x, 0), dim(x, 1)];
    expectShape(weight, `${what} weight`, [null, null, K]);
    expectDtype(weight, `${what} weight`, ["bf16"]);
    const [E, N] = [dim(weight, 0), dim(weight, 1)];
    expectShape(expertOffsets, `${what} expertOffsets`, [E + 1]);
    expectDtype(expertOffsets, `${what} expertOffsets`, ["i32"]);
    if (K % 8 !== 0 || N % (silu ? 16 : 8) !== 0)
      throw new Error(
        `${what}: the grouped GEMM needs K % 8 == 0 and N % ${silu ? 16 : 8} == 0, got ${describe(weight)}`,
      );
    const out = ctx.out([P, silu ? N / 2 : N], "bf16");
    ctx.addon.moeGroupedGemm(ctx.stream, xt.ptr, w.ptr, out.ptr, off.ptr, P, E, N, K, silu);
    return out;
  }
}
