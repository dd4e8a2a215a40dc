/**
 * The KV set-up contract: every way of laying out the KV cache (dense on CPU or CUDA, HiSparse
 * on CPU or CUDA, and the MLA / DSA layouts and tensor-parallel ranks to come) sizes its pools
 * with the one KV memory formula (core/kv/kv_memory.ts) and returns one {@link KVCacheSetup},
 * which `ModelRunner`'s constructor takes whole. The set-up for a backend and a feature is
 * chosen from the table of worker/kv_cache_registry.ts.
 */
import type { AttentionBackend } from "../attention/backend.js";
import type { Backend, DType, QkvLayout, Tensor } from "../backends/backend.js";
import { ConfigError, type EngineArgs } from "../config/engine_args.js";
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
  /** The worker halves of the optional features this set-up enables. */
  readonly extensions: readonly WorkerExtension[];
  readonly info: KVCacheInfo;
  readonly description: KVCacheDescription;
  /** Frees what the extensions hold, then the caches. */
  dispose(): void;
}

/** Where each group's pages are indexed, in blocks (device pool, or host pool under HiSparse). */
export type BlocksOfGroup = (group: KVCacheGroupSpec) => number;

/**
 * Allocates the KV tensors of `groups`: per layer one tensor of `numBlocksOf(group)` blocks
 * (full attention: [numBlocks, 2, blockSize, numKvHeads, headDim], Backend.allocateKvCache).
 * Page digests are not KV tensors: their selector allocates them. This is where a new layout
 * (MLA latent rows, DSA indexer keys) gets its allocation.
 * @returns [numLayers] each layer's tensor.
 * @throws ConfigError for a layout the backends cannot allocate yet.
 */
export function allocateGroupCaches(
  backend: Backend,
  groups: readonly KVCacheGroupSpec[],
  o: { numLayers: number; blockSize: number; dtype: DType; numBlocksOf: BlocksOfGroup },
): Tensor[] {
  const kvCaches: Tensor[] = new Array(o.numLayers);
  for (const g of groups) {
    const s = g.spec;
    if (s.kind === "page_digest") continue;
    if (s.kind !== "full_attention")
      throw new ConfigError([
        `the ${s.kind} KV layout (${g.name}) cannot be allocated on ${backend.name} yet`,
      ]);
    const tensors = backend.allocateKvCache({
      numLayers: g.layers.length,
      numBlocks: o.numBlocksOf(g),
      blockSize: o.blockSize,
      numKvHeads: s.numKvHeads,
      headDim: s.headDim,
      dtype: o.dtype,
    });
    g.layers.forEach((l, i) => {
      kvCaches[l] = tensors[i]!;
    });
  }
  return kvCaches;
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
