/**
 * Set-up pieces of bench/mla_bench.ts: the GLM-5 shape cut to fit one GPU, the bytes a DSA decode
 * step must read (the roofline), the paged latent / index-key caches of a run, decode inputs, and
 * the indexer alone (logits + top-k) over a long context.
 */
import { performance } from "node:perf_hooks";
import type { AttentionMetadata, Backend, Tensor } from "../src/backends/backend.js";
import { Rng } from "../src/bench/rng.js";
import type { IndexerType } from "../src/config/mla_config.js";
import type { ModelConfig } from "../src/config/model_config.js";
import { asRequestId, type RequestId } from "../src/core/ids.js";
import { llamaWeightSpecs, normalTable } from "../src/models/dummy.js";
import { type PreparedInputs, stageAttentionMetadata } from "../src/worker/input_batch.js";
import { cutLayers } from "./moe_bench_setup.js";

/** HBM bandwidth of the roofline (H200, device/README.md: 3.9-4.3 TB/s measured copies). */
export const HBM_BPS = 4.3e12;

/**
 * The config with its first `numLayers` layers and `numExperts` routed experts (top-k unchanged,
 * so each MoE layer still activates up to top-k experts per token). Every per-layer dimension is
 * GLM-5's. `indexerShare` N > 1: one indexer per N layers (layer l "full" when l % N == 0, else
 * "shared"), the IndexShare layout of arXiv 2603.12201 (N = 4 there). @throws Error for a count
 * outside the config's, or an indexerShare on a model without a DSA indexer.
 */
export function cutGlm5(
  full: ModelConfig,
  numLayers: number,
  numExperts: number,
  indexerShare = 1,
): ModelConfig {
  const c = withIndexerShare(cutLayers(full, numLayers), indexerShare);
  const moe = c.moe;
  if (moe == null) return c;
  if (!(Number.isInteger(numExperts) && numExperts >= moe.routing.topK && numExperts <= moe.numExperts))
    throw new Error(`--num-experts must be in [${moe.routing.topK}, ${moe.numExperts}], got ${numExperts}`);
  return { ...c, moe: { ...moe, numExperts } };
}

function withIndexerShare(c: ModelConfig, n: number): ModelConfig {
  if (!(Number.isInteger(n) && n >= 1)) throw new Error(`--indexer-share must be an integer >= 1, got ${n}`);
  if (n === 1) return c;
  const mla = c.mla;
  if (mla?.indexer == null) throw new Error("--indexer-share needs a model with a DSA indexer");
  const layerTypes = Array.from(
    { length: c.numHiddenLayers },
    (_, l): IndexerType => (l % n === 0 ? "full" : "shared"),
  );
  return { ...c, mla: { ...mla, indexer: { ...mla.indexer, layerTypes } } };
}

/** Bytes of layer l's weights (bf16) outside its routed experts, and of one routed expert. */
export function layerWeightBytes(c: ModelConfig, l: number): { other: number; expert: number } {
  let other = 0;
  const prefix = `model.layers.${l}.`;
  for (const s of llamaWeightSpecs(c)) {
    if (!s.name.startsWith(prefix)) continue;
    if (/\.mlp\.experts\./.test(s.name)) continue;
    other += 2 * s.shape.reduce((a, b) => a * b, 1);
  }
  const moe = c.moe;
  return { other, expert: moe == null ? 0 : 2 * 3 * c.hiddenSize * moe.moeIntermediateSize };
}

/** Bytes of one latent row (kv_lora_rank + qk_rope_head_dim) and one index key (bf16). */
export function rowBytes(c: ModelConfig): { latent: number; indexKey: number } {
  const m = c.mla!;
  return { latent: 2 * (m.kvLoraRank + m.qkRopeHeadDim), indexKey: 2 * (m.indexer?.headDim ?? 0) };
}

/**
 * KV rows a decode step of B requests at context C must read per layer: every index key (the
 * indexer scores the whole context) and the min(C, index_topk) selected latent rows per request
 * (every latent row without DSA).
 */
export function kvBytesPerLayer(c: ModelConfig, B: number, C: number): number {
  const r = rowBytes(c);
  const ix = c.mla!.indexer;
  return ix === null ? B * C * r.latent : B * (C * r.indexKey + Math.min(C, ix.topk) * r.latent);
}

/** The caches of one run: per layer, or one pair shared by every layer when per-layer would not fit. */
export interface BenchCaches {
  latent: Tensor[];
  indexKeys: (Tensor | null)[];
  /** True when every layer reads the same tensors (too large for L2 reuse between layers to matter). */
  shared: boolean;
  free(): void;
}

/**
 * Caches for `numBlocks` blocks of `blockSize` tokens per layer; one pair for every layer when
 * N layers would take more than `budgetBytes`.
 */
export function allocateCaches(
  b: Backend,
  c: ModelConfig,
  numBlocks: number,
  blockSize: number,
  budgetBytes: number,
): BenchCaches {
  const m = c.mla!;
  const r = rowBytes(c);
  const N = c.numHiddenLayers;
  const perLayer = numBlocks * blockSize * (r.latent + r.indexKey);
  const shared = perLayer * N > budgetBytes;
  const ops = b.mla!;
  const make = () => ({
    latent: ops.allocatePagedRows(numBlocks, blockSize, m.kvLoraRank + m.qkRopeHeadDim, "bf16"),
    key: m.indexer === null ? null : ops.allocatePagedRows(numBlocks, blockSize, m.indexer.headDim, "bf16"),
  });
  const sets = shared ? [make()] : Array.from({ length: N }, make);
  const pick = (l: number) => sets[shared ? 0 : l]!;
  const full = (l: number) => m.indexer !== null && m.indexer.layerTypes[l] === "full";
  return {
    latent: Array.from({ length: N }, (_, l) => pick(l).latent),
    indexKeys: Array.from({ length: N }, (_, l) => (full(l) ? pick(l).key : null)),
    shared,
    free() {
      for (const s of sets) for (const t of [s.latent, s.key]) if (t !== null) b.free(t);
    },
  };
}

/** A decode batch of B requests at context C over blocks r * nb .. (r + 1) * nb - 1. */
export function decodeInputs(B: number, C: number, blockSize: number, vocab: number): PreparedInputs {
  const nb = Math.ceil(C / blockSize);
  const reqIds: RequestId[] = [];
  const blockTables = new Int32Array(B * nb);
  const slotMapping = new Int32Array(B);
  for (let r = 0; r < B; r++) {
    reqIds.push(asRequestId(`r${r}`));
    for (let j = 0; j < nb; j++) blockTables[r * nb + j] = r * nb + j;
    slotMapping[r] = (r * nb + Math.floor((C - 1) / blockSize)) * blockSize + ((C - 1) % blockSize);
  }
  return {
    reqIds,
    inputIds: Int32Array.from({ length: B }, (_, i) => (i * 7919 + 13) % vocab),
    positions: new Int32Array(B).fill(C - 1),
    slotMapping,
    queryStartLoc: Int32Array.from({ length: B + 1 }, (_, i) => i),
    seqLens: new Int32Array(B).fill(C),
    blockTables,
    maxBlocksPerReq: nb,
    maxQueryLen: 1,
    maxSeqLen: C,
    logitsIndices: Int32Array.from({ length: B }, (_, i) => i),
    logitsReqIdx: Int32Array.from({ length: B }, (_, i) => i),
  };
}

/** The device metadata of a batch in persistent tensors (they survive resetWorkspace); free() frees them. */
export function persistentMeta(b: Backend, x: PreparedInputs): { meta: AttentionMetadata; free(): void } {
  const staged = stageAttentionMetadata(b, x);
  const keep = (t: Tensor, data: Int32Array) => b.upload(data, [...t.shape], "i32");
  const meta: AttentionMetadata = {
    ...staged,
    queryStartLoc: keep(staged.queryStartLoc, x.queryStartLoc),
    seqLens: keep(staged.seqLens, x.seqLens),
    blockTables: keep(staged.blockTables, x.blockTables),
    slotMapping: keep(staged.slotMapping, x.slotMapping),
  };
  return {
    meta,
    free: () => {
      for (const t of [meta.queryStartLoc, meta.seqLens, meta.blockTables, meta.slotMapping]) b.free(t);
    },
  };
}

export interface IndexerRow {
  batch: number;
  context: number;
  logitsMs: number;
  topkMs: number;
  /** ms at HBM_BPS for the index keys alone. */
  rooflineMs: number;
}

/**
 * Fills `numel` bf16 elements of t with normal(0, 1) values on the device (the dummy weights'
 * counter-based table, models/dummy.ts normalTable; deterministic in `seed`), 2^28 at a time.
 */
function fillNormal(b: Backend, t: Tensor, numel: number, seed: number): void {
  const fill = {
    kind: "table",
    dtype: "bf16",
    table: normalTable(1, "bf16"),
    key0: seed,
    key1: 0x9e3779b9,
  } as const;
  const chunk = 2 ** 28;
  for (let o = 0; o < numel; o += chunk) b.fillWeight(t, o, Math.min(chunk, numel - o), fill, o);
}

/** n deterministic values uniform in [-1, 1) (src/bench/rng.ts Rng, seeded by `seed`). */
function uniform(n: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: n }, () => 2 * rng.random() - 1);
}

/**
 * One full DSA layer's indexer for a decode step of B requests at context C: logits over the
 * paged index keys (width C) and the top-k, each timed alone (mean of `reps` after a warm-up).
 * Keys normal(0, 1), queries and head weights uniform in [-1, 1): distinct logits, as a trained
 * model's are (zero keys, as before 2026-12-03, made every logit equal: the top-k's worst case).
 */
export function benchIndexer(
  b: Backend,
  c: ModelConfig,
  B: number,
  C: number,
  blockSize: number,
  reps = 10,
): IndexerRow {
  const ix = c.mla!.indexer!;
  const nb = Math.ceil(C / blockSize);
  const keys = b.mla!.allocatePagedRows(B * nb, blockSize, ix.headDim, "bf16");
  fillNormal(b, keys, B * nb * blockSize * ix.headDim, 0x51ed);
  const probe = b.upload(new Int32Array(1), [1], "i32");
  const sync = () => b.toHost(probe);
  b.resetWorkspace();
  const x = decodeInputs(B, C, blockSize, 1);
  const { meta, free } = persistentMeta(b, x);
  const q = b.upload(uniform(B * ix.numHeads * ix.headDim, 1), [B, ix.numHeads * ix.headDim], "bf16");
  const w = b.upload(uniform(B * ix.numHeads, 2), [B, ix.numHeads], "bf16");
  const pos = b.upload(x.positions, [B], "i32");
  const scales = { softmaxScale: ix.headDim ** -0.5, headWeightScale: ix.numHeads ** -0.5 };
  const width = nb * blockSize;
  const time = (fn: () => void): number => {
    fn();
    sync();
    const t = performance.now();
    for (let i = 0; i < reps; i++) fn();
    sync();
    return (performance.now() - t) / reps;
  };
  const logitsMs = time(() => {
    b.resetWorkspace();
    b.mla!.indexerLogits(q, w, keys, meta, blockSize, scales, width);
  });
  b.resetWorkspace();
  const logits = b.mla!.indexerLogits(q, w, keys, meta, blockSize, scales, width);
  const topkMs = time(() => {
    b.mla!.topkIndices(logits, pos, ix.topk);
  });
  for (const t of [keys, probe, q, w, pos]) b.free(t);
  free();
  b.resetWorkspace();
  return { batch: B, context: C, logitsMs, topkMs, rooflineMs: ((B * C * 2 * ix.headDim) / HBM_BPS) * 1e3 };
}
