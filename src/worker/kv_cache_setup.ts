/**
 * The KV set-up contract: every way of laying out the KV cache (dense on CPU or CUDA, HiSparse
 * on CPU or CUDA, and the MLA / DSA layouts and tensor-parallel ranks to come) sizes its pools
 * with the one KV memory formula (core/kv/kv_memory.ts) and returns one {@link KVCacheSetup},
 * which `ModelRunner`'s constructor takes whole. The set-up for a backend and a feature is
 * chosen from the table of worker/kv_cache_registry.ts.
 */
import type { AttentionBackend } from "../attention/backend.js";
import type { MlaAttentionBackend } from "../attention/mla.js";
import type { Backend, DType, QkvLayout, Tensor } from "../backends/backend.js";
import { ConfigError, type EngineArgs } from "../config/engine_args.js";
import type { HiSparseConfig } from "../config/hisparse_config.js";
import type { ModelConfig } from "../config/model_config.js";
import type { KVCacheGroupSpec } from "../core/kv/kv_cache_interface.js";
import type { WorkerExtension } from "./extension.js";

/** What a set-up is built from (the worker has loaded the model). */
export interface KVCacheSetupContext {
  model: { config: ModelConfig; layout: QkvLayout };
  args: EngineArgs;
  /** `--kv-cache-dtype`, "auto" resolved to the backend's activation dtype. */
  kvCacheDtype: DType;
  /** Device bytes for the KV cache when `--num-gpu-blocks-override` is not given. */
  deviceBudgetBytes: number;
  /** The engine's max model length (sizes per-request tables). */
  maxModelLen: number;
  /**
   * Benchmarks only (never set by the engine): DSA HiSparse rewrites each selection to keep a
   * fraction of the previous step's rows (attention/sparse/dsa.ts SelectionOverlap), since
   * dummy-weight indexers change their picks every step.
   */
  benchmark?: { selectionOverlap: number; seed?: number };
}

/** HiSparse's pools and layers, as WorkerInfo.hisparse reports them. */
export interface HiSparseWorkerInfo {
  numHostBlocks: number;
  /** Host bytes of one page (every sparse layer). */
  hostBytesPerBlock: number;
  /** Device bytes each host page costs (dense-layer KV and digests). */
  deviceBytesPerHostBlock: number;
  denseLayers: number[];
  sparseLayers: number[];
  /**
   * The settings in effect when the model derives them from the user's (DSA models:
   * config/hisparse_dsa.ts; the scheduler side is built from them); absent = the user's.
   */
  config?: HiSparseConfig;
  /**
   * The attention reads a prefilling request's host-resident pages from the host tier (DSA
   * set-ups: BackendMlaOps.attention's SpilledRows), so the scheduler may spill them mid-prefill.
   */
  prefillReadsHostTier?: boolean;
}

/** What the worker reports about the KV cache (WorkerInfo fields). */
export interface KVCacheInfo {
  /** Bytes of one device-pool block (all layers; with HiSparse, the sparse layers). */
  kvBytesPerBlock: number;
  /** HiSparse pools and layers, or null when HiSparse is off. */
  hisparse: HiSparseWorkerInfo | null;
}

/** The set-up's start-up log entry (`hisparse serve` logs it). */
export interface KVCacheDescription {
  /** Name of the fields in JSON logs ("kv_cache", "hisparse"). */
  key: string;
  /** One line, e.g. "KV cache: 512 blocks of 16 tokens (32.00 MiB), ...". */
  line: string;
  fields: Record<string, string | number>;
  /** "info" to log at start-up; "debug" when the serving line already says it (the dense pool). */
  logLevel: "info" | "debug";
}

/** A laid-out KV cache, ready for ModelRunner (which owns it from then on). */
export interface KVCacheSetup {
  /** Tokens per block. */
  readonly blockSize: number;
  /** Blocks of the device pool (the scheduler's BlockPool). */
  readonly numGpuBlocks: number;
  /** The groups as laid out (core/kv/kv_cache_interface.ts). */
  readonly groups: readonly KVCacheGroupSpec[];
  /** [numLayers] the cache tensor each layer's attention reads and writes. */
  readonly kvCaches: readonly Tensor[];
  /** How attention uses the caches (dense paged, HiSparse...). */
  readonly attention: AttentionBackend;
  /** MLA models: how their layers use the latent (and indexer key) caches; null for GQA models. */
  readonly mla: MlaKVCache | null;
  /** The worker halves of the optional features this set-up enables. */
  readonly extensions: readonly WorkerExtension[];
  readonly info: KVCacheInfo;
  readonly description: KVCacheDescription;
  /** Frees what the extensions hold, then the caches. */
  dispose(): void;
}

/** An MLA model's attention side of a set-up (models/blocks.ts ForwardContext mlaAttention, indexerKeyCaches). */
export interface MlaKVCache {
  readonly attention: MlaAttentionBackend;
  /** [numLayers] the DSA indexer key cache [numBlocks, blockSize, indexHeadDim] of a full layer, else null. */
  readonly indexerKeyCaches: readonly (Tensor | null)[];
}

/** Where each group's pages are indexed, in blocks (device pool, or host pool under HiSparse). */
export type BlocksOfGroup = (group: KVCacheGroupSpec) => number;

/**
 * Allocates the KV tensors of `groups` that attention reads as a layer's cache: per layer one
 * tensor of `numBlocksOf(group)` blocks (full attention: [numBlocks, 2, blockSize, numKvHeads,
 * headDim], Backend.allocateKvCache; MLA latent rows: [numBlocks, blockSize, kvLoraRank +
 * qkRopeHeadDim], Backend.mla.allocatePagedRows). Page digests are not KV tensors (their selector
 * allocates them) and DSA indexer keys have their own per-layer list
 * ({@link allocateIndexerKeyCaches}).
 * @returns [numLayers] each layer's tensor.
 * @throws ConfigError for a layout the backend cannot allocate.
 */
export function allocateGroupCaches(
  backend: Backend,
  groups: readonly KVCacheGroupSpec[],
  o: {
    numLayers: number;
    blockSize: number;
    dtype: DType;
    numBlocksOf: BlocksOfGroup;
    /** `--calculate-kv-scales` (KvCacheSpec.calculateScales; fp8 caches only). */
    calculateScales?: boolean;
  },
): Tensor[] {
  const kvCaches: Tensor[] = new Array(o.numLayers);
  for (const g of groups) {
    const s = g.spec;
    if (s.kind === "page_digest" || s.kind === "indexer_key") continue;
    let tensors: Tensor[];
    if (s.kind === "mla_attention") {
      const rows = s.kvLoraRank + s.qkRopeHeadDim;
      const ops = mlaOps(backend, g);
      tensors = g.layers.map(() => ops.allocatePagedRows(o.numBlocksOf(g), o.blockSize, rows, o.dtype));
    } else
      tensors = backend.allocateKvCache({
        numLayers: g.layers.length,
        numBlocks: o.numBlocksOf(g),
        blockSize: o.blockSize,
        numKvHeads: s.numKvHeads,
        headDim: s.headDim,
        dtype: o.dtype,
        ...(o.calculateScales === true ? { calculateScales: true } : {}),
      });
    g.layers.forEach((l, i) => {
      kvCaches[l] = tensors[i]!;
    });
  }
  return kvCaches;
}

/**
 * Allocates the DSA indexer key groups: per layer that has one, [numBlocks, blockSize,
 * indexHeadDim] (Backend.mla.allocatePagedRows), indexed by the same block ids as the latent rows.
 * @returns [numLayers] each full DSA layer's tensor, null elsewhere; null when no group is one.
 */
export function allocateIndexerKeyCaches(
  backend: Backend,
  groups: readonly KVCacheGroupSpec[],
  o: { numLayers: number; blockSize: number; dtype: DType; numBlocksOf: BlocksOfGroup },
): (Tensor | null)[] | null {
  const indexer = groups.filter((g) => g.spec.kind === "indexer_key");
  if (indexer.length === 0) return null;
  const caches: (Tensor | null)[] = new Array(o.numLayers).fill(null);
  for (const g of indexer) {
    if (g.spec.kind !== "indexer_key") continue;
    const ops = mlaOps(backend, g);
    for (const l of g.layers)
      caches[l] = ops.allocatePagedRows(o.numBlocksOf(g), o.blockSize, g.spec.indexHeadDim, o.dtype);
  }
  return caches;
}

/** The backend's MLA ops. @throws ConfigError when it has none. */
function mlaOps(backend: Backend, g: KVCacheGroupSpec): NonNullable<Backend["mla"]> {
  if (backend.mla === undefined)
    throw new ConfigError([
      `the ${g.spec.kind} KV layout (${g.name}) cannot be allocated on ${backend.name} yet`,
    ]);
  return backend.mla;
}

/** A set-up's dispose: the extensions' resources first, then the caches. */
export function disposeKVCache(
  backend: Backend,
  kvCaches: readonly Tensor[],
  extensions: readonly WorkerExtension[],
): () => void {
  return () => {
    for (const ext of extensions) ext.dispose?.();
    for (const t of kvCaches) backend.free(t);
  };
}
