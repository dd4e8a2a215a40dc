/**
 * Which KV set-up runs: a table keyed by backend and feature. The feature comes from the engine
 * arguments (the first of {@link KV_CACHE_FEATURES} they enable, else "dense"); the entry for the
 * backend and that feature builds the {@link KVCacheSetup}. Each entry receives its backend as
 * its own class (backends/registry.ts backendOfKind), so a CUDA set-up takes a CudaBackend with
 * no cast. A new layout, feature or backend is a new row here and a new set-up function.
 */
import type { Backend } from "../backends/backend.js";
import { type BackendKinds, type BackendName, backendOfKind } from "../backends/registry.js";
import { ConfigError, type EngineArgs } from "../config/engine_args.js";
import { type HiSparseConfig, hisparseConfigOf } from "../config/hisparse_config.js";
import { setupDenseKVCache } from "./dense_kv_setup.js";
import { setupCudaHiSparse } from "./hisparse/cuda/setup_cuda.js";
import { setupHiSparse } from "./hisparse/setup.js";
import type { KVCacheSetup, KVCacheSetupContext } from "./kv_cache_setup.js";

/** An optional KV feature: its name and its settings in the engine arguments (null: off). */
export interface KVCacheFeature<C> {
  readonly name: string;
  configOf(args: EngineArgs): C | null;
}

/** The dense engine: always on, the fallback when no optional feature is. */
export const DENSE_KV: KVCacheFeature<true> = { name: "dense", configOf: () => true };

/** Hybrid HiSparse (`--enable-hybrid-sparse auto|on`). */
export const HISPARSE_KV: KVCacheFeature<HiSparseConfig> = {
  name: "hisparse",
  configOf: (args) => hisparseConfigOf(args.extensions),
};

/** Optional features, the first one enabled wins. */
export const KV_CACHE_FEATURES: readonly KVCacheFeature<unknown>[] = [HISPARSE_KV];

/** One row of the table: a backend, a feature and the set-up that serves them. */
export interface KVCacheSetupEntry {
  readonly backend: BackendName;
  readonly feature: string;
  /** Builds the set-up on `backend` (whose name is `this.backend`) for the feature's settings. */
  create(backend: Backend, ctx: KVCacheSetupContext): KVCacheSetup;
}

/**
 * A table row whose set-up is typed for its backend's class and its feature's settings.
 * @throws Error (from `create`) when the backend is not the named one or the feature is off:
 *   {@link createKVCacheSetup} never calls it so.
 */
export function kvCacheSetupEntry<N extends BackendName, C>(
  backend: N,
  feature: KVCacheFeature<C>,
  setup: (backend: BackendKinds[N], ctx: KVCacheSetupContext, config: C) => KVCacheSetup,
): KVCacheSetupEntry {
  return {
    backend,
    feature: feature.name,
    create(b, ctx) {
      const typed = backendOfKind(b, backend);
      const config = feature.configOf(ctx.args);
      if (typed === null || config === null)
        throw new Error(
          `the ${backend}/${feature.name} KV set-up was asked for ${b.name}/${feature.name} off`,
        );
      return setup(typed, ctx, config);
    },
  };
}

/** Every KV set-up, keyed by (backend, feature). */
export const KV_CACHE_SETUPS: readonly KVCacheSetupEntry[] = [
  kvCacheSetupEntry("cpu", DENSE_KV, setupDenseKVCache),
  kvCacheSetupEntry("cuda", DENSE_KV, setupDenseKVCache),
  kvCacheSetupEntry("cpu", HISPARSE_KV, setupHiSparse),
  kvCacheSetupEntry("cuda", HISPARSE_KV, setupCudaHiSparse),
];

/** The feature the arguments enable: the first optional one that is on, else dense. */
export function kvCacheFeatureOf(args: EngineArgs): string {
  return KV_CACHE_FEATURES.find((f) => f.configOf(args) !== null)?.name ?? DENSE_KV.name;
}

/**
 * Builds the KV set-up for `backend` and the feature `ctx.args` enable, from `table`.
 * @throws ConfigError when no set-up serves that backend and feature, or the set-up's own
 *   ConfigError (every reason the settings cannot work: model, dtype, memory).
 */
export function createKVCacheSetup(
  backend: Backend,
  ctx: KVCacheSetupContext,
  table: readonly KVCacheSetupEntry[] = KV_CACHE_SETUPS,
): KVCacheSetup {
  const feature = kvCacheFeatureOf(ctx.args);
  const entry = table.find((e) => e.backend === backend.name && e.feature === feature);
  if (entry === undefined)
    throw new ConfigError([`the ${backend.name} backend has no KV cache set-up for ${feature}`]);
  return entry.create(backend, ctx);
}
