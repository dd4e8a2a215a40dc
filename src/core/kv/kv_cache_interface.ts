/**
 * What the KV cache holds, as a list of groups (vLLM v1's vocabulary and file name,
 * vllm/v1/kv_cache_interface.py: a KVCacheSpec says what one layer stores per token and per
 * page; a KVCacheGroupSpec says which layers share that spec). The KV memory formula
 * (kv_memory.ts) sums these groups; nothing else in the tree computes KV bytes.
 *
 * A new KV layout is a new spec kind here (its bytes per token and per page) plus the worker's
 * allocation of it (worker/kv_cache_setup.ts); a new model family picks its specs in
 * {@link modelKVCacheGroups}; a rank count changes the heads each rank holds
 * ({@link kvHeadsPerRank}), not the formula.
 */

import { type MlaConfig, mlaKvCacheGeometry } from "../../config/mla_config.js";

/** Bytes a spec costs; every spec kind has them. */
interface SpecBytes {
  /** Bytes one token adds to one layer's page: every head and row, per-token scales included. */
  readonly bytesPerToken: number;
  /** Bytes one page of one layer costs whatever it holds (a Quest digest; 0 for plain KV rows). */
  readonly bytesPerPage: number;
  /** Bytes of one stored element (bf16: 2, fp8: 1; digests: their own dtype). */
  readonly elementBytes: number;
}

/**
 * GQA / MHA attention (vLLM FullAttentionSpec): per token a K and a V row of `numKvHeads` ×
 * `headDim` elements; on the device [numBlocks, 2, blockSize, numKvHeads, headDim] per layer
 * (DESIGN.md §7). `numKvHeads` is what one rank holds ({@link kvHeadsPerRank}).
 */
export interface FullAttentionSpec extends SpecBytes {
  readonly kind: "full_attention";
  readonly numKvHeads: number;
  readonly headDim: number;
}

/**
 * MLA attention (vLLM MLAAttentionSpec; DeepSeek-V3, GLM-5): one latent row per token of
 * `kvLoraRank + qkRopeHeadDim` elements, shared by every head, so the same on every rank:
 * [numBlocks, blockSize, kvLoraRank + qkRopeHeadDim] per layer.
 */
export interface MLAAttentionSpec extends SpecBytes {
  readonly kind: "mla_attention";
  readonly kvLoraRank: number;
  readonly qkRopeHeadDim: number;
}

/**
 * DSA lightning-indexer keys (DeepSeek-V3.2, GLM-5): one key row of `indexHeadDim` elements per
 * token, [numBlocks, blockSize, indexHeadDim] per layer that has an indexer. The indexer scores
 * every token of the context, so these rows never leave the device.
 */
export interface IndexerKeySpec extends SpecBytes {
  readonly kind: "indexer_key";
  readonly indexHeadDim: number;
}

/**
 * Quest page digests (DESIGN.md §4): per page and KV head, the element-wise min and max of the
 * page's keys, 2 × headDim elements whatever the page holds (bytesPerToken 0). Kept on the device
 * for every page of every request; allocated by the selector, not as a KV tensor.
 */
export interface PageDigestSpec extends SpecBytes {
  readonly kind: "page_digest";
  readonly numKvHeads: number;
  readonly headDim: number;
}

/** What one layer of a group stores. */
export type KVCacheSpec = FullAttentionSpec | MLAAttentionSpec | IndexerKeySpec | PageDigestSpec;

/** Layers that share one spec (vLLM KVCacheGroupSpec), and where HiSparse may keep them. */
export interface KVCacheGroupSpec {
  /** For logs and `hisparse plan`: "attention", "attention (dense layers)", "quest digest", ... */
  readonly name: string;
  readonly spec: KVCacheSpec;
  /** Decoder layers that hold this cache, ascending, each once. */
  readonly layers: readonly number[];
  /**
   * True: HiSparse may move the group's pages to the host tier (a sparse layer's K and V): a
   * page lives in the device pool while ACTIVE and has a host block always. False: every page
   * of every request stays on the device (dense layers' KV, digests, DSA indexer keys; under
   * HiSparse such groups are indexed by host block). The dense engine keeps every group in the
   * device pool either way.
   */
  readonly offloadable: boolean;
}

/** Bytes of one page (blockSize tokens) of one group, all its layers. */
export function groupPageBytes(group: KVCacheGroupSpec, blockSize: number): number {
  const s = group.spec;
  return group.layers.length * (blockSize * s.bytesPerToken + s.bytesPerPage);
}

/** Extra bytes per token and element of a quantized cache (fp8 scales); 0 for bf16 / f32. */
export interface KVQuantization {
  /** Bytes of scales one token adds to one layer (e.g. one f32 per KV head and row); default 0. */
  scaleBytesPerToken?: number;
}

/**
 * @param numKvHeads KV heads one rank holds.
 * @param elementBytes bytes per K/V element (2 for bf16 / f16, 4 for f32, 1 for fp8).
 */
export function fullAttentionSpec(
  o: { numKvHeads: number; headDim: number; elementBytes: number } & KVQuantization,
): FullAttentionSpec {
  return {
    kind: "full_attention",
    numKvHeads: o.numKvHeads,
    headDim: o.headDim,
    elementBytes: o.elementBytes,
    bytesPerToken: 2 * o.numKvHeads * o.headDim * o.elementBytes + (o.scaleBytesPerToken ?? 0),
    bytesPerPage: 0,
  };
}

/** One latent row of kvLoraRank + qkRopeHeadDim elements per token (HF DeepseekV3Config names). */
export function mlaAttentionSpec(
  o: { kvLoraRank: number; qkRopeHeadDim: number; elementBytes: number } & KVQuantization,
): MLAAttentionSpec {
  return {
    kind: "mla_attention",
    kvLoraRank: o.kvLoraRank,
    qkRopeHeadDim: o.qkRopeHeadDim,
    elementBytes: o.elementBytes,
    bytesPerToken: (o.kvLoraRank + o.qkRopeHeadDim) * o.elementBytes + (o.scaleBytesPerToken ?? 0),
    bytesPerPage: 0,
  };
}

/** One indexer key row of indexHeadDim elements per token (HF DeepseekV32Config `index_head_dim`). */
export function indexerKeySpec(
  o: { indexHeadDim: number; elementBytes: number } & KVQuantization,
): IndexerKeySpec {
  return {
    kind: "indexer_key",
    indexHeadDim: o.indexHeadDim,
    elementBytes: o.elementBytes,
    bytesPerToken: o.indexHeadDim * o.elementBytes + (o.scaleBytesPerToken ?? 0),
    bytesPerPage: 0,
  };
}

/**
 * Element type of Quest digests (HiSparse `digest_dtype`, config/hisparse_config.ts):
 * - `bf16` (default): the keys' exact min / max (the keys are bf16 on CUDA, so bf16 holds them
 *   exactly);
 * - `fp8`: e4m3 codes rounded outward (min toward -inf, max toward +inf, scale 1), so the Quest
 *   score stays an upper bound; half the bytes of bf16 (with `digest_tokens` 4, the opt-in
 *   quality setting measured in config/hisparse_budget.ts defaultDigestTokens).
 */
export type DigestDtype = "fp8" | "bf16";
export const DIGEST_DTYPES: readonly DigestDtype[] = ["bf16", "fp8"];
/** The digest dtype when `digest_dtype` is not given. */
export const DEFAULT_DIGEST_DTYPE: DigestDtype = "bf16";

/**
 * Bytes per Quest digest element on each engine: the CPU selector keeps f32 digests whatever the
 * dtype (fp8 ones hold e4m3 values); the CUDA selector stores the dtype, e4m3 bytes or bf16.
 */
export const DIGEST_ELEMENT_BYTES = { cpu: 4, cuda: { fp8: 1, bf16: 2 } } as const;

/** Bytes per Quest digest element of `dtype` on an engine ({@link DIGEST_ELEMENT_BYTES}). */
export function digestElementBytes(engine: "cpu" | "cuda", dtype: DigestDtype): number {
  return engine === "cpu" ? DIGEST_ELEMENT_BYTES.cpu : DIGEST_ELEMENT_BYTES.cuda[dtype];
}

/**
 * Quest digests of one layer's page: min and max per KV head and sub-page,
 * digestsPerPage × 2 × numKvHeads × headDim elements (digestsPerPage = blockSize / digest_tokens;
 * at 1 a digest is 2 / blockSize of K's size, at blockSize / 4 it is 1/2 of K's size, in bf16;
 * fp8 halves both).
 * @param elementBytes {@link DIGEST_ELEMENT_BYTES} of the engine.
 * @param digestsPerPage sub-page digests per page (default 1).
 */
export function pageDigestSpec(o: {
  numKvHeads: number;
  headDim: number;
  elementBytes: number;
  digestsPerPage?: number;
}): PageDigestSpec {
  return {
    kind: "page_digest",
    numKvHeads: o.numKvHeads,
    headDim: o.headDim,
    elementBytes: o.elementBytes,
    bytesPerToken: 0,
    bytesPerPage: (o.digestsPerPage ?? 1) * 2 * o.numKvHeads * o.headDim * o.elementBytes,
  };
}

/**
 * KV heads one tensor-parallel rank holds (Megatron sharding, as vLLM's
 * get_num_kv_heads): numKvHeads / tp when tp divides it; one head, replicated, when there are
 * fewer heads than ranks (each head then lives on tp / numKvHeads ranks).
 * @throws Error when neither divides the other (the heads cannot be split evenly).
 */
export function kvHeadsPerRank(numKvHeads: number, tensorParallelSize: number): number {
  const tp = tensorParallelSize;
  if (!(Number.isInteger(tp) && tp >= 1)) throw new Error(`tensor parallel size must be >= 1, got ${tp}`);
  if (numKvHeads >= tp) {
    if (numKvHeads % tp !== 0)
      throw new Error(`${numKvHeads} KV heads cannot be split over ${tp} ranks (not a multiple)`);
    return numKvHeads / tp;
  }
  if (tp % numKvHeads !== 0)
    throw new Error(`${numKvHeads} KV heads cannot be replicated over ${tp} ranks (${tp} is not a multiple)`);
  return 1;
}

/** The KV geometry of a model's attention (config/model_config.ts ModelConfig satisfies it). */
export interface KVModelGeometry {
  numHiddenLayers: number;
  numKeyValueHeads: number;
  headDim: number;
  /** MLA models (DeepSeek-V3, V3.2, GLM-5): the latent and DSA indexer dims; absent or null for GQA. */
  mla?: MlaConfig | null;
}

/** How the cache is stored: element bytes, quantization scales, ranks. */
export interface KVStorage extends KVQuantization {
  /** Bytes per K/V element (kv_cache_dtype.ts kvCacheDtypeBytes of --kv-cache-dtype). */
  elementBytes: number;
  /** Ranks the heads are split over; default 1. */
  tensorParallelSize?: number;
}

/**
 * The dense engine's groups for a model: today one full-attention group over every layer (GQA
 * families: Llama, Qwen2, Qwen3, Mistral). An MLA family gives an `mla_attention` group instead,
 * and a DSA family adds an `indexer_key` group (offloadable false) over its indexer layers: both
 * enter here, from the fields their config reader adds to the geometry.
 */
export function modelKVCacheGroups(model: KVModelGeometry, storage: KVStorage): KVCacheGroupSpec[] {
  if (model.mla != null) return mlaKVCacheGroups(model.mla, model.numHiddenLayers, storage);
  const numKvHeads = kvHeadsPerRank(model.numKeyValueHeads, storage.tensorParallelSize ?? 1);
  const spec = fullAttentionSpec({
    numKvHeads,
    headDim: model.headDim,
    elementBytes: storage.elementBytes,
    scaleBytesPerToken: storage.scaleBytesPerToken,
  });
  const layers = Array.from({ length: model.numHiddenLayers }, (_, l) => l);
  return [{ name: "attention", spec, layers, offloadable: true }];
}

/**
 * An MLA model's groups (config/mla_config.ts mlaKvCacheGeometry): the latent rows of every layer
 * (offloadable: HiSparse for DSA models keeps them in the host tier) and, for DSA models, the
 * indexer keys of the "full" layers (never offloaded: the indexer scores every token). The same
 * on every tensor-parallel rank (the latent row is shared by all heads). Block b of a request
 * names page b of both groups.
 */
function mlaKVCacheGroups(mla: MlaConfig, numLayers: number, storage: KVStorage): KVCacheGroupSpec[] {
  const g = mlaKvCacheGeometry(mla, numLayers);
  const q = { elementBytes: storage.elementBytes, scaleBytesPerToken: storage.scaleBytesPerToken };
  const latent = mlaAttentionSpec({ kvLoraRank: mla.kvLoraRank, qkRopeHeadDim: mla.qkRopeHeadDim, ...q });
  const groups: KVCacheGroupSpec[] = [
    { name: "mla latent", spec: latent, layers: g.latent.layers, offloadable: true },
  ];
  if (g.indexer !== null && g.indexer.layers.length > 0)
    groups.push({
      name: "indexer keys",
      spec: indexerKeySpec({ indexHeadDim: g.indexer.rowElements, ...q }),
      layers: g.indexer.layers,
      offloadable: false,
    });
  return groups;
}

/** What HiSparse changes in the layout (HiSparseConfig, plus the digest dtype of the backend). */
export interface HiSparseGroupOptions {
  /** Layers that attend densely over every page: their KV stays on the device. */
  denseLayers: readonly number[];
  /** Bytes per Quest digest element ({@link DIGEST_ELEMENT_BYTES} of the engine). */
  digestElementBytes: number;
  /** Quest sub-page digests per page (blockSize / digest_tokens; default 1). */
  digestsPerPage?: number;
}

/**
 * The groups as HiSparse lays them out (DESIGN.md §4): each offloadable group splits into its
 * sparse layers (offloadable: device pool + host pool) and its dense layers (kept on the device,
 * indexed by host block), and each full-attention group's sparse layers get Quest digests (on the
 * device for every page; the `quest` selector, the only one today: a DSA selector would add none,
 * its indexer keys being a group of their own). Groups that are not offloadable (indexer keys)
 * stay as they are. Empty groups are left out.
 */
export function hisparseKVCacheGroups(
  groups: readonly KVCacheGroupSpec[],
  layout: HiSparseGroupOptions,
): KVCacheGroupSpec[] {
  const dense = new Set(layout.denseLayers);
  const out: KVCacheGroupSpec[] = [];
  const digests: KVCacheGroupSpec[] = [];
  for (const g of groups) {
    if (!g.offloadable) {
      out.push(g);
      continue;
    }
    const sparseLayers = g.layers.filter((l) => !dense.has(l));
    const denseLayers = g.layers.filter((l) => dense.has(l));
    if (sparseLayers.length > 0) out.push({ ...g, layers: sparseLayers });
    if (denseLayers.length > 0)
      out.push({ ...g, name: `${g.name} (dense layers)`, layers: denseLayers, offloadable: false });
    if (g.spec.kind === "full_attention" && sparseLayers.length > 0) {
      const spec = pageDigestSpec({
        ...g.spec,
        elementBytes: layout.digestElementBytes,
        digestsPerPage: layout.digestsPerPage,
      });
      digests.push({ name: "quest digest", spec, layers: sparseLayers, offloadable: false });
    }
  }
  return [...out, ...digests];
}
