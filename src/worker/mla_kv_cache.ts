import type { Backend, DType, Tensor } from "../backends/backend.js";
import { DTYPE_BYTES } from "../backends/backend.js";
import { type MlaKvGeometry, mlaKvCacheGeometry } from "../config/mla_config.js";
import type { ModelConfig } from "../config/model_config.js";

/** The KV caches of an MLA model on the device, per layer. */
export interface MlaKvCaches {
  /** Per layer, the latent rows [numBlocks, blockSize, kvLoraRank + qkRopeHeadDim]. */
  latent: Tensor[];
  /** Per layer, the DSA indexer keys [numBlocks, blockSize, indexHeadDim] of a full layer; null elsewhere. */
  indexerKeys: (Tensor | null)[];
  /** The geometry they follow (config/mla_config.ts). */
  geometry: MlaKvGeometry;
}

/**
 * Allocates the dense engine's KV cache of an MLA model (DESIGN.md §7): for every layer a
 * latent group tensor, for every full DSA layer an indexer key group tensor, each with
 * `numBlocks` pages of `blockSize` tokens. Block b of a request names page b of every group, so
 * the scheduler's block tables and slot mapping address them all, as for GQA. numBlocks comes
 * from the KV budget over blockSize × kvBytesPerToken (config/model_config.ts, which sums the
 * groups of mlaKvCacheGeometry); this is the only place MLA caches are allocated (the KV set-up
 * contract of issue 12 takes it over at merge).
 * @throws Error when the model is not an MLA model or the backend has no MLA ops.
 */
export function allocateMlaKvCache(
  backend: Backend,
  config: ModelConfig,
  numBlocks: number,
  blockSize: number,
  dtype: DType,
): MlaKvCaches {
  const mla = config.mla;
  if (mla == null) throw new Error(`${config.architecture} has no multi-head latent attention`);
  const ops = backend.mla;
  if (ops === undefined) throw new Error(`the ${backend.name} backend has no MLA ops`);
  const geometry = mlaKvCacheGeometry(mla, config.numHiddenLayers, DTYPE_BYTES[dtype]);
  const latent = geometry.latent.layers.map(() =>
    ops.allocatePagedRows(numBlocks, blockSize, geometry.latent.rowElements, dtype),
  );
  const indexer = geometry.indexer;
  const indexerKeys = Array.from({ length: config.numHiddenLayers }, (_, l) =>
    indexer?.layers.includes(l)
      ? ops.allocatePagedRows(numBlocks, blockSize, indexer.rowElements, dtype)
      : null,
  );
  return { latent, indexerKeys, geometry };
}
