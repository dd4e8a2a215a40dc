/**
 * The CUDA backend's small-batch MoE path (BackendMoeOps.smallBatch; contract in ../backend.ts):
 * three launches per block (native/kernels/moe_decode.h) in place of the router linear, route,
 * permute, two grouped GEMMs, un-permute and the shared expert's three ops. Outputs come from the
 * step workspace; the one persistent buffer is the route kernel's ticket (zeroed once, left zero
 * by every launch), reserved by prepare() at load so that nothing is allocated while a
 * decode graph is being captured.
 */
import type { MoeRoutingRule } from "../../config/moe_config.js";
import type { DType, MoeLayerWeights, MoeSmallBatchOps, Tensor } from "../backend.js";
import { MOE_DECODE_MAX_TOKENS, MOE_LIMITS, MOE_SCORING } from "./addon.js";
import type { CudaOpsContext } from "./ops.js";
import { expectDtype, expectShape } from "./tensor.js";

/** What the small-batch path needs from the backend beyond the ops context. */
export interface CudaMoeContext extends CudaOpsContext {
  /** A persistent tensor with every byte set to byteValue. */
  allocateFilled(shape: readonly number[], dtype: DType, byteValue?: number): Tensor;
  /** Frees a persistent tensor. */
  free(t: Tensor): void;
}

/** Block dims of one prepared layer. */
interface Dims {
  E: number;
  H: number;
  I: number;
  Is: number;
}

function dim(t: Tensor, i: number): number {
  return t.shape[i] ?? 0;
}

export class CudaMoeSmallBatch implements MoeSmallBatchOps {
  /** The sync counters (i32), sized for the widest hidden size prepared. */
  private sync: Tensor | null = null;
  private syncInts = 0;

  /** @param maxTokens the largest T routed here (1..MOE_DECODE_MAX_TOKENS). */
  constructor(
    private readonly ctx: CudaMoeContext,
    readonly maxTokens: number,
  ) {
    if (!(Number.isInteger(maxTokens) && maxTokens >= 1 && maxTokens <= MOE_DECODE_MAX_TOKENS))
      throw new Error(
        `moe small batch: maxTokens must be an integer in [1, ${MOE_DECODE_MAX_TOKENS}], got ${maxTokens}`,
      );
  }

  /**
   * True when the kernels take this block: bf16 weights, H, I, Is multiples of 8, and the
   * routing kernel's limits; reserves the sync counters for its hidden size.
   */
  prepare(w: MoeLayerWeights, rule: MoeRoutingRule): boolean {
    const d = this.dims(w);
    if (d === null) return false;
    const E = d.E;
    const k = rule.topK;
    if (E > MOE_LIMITS.maxExperts || k > MOE_LIMITS.maxTopK || k > E || rule.numGroups > MOE_LIMITS.maxGroups)
      return false;
    if (rule.correctionBias !== (w.correctionBias !== null)) return false;
    const ints = this.ctx.addon.moeDecodeSyncInts(d.H);
    if (ints > this.syncInts) {
      if (this.sync !== null) this.ctx.free(this.sync);
      this.sync = this.ctx.allocateFilled([ints], "i32", 0);
      this.syncInts = ints;
    }
    return true;
  }

  /** x: bf16 [T, H] -> bf16 [T, H]. @throws Error on shapes, dtypes, T or a block prepare() refused. */
  forward(x: Tensor, w: MoeLayerWeights, rule: MoeRoutingRule): Tensor {
    const { ctx } = this;
    const xt = ctx.dev(x, "moe.smallBatch x");
    expectShape(x, "moe.smallBatch x", [null, null]);
    expectDtype(x, "moe.smallBatch x", ["bf16"]);
    const [T, H] = [dim(x, 0), dim(x, 1)];
    const d = this.dims(w);
    if (d === null || d.H !== H) throw new Error(`moe.smallBatch: the block does not take x [${T}, ${H}]`);
    if (!(T >= 1 && T <= this.maxTokens))
      throw new Error(`moe.smallBatch: T = ${T} is outside [1, ${this.maxTokens}]`);
    const sync = this.sync;
    if (sync === null || this.ctx.addon.moeDecodeSyncInts(H) > this.syncInts)
      throw new Error("moe.smallBatch: prepare() was not called for this block");
    const { E, I, Is } = d;
    const k = rule.topK;
    const S = T * k;
    const ptr = (t: Tensor | null, what: string) => (t === null ? 0 : ctx.dev(t, what).ptr);
    const logits = ctx.out([T, E], "f32");
    const ids = ctx.out([T, k], "i32");
    const weights = ctx.out([T, k], "f32");
    const plan = ctx.out([ctx.addon.moeDecodePlanInts(T, k, E)], "i32");
    const act = ctx.out([S + T, Math.max(I, Is)], "bf16");
    const out = ctx.out([T, H], "bf16");
    const syncPtr = ctx.dev(sync, "moe.smallBatch sync").ptr;
    const [gateUp, down] = [ptr(w.gateUp, "moe.smallBatch gateUp"), ptr(w.down, "moe.smallBatch down")];
    const [sGateUp, sDown] = [
      ptr(w.shared?.gateUp ?? null, "moe.smallBatch shared gateUp"),
      ptr(w.shared?.down ?? null, "moe.smallBatch shared down"),
    ];
    ctx.addon.moeDecodeRoute(
      ctx.stream,
      xt.ptr,
      ptr(w.router, "moe.smallBatch router"),
      ptr(w.correctionBias, "moe.smallBatch correctionBias"),
      logits.ptr,
      ids.ptr,
      weights.ptr,
      plan.ptr,
      syncPtr,
      T,
      H,
      E,
      k,
      MOE_SCORING[rule.scoring],
      rule.renormalize,
      rule.numGroups,
      rule.topkGroup,
      rule.routedScalingFactor,
    );
    ctx.addon.moeDecodeGateUp(ctx.stream, xt.ptr, gateUp, sGateUp, plan.ptr, act.ptr, T, k, E, H, I, Is);
    ctx.addon.moeDecodeDown(
      ctx.stream,
      act.ptr,
      down,
      sDown,
      ids.ptr,
      weights.ptr,
      out.ptr,
      T,
      k,
      E,
      H,
      I,
      Is,
    );
    return out;
  }

  /** (E, H, I, Is) of a block whose tensors the kernels take, else null. */
  private dims(w: MoeLayerWeights): Dims | null {
    const all = [w.router, w.gateUp, w.down, w.shared?.gateUp, w.shared?.down];
    if (all.some((t) => t !== undefined && t.dtype !== "bf16")) return null;
    if (w.correctionBias !== null && w.correctionBias.dtype !== "f32") return null;
    const [E, H] = [dim(w.router, 0), dim(w.router, 1)];
    const I = dim(w.gateUp, 1) / 2;
    const same = (t: Tensor, shape: number[]) =>
      t.shape.length === shape.length && t.shape.every((v, i) => v === shape[i]);
    if (!same(w.gateUp, [E, 2 * I, H]) || !same(w.down, [E, H, I])) return null;
    let Is = 0;
    if (w.shared !== null) {
      Is = dim(w.shared.gateUp, 0) / 2;
      if (!same(w.shared.gateUp, [2 * Is, H]) || !same(w.shared.down, [H, Is])) return null;
    }
    const ok8 = (v: number) => Number.isInteger(v) && v >= 8 && v % 8 === 0;
    if (!ok8(H) || !ok8(I) || (w.shared !== null && !ok8(Is))) return null;
    return { E, H, I, Is };
  }
}
