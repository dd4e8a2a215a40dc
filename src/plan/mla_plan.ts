/**
 * `hisparse plan` for MLA models (DeepSeek-V3 / V3.2, GLM-5): the dense-resident engine's
 * figures from the two KV groups of config/mla_config.ts (latent rows on every layer, DSA
 * indexer keys on the full layers), every term shown. Hybrid HiSparse for DSA models (issue 15)
 * and the tensor-parallel split join the one KV memory formula of issue 12; until then the
 * HiSparse section says so.
 */
import { type MlaKvGeometry, mlaKvCacheGeometry } from "../config/mla_config.js";
import type { MlaConfig } from "../config/model_config.js";
import { formatBytes, formatInt } from "./format.js";
import { type DensePlan, PlanError } from "./plan.js";

/** What the MLA plan needs. */
export interface MlaPlanInput {
  mla: MlaConfig;
  numHiddenLayers: number;
  kvBudgetBytes: number;
  contextTokens: number;
  blockSize: number;
  /** Bytes per stored element (2 for bf16). */
  kvElementBytes: number;
}

/**
 * The dense-resident figures: bytes per token = sum over groups of row bytes × layers; blocks =
 * floor(budget / (blockSize × bytes per token)); a request of `contextTokens` needs
 * ceil(context / blockSize) blocks (both groups share the block ids).
 * @throws PlanError when there is no budget or the context / block size is not a positive integer.
 */
export function planMlaDense(p: MlaPlanInput): DensePlan & { geometry: MlaKvGeometry } {
  if (!(p.kvBudgetBytes > 0))
    throw new PlanError("no GPU memory is left for the KV cache after the weights and reserve");
  if (!(Number.isInteger(p.contextTokens) && p.contextTokens >= 1))
    throw new PlanError(`--context must be a positive integer, got ${p.contextTokens}`);
  if (!(Number.isInteger(p.blockSize) && p.blockSize >= 1))
    throw new PlanError(`--block-size must be a positive integer, got ${p.blockSize}`);
  const geometry = mlaKvCacheGeometry(p.mla, p.numHiddenLayers, p.kvElementBytes);
  const groups = geometry.indexer === null ? [geometry.latent] : [geometry.latent, geometry.indexer];
  const kvBytesPerToken = groups.reduce((s, g) => s + g.bytesPerTokenPerLayer * g.layers.length, 0);
  const kvBytesPerBlock = p.blockSize * kvBytesPerToken;
  const numGpuBlocks = Math.floor(p.kvBudgetBytes / kvBytesPerBlock);
  const pagesPerRequest = Math.ceil(p.contextTokens / p.blockSize);
  return {
    geometry,
    kvBytesPerToken,
    kvBytesPerBlock,
    numGpuBlocks,
    pagesPerRequest,
    maxConcurrent: Math.floor(numGpuBlocks / pagesPerRequest),
    maxConcurrentUnpaged: Math.floor(p.kvBudgetBytes / (p.contextTokens * kvBytesPerToken)),
  };
}

/** Lines of the MLA dense section and the HiSparse note. */
export function mlaDenseLines(p: MlaPlanInput, d: DensePlan & { geometry: MlaKvGeometry }): string[] {
  const { latent, indexer } = d.geometry;
  const e = p.kvElementBytes;
  const terms = [`latent ${latent.rowElements} × ${e} B × ${latent.layers.length} layers`];
  if (indexer !== null)
    terms.push(`indexer keys ${indexer.rowElements} × ${e} B × ${indexer.layers.length} full layers`);
  return [
    "Dense-resident MLA (every latent and indexer row of every request on the GPU)",
    `  KV per token   = ${terms.join(" + ")} = ${formatInt(d.kvBytesPerToken)} B`,
    `  KV per block   = ${p.blockSize} tokens × ${formatInt(d.kvBytesPerToken)} B = ${formatBytes(d.kvBytesPerBlock)}`,
    `  GPU blocks     = floor(${formatInt(p.kvBudgetBytes)} B / ${formatInt(d.kvBytesPerBlock)} B) = ${formatInt(d.numGpuBlocks)}`,
    `  per request    = ceil(${formatInt(p.contextTokens)} / ${p.blockSize}) = ${formatInt(d.pagesPerRequest)} blocks = ${formatBytes(d.pagesPerRequest * d.kvBytesPerBlock)}`,
    `  max requests   = floor(${formatInt(d.numGpuBlocks)} / ${formatInt(d.pagesPerRequest)}) = ${formatInt(d.maxConcurrent)}`,
    // DSA models get their HiSparse section from plan/dsa_plan.ts.
    ...(p.mla.indexer === null
      ? [
          "HiSparse: needs a DSA indexer (DeepSeek-V3.2, GLM-5) to select the latent rows to recall; this MLA model has none",
        ]
      : []),
  ];
}
