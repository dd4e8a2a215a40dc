import { PAD_SLOT_ID } from "../../core/ids.js";
import type {
  AttentionMetadata,
  BackendMlaOps,
  DType,
  IndexerScales,
  MlaDims,
  RotarySpan,
  SpilledRows,
  Tensor,
} from "../backend.js";
import { checkAttentionMetadata, cpu, expectShape } from "./checks.js";
import { indexerLogitsKernel, topkIndicesKernel } from "./kernels/dsa.js";
import {
  layerNormKernel,
  type MlaStepRows,
  mlaAttentionKernel,
  rotaryStridedKernel,
  writeRowsKernel,
} from "./kernels/mla.js";
import type { CpuMemory } from "./memory.js";
import type { CpuTensor } from "./tensor.js";

/**
 * The CPU backend's MLA and DSA indexer ops (Backend.mla; contract in ../backend.ts): f32 row
 * caches, MLA attention in the expanded form (kernels/mla.ts), indexer logits and the causal
 * top-k (kernels/dsa.ts). Single-threaded: the tiny parity models and the tests are what run
 * here; a long-context MLA model belongs on the GPU. Workspace results, valid until the
 * backend's resetWorkspace().
 */
export class CpuMlaOps implements BackendMlaOps {
  constructor(private readonly mem: CpuMemory) {}

  /** A zeroed f32 [numBlocks, blockSize, rowWidth]. @throws Error for a dtype other than f32. */
  allocatePagedRows(numBlocks: number, blockSize: number, rowWidth: number, dtype: DType): Tensor {
    if (dtype !== "f32") throw new Error(`the CPU backend keeps its KV cache in f32, got ${dtype}`);
    return this.mem.allocPersistent([numBlocks, blockSize, rowWidth], "f32");
  }

  /** x: [T, W] -> [T, width]. @throws Error when the columns are outside the row. */
  sliceColumns(x: Tensor, start: number, width: number): Tensor {
    const xc = cpu(x, this.mem, "mla.sliceColumns x");
    const [T, W] = expectShape(xc, 2, "mla.sliceColumns x");
    if (
      !(Number.isInteger(start) && Number.isInteger(width) && start >= 0 && width >= 0 && start + width <= W)
    )
      throw new Error(`mla.sliceColumns: columns [${start}, ${start + width}) are outside a row of ${W}`);
    const out = this.mem.allocWorkspace([T, width], "f32");
    for (let t = 0; t < T; t++) out.f32.set(xc.f32.subarray(t * W + start, t * W + start + width), t * width);
    return out;
  }

  /** x: [T, n]; weight, bias: [n] -> [T, n]. */
  layerNorm(x: Tensor, weight: Tensor, bias: Tensor, eps: number): Tensor {
    const xc = cpu(x, this.mem, "mla.layerNorm x");
    const [T, n] = expectShape(xc, 2, "mla.layerNorm x");
    const w = cpu(weight, this.mem, "mla.layerNorm weight");
    const b = cpu(bias, this.mem, "mla.layerNorm bias");
    expectShape(w, [n], "mla.layerNorm weight");
    expectShape(b, [n], "mla.layerNorm bias");
    const out = this.mem.allocWorkspace([T, n], "f32");
    layerNormKernel(xc.f32, w.f32, b.f32, out.f32, T, n, eps);
    return out;
  }

  /** In place. x: [T, W]; positions: i32 [T]; cosSinCache: [maxPositions, R]. */
  rotaryStrided(
    x: Tensor,
    span: RotarySpan,
    positions: Tensor,
    cosSinCache: Tensor,
    interleaved: boolean,
  ): void {
    const xc = cpu(x, this.mem, "mla.rotaryStrided x");
    const [T, W] = expectShape(xc, 2, "mla.rotaryStrided x");
    const pos = cpu(positions, this.mem, "mla.rotaryStrided positions", false, "i32");
    expectShape(pos, [T], "mla.rotaryStrided positions");
    const cs = cpu(cosSinCache, this.mem, "mla.rotaryStrided cosSinCache");
    const [maxPos, R] = expectShape(cs, 2, "mla.rotaryStrided cosSinCache");
    const { offset, stride, count } = span;
    if (R % 2 !== 0 || offset < 0 || count < 1 || offset + (count - 1) * stride + R > W)
      throw new Error(
        `mla.rotaryStrided: ${count} heads of ${R} at ${offset} + h * ${stride} do not fit a row of ${W}`,
      );
    rotaryStridedKernel(xc.f32, T, W, offset, stride, count, R, pos.i32, cs.f32, maxPos, interleaved);
  }

  /** src: [T, W]; cache: [numBlocks, blockSize, rowWidth]; slotMapping: i32 [T]. */
  writeRows(src: Tensor, cache: Tensor, dstColumn: number, slotMapping: Tensor): void {
    const s = cpu(src, this.mem, "mla.writeRows src");
    const [T, W] = expectShape(s, 2, "mla.writeRows src");
    const c = cpu(cache, this.mem, "mla.writeRows cache");
    const [nb, bs, rowWidth] = expectShape(c, [-1, -1, -1], "mla.writeRows cache") as [
      number,
      number,
      number,
    ];
    if (dstColumn < 0 || dstColumn + W > rowWidth)
      throw new Error(
        `mla.writeRows: columns [${dstColumn}, ${dstColumn + W}) are outside a row of ${rowWidth}`,
      );
    const slots = cpu(slotMapping, this.mem, "mla.writeRows slotMapping", false, "i32");
    expectShape(slots, [T], "mla.writeRows slotMapping");
    writeRowsKernel(s.f32, T, W, c.f32, rowWidth, dstColumn, slots.i32, nb * bs, PAD_SLOT_ID);
  }

  /** q: [T, Hq * (N + R)] -> [T, Hq * Vd] (expanded form). */
  attention(
    q: Tensor,
    latentCache: Tensor,
    kvBProj: Tensor,
    meta: AttentionMetadata,
    dims: MlaDims,
    blockSize: number,
    topkIndices: Tensor | null,
    spilled: SpilledRows | null = null,
  ): Tensor {
    const { numHeads: Hq, qkNopeHeadDim: N, qkRopeHeadDim: R, vHeadDim: Vd, kvLoraRank: C } = dims;
    const qc = cpu(q, this.mem, "mla.attention q");
    const T = expectShape(qc, [-1, Hq * (N + R)], "mla.attention q")[0]!;
    const cache = cpu(latentCache, this.mem, "mla.attention latentCache");
    expectShape(cache, [-1, blockSize, C + R], "mla.attention latentCache");
    const w = cpu(kvBProj, this.mem, "mla.attention kvBProj");
    expectShape(w, [Hq * (N + Vd), C], "mla.attention kvBProj");
    const rows = this.stepRows(meta, T, cache, blockSize, spilled?.requests ?? null);
    if (spilled !== null) rows.spilled = this.spilledRows(spilled, meta.numReqs, blockSize, C + R);
    let sel: CpuTensor | null = null;
    if (topkIndices !== null) {
      sel = cpu(topkIndices, this.mem, "mla.attention topkIndices", false, "i32");
      expectShape(sel, [T, -1], "mla.attention topkIndices");
    }
    const out = this.mem.allocWorkspace([T, Hq * Vd], "f32");
    const d = { Hq, N, R, Vd, C, scale: dims.softmaxScale };
    mlaAttentionKernel(qc.f32, cache.f32, w.f32, out.f32, rows, d, sel?.i32 ?? null, sel?.shape[1] ?? 0);
    return out;
  }

  /** q: [T, Hi * Di]; headWeights: [T, Hi]; indexKeyCache: [numBlocks, blockSize, Di] -> f32 [T, width]. */
  indexerLogits(
    q: Tensor,
    headWeights: Tensor,
    indexKeyCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
    scales: IndexerScales,
    width: number,
  ): Tensor {
    const keys = cpu(indexKeyCache, this.mem, "mla.indexerLogits indexKeyCache");
    const Di = expectShape(keys, [-1, blockSize, -1], "mla.indexerLogits indexKeyCache")[2]!;
    const w = cpu(headWeights, this.mem, "mla.indexerLogits headWeights");
    const [T, Hi] = expectShape(w, 2, "mla.indexerLogits headWeights");
    const qc = cpu(q, this.mem, "mla.indexerLogits q");
    expectShape(qc, [T, Hi * Di], "mla.indexerLogits q");
    if (!(Number.isInteger(width) && width >= meta.maxSeqLen))
      throw new Error(
        `mla.indexerLogits: width ${width} is below the step's longest context (${meta.maxSeqLen})`,
      );
    const rows = this.stepRows(meta, T, keys, blockSize);
    const out = this.mem.allocWorkspace([T, width], "f32");
    indexerLogitsKernel(qc.f32, w.f32, keys.f32, out.f32, width, rows, { Hi, Di, ...scales });
    return out;
  }

  /** logits: f32 [T, width]; positions: i32 [T] -> i32 [T, k]. */
  topkIndices(logits: Tensor, positions: Tensor, k: number): Tensor {
    const l = cpu(logits, this.mem, "mla.topkIndices logits");
    const [T, width] = expectShape(l, 2, "mla.topkIndices logits");
    const pos = cpu(positions, this.mem, "mla.topkIndices positions", false, "i32");
    expectShape(pos, [T], "mla.topkIndices positions");
    if (!(Number.isInteger(k) && k >= 1))
      throw new Error(`mla.topkIndices: k must be a positive integer, got ${k}`);
    const out = this.mem.allocWorkspace([T, k], "i32");
    topkIndicesKernel(l.f32, width, pos.i32, T, k, out.i32);
    return out;
  }

  /**
   * Host views of SpilledRows. @throws Error when hostRows is not [numHostBlocks, blockSize, w] or
   * hostBlockTables not i32 [numReqs, -1] naming host blocks.
   */
  private spilledRows(
    sp: SpilledRows,
    numReqs: number,
    blockSize: number,
    w: number,
  ): MlaStepRows["spilled"] {
    const host = cpu(sp.hostRows, this.mem, "mla.attention spilled.hostRows");
    const numHostBlocks = expectShape(host, [-1, blockSize, w], "mla.attention spilled.hostRows")[0]!;
    const tables = cpu(sp.hostBlockTables, this.mem, "mla.attention spilled.hostBlockTables", false, "i32");
    const width = expectShape(tables, [numReqs, -1], "mla.attention spilled.hostBlockTables")[1]!;
    for (const h of tables.i32)
      if (h < 0 || h >= numHostBlocks)
        throw new Error(
          `mla.attention: spilled.hostBlockTables names host block ${h}, outside [0, ${numHostBlocks})`,
        );
    return { hostRows: host.f32, hostBlockTables: tables.i32, maxHostBlocksPerReq: width };
  }

  /** Host views of the step's metadata, checked against a row cache of blockSize-token blocks. */
  private stepRows(
    meta: AttentionMetadata,
    T: number,
    cache: CpuTensor,
    blockSize: number,
    spilledReqs: Uint8Array | null = null,
  ): MlaStepRows {
    const m = checkAttentionMetadata(meta, this.mem, T, cache.shape[0]!, blockSize, spilledReqs);
    return {
      queryStartLoc: m.qsl.i32,
      seqLens: m.seqLens.i32,
      blockTables: m.blockTables.i32,
      maxBlocksPerReq: m.maxBlocksPerReq,
      numReqs: meta.numReqs,
      blockSize,
    };
  }
}
