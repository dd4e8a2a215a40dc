import type { MoeRoutingRule } from "../../config/moe_config.js";
import type { BackendMoeOps, MoePermutation, MoeRouting, Tensor } from "../backend.js";
import { cpu, expectShape } from "./checks.js";
import type { KernelDispatcher } from "./dispatch.js";
import { permuteKernel, routeKernel, routeScratch, unpermuteKernel } from "./kernels/moe.js";
import type { CpuMemory } from "./memory.js";
import type { CpuTensor } from "./tensor.js";

/**
 * The CPU backend's mixture-of-experts ops (Backend.moe; contract in ../backend.ts): fp32
 * routing, a counting-sort permutation with P = T * k rows, the expert matmuls through the
 * linear kernel (threaded like linear, same bits per row), and the weighted un-permute.
 * Workspace tensors, valid until the backend's resetWorkspace().
 */
export class CpuMoeOps implements BackendMoeOps {
  constructor(
    private readonly mem: CpuMemory,
    private readonly kernels: KernelDispatcher,
  ) {}

  /**
   * logits: f32 [T, E]; correctionBias: f32 [E] | null -> ids i32 [T, k], weights f32 [T, k].
   * @throws Error on shapes, a bias given or missing against rule.correctionBias, or a rule
   *   that cannot pick k experts.
   */
  route(logits: Tensor, rule: MoeRoutingRule, correctionBias: Tensor | null): MoeRouting {
    const l = cpu(logits, this.mem, "moe.route logits");
    const [T, E] = expectShape(l, 2, "moe.route logits");
    const k = rule.topK;
    if (!(Number.isInteger(k) && k >= 1 && k <= E))
      throw new Error(`moe.route: topK ${k} is outside [1, ${E}]`);
    const G = rule.numGroups;
    if (
      !(G >= 1 && E % G === 0 && rule.topkGroup >= 1 && rule.topkGroup <= G && k <= rule.topkGroup * (E / G))
    )
      throw new Error(
        `moe.route: ${G} groups / topkGroup ${rule.topkGroup} cannot pick ${k} of ${E} experts`,
      );
    if (rule.correctionBias !== (correctionBias !== null))
      throw new Error(`moe.route: the rule ${rule.correctionBias ? "needs" : "has no"} a correction bias`);
    const bias = correctionBias === null ? null : cpu(correctionBias, this.mem, "moe.route correctionBias");
    if (bias !== null) expectShape(bias, [E], "moe.route correctionBias");
    const topkIds = this.mem.allocWorkspace([T, k], "i32");
    const topkWeights = this.mem.allocWorkspace([T, k], "f32");
    const scratch = routeScratch(E, G, k);
    routeKernel(l.f32, bias?.f32 ?? null, T, E, rule, topkIds.i32, topkWeights.f32, scratch);
    return { topkIds, topkWeights };
  }

  /** x: f32 [T, H]; topkIds: i32 [T, k] -> hidden [T*k, H], offsets [E + 1], slotToRow [T, k]. */
  permute(x: Tensor, topkIds: Tensor, numExperts: number): MoePermutation {
    const xc = cpu(x, this.mem, "moe.permute x");
    const [T, H] = expectShape(xc, 2, "moe.permute x");
    const ids = cpu(topkIds, this.mem, "moe.permute topkIds", false, "i32");
    const k = expectShape(ids, [T, -1], "moe.permute topkIds")[1]!;
    if (!(Number.isInteger(numExperts) && numExperts >= 1))
      throw new Error(`moe.permute: numExperts must be a positive integer, got ${numExperts}`);
    const hidden = this.mem.allocWorkspace([T * k, H], "f32");
    const expertOffsets = this.mem.allocWorkspace([numExperts + 1], "i32");
    const slotToRow = this.mem.allocWorkspace([T, k], "i32");
    permuteKernel(xc.f32, T, H, ids.i32, k, numExperts, hidden.f32, expertOffsets.i32, slotToRow.i32);
    return { hidden, expertOffsets, slotToRow };
  }

  /**
   * x: f32 [P, K]; weight: f32 [E, N, K]; expertOffsets: i32 [E + 1] -> [P, N] (rows outside
   * every segment are zero). @throws Error on shapes or offsets that are not ascending within [0, P].
   */
  groupedLinear(x: Tensor, weight: Tensor, expertOffsets: Tensor): Tensor {
    const xc = cpu(x, this.mem, "moe.groupedLinear x");
    const [P, K] = expectShape(xc, 2, "moe.groupedLinear x");
    const w = cpu(weight, this.mem, "moe.groupedLinear weight");
    const [E, N] = expectShape(w, [-1, -1, K], "moe.groupedLinear weight") as [number, number];
    const off = cpu(expertOffsets, this.mem, "moe.groupedLinear expertOffsets", false, "i32");
    expectShape(off, [E + 1], "moe.groupedLinear expertOffsets");
    checkOffsets(off, P);
    const out: CpuTensor = this.mem.allocWorkspace([P, N], "f32");
    out.f32.fill(0);
    this.kernels.groupedLinear(xc, w, off.i32, out, E, N, K);
    return out;
  }

  /** y: f32 [P, H]; slotToRow: i32 [T, k]; topkWeights: f32 [T, k]; shared: [T, H] | null -> [T, H]. */
  unpermute(y: Tensor, slotToRow: Tensor, topkWeights: Tensor, shared: Tensor | null): Tensor {
    const yc = cpu(y, this.mem, "moe.unpermute y");
    const [P, H] = expectShape(yc, 2, "moe.unpermute y");
    const rows = cpu(slotToRow, this.mem, "moe.unpermute slotToRow", false, "i32");
    const [T, k] = expectShape(rows, 2, "moe.unpermute slotToRow");
    const w = cpu(topkWeights, this.mem, "moe.unpermute topkWeights");
    expectShape(w, [T, k], "moe.unpermute topkWeights");
    const s = shared === null ? null : cpu(shared, this.mem, "moe.unpermute shared");
    if (s !== null) expectShape(s, [T, H], "moe.unpermute shared");
    const out = this.mem.allocWorkspace([T, H], "f32");
    unpermuteKernel(yc.f32, P, H, rows.i32, w.f32, T, k, s?.f32 ?? null, out.f32);
    return out;
  }
}

/** @throws Error unless offsets start at 0, never decrease and end at most at P. */
function checkOffsets(off: CpuTensor, P: number): void {
  const o = off.i32;
  if (o[0] !== 0) throw new Error(`moe.groupedLinear: expertOffsets[0] is ${o[0]}, not 0`);
  for (let e = 1; e < o.length; e++) {
    if (o[e]! < o[e - 1]! || o[e]! > P)
      throw new Error(`moe.groupedLinear: expertOffsets[${e}] = ${o[e]} is outside [${o[e - 1]}, ${P}]`);
  }
}
