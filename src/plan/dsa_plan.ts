/**
 * `hisparse plan` for DSA models (DeepSeek-V3.2, GLM-5) with Hybrid HiSparse (issue 15): the
 * settings the engine derives for them (config/hisparse_dsa.ts: the indexer selects, hot buffer
 * 2 x index_topk rows, a one-page window, no sinks, no dense layers by default), then the same
 * HiSparse formula as GQA models (plan.ts planHiSparse over the model's own KV groups: latent
 * rows offloadable, indexer keys on the GPU for every page).
 */
import {
  type HiSparseConfig,
  parseHiSparseConfigJson,
  resolveHiSparseConfig,
} from "../config/hisparse_config.js";
import { dsaHiSparseConfig } from "../config/hisparse_dsa.js";
import type { MlaConfig } from "../config/mla_config.js";
import { formatBytes, formatInt, poolLines } from "./format.js";
import { type DensePlan, type HiSparsePlan, PlanError, type PlanHiSparse, type PlanInput } from "./plan.js";

const GIB = 2 ** 30;

/** What the DSA knobs are resolved from (`hisparse plan` flags). */
export interface DsaKnobsInput {
  json?: string;
  topk?: number;
  hostPoolBytes?: number;
  blockSize: number;
  mla: MlaConfig;
  numLayers: number;
  architecture: string;
  /** `--max-num-batched-tokens`: the chunk a streaming prefill takes per step. */
  maxNumBatchedTokens: number;
}

/**
 * The DSA settings in plan form, as the engine would derive them.
 * @throws PlanError listing every reason the engine would refuse them (bad JSON, Quest keys,
 *   a topk other than index_topk, ...).
 */
export function planDsaKnobs(o: DsaKnobsInput): PlanHiSparse & { config: HiSparseConfig } {
  const indexer = o.mla.indexer;
  if (indexer === null) throw new PlanError("the model has no DSA indexer");
  const { overrides, reasons } =
    o.json === undefined ? { overrides: {}, reasons: [] as string[] } : parseHiSparseConfigJson(o.json);
  if (o.topk !== undefined && overrides.topk !== undefined && overrides.topk !== o.topk)
    reasons.push(`--hybrid-sparse-topk (${o.topk}) and --hisparse-config topk (${overrides.topk}) disagree`);
  const user = resolveHiSparseConfig(
    {
      ...overrides,
      mode: "on",
      topk: o.topk ?? overrides.topk,
      hostPoolBytes: o.hostPoolBytes ?? null,
    },
    o.blockSize,
  );
  const dsa = dsaHiSparseConfig(user, {
    indexer,
    blockSize: o.blockSize,
    enablePrefixCaching: false,
    numLayers: o.numLayers,
    architecture: o.architecture,
  });
  reasons.push(...dsa.reasons);
  if (!Number.isInteger(o.maxNumBatchedTokens) || o.maxNumBatchedTokens < 1)
    reasons.push(`--max-num-batched-tokens must be >= 1, got ${o.maxNumBatchedTokens}`);
  if (reasons.length > 0)
    throw new PlanError(`the engine would refuse these settings: ${reasons.join("; ")}`);
  const c = dsa.config;
  return {
    config: c,
    topk: c.topk,
    deviceBufferTokens: c.deviceBufferTokens,
    sinkTokens: c.sinkTokens,
    windowTokens: c.windowTokens,
    denseLayers: c.denseLayers,
    hostPoolBytes: c.hostPoolBytes,
    defaultHostPool: c.defaultHostPool,
    // Both engines' DSA set-ups read a prefill's spilled pages (worker/hisparse/dsa_setup.ts, cuda/).
    streamingPrefill: { maxChunkTokens: o.maxNumBatchedTokens },
  };
}

/** Lines of the DSA HiSparse section (`dense`: the dense-resident MLA figures, for the ratios). */
export function dsaHiSparseLines(p: PlanInput, h: HiSparsePlan, dense: DensePlan, mla: MlaConfig): string[] {
  const c = p.hisparse;
  const bs = p.blockSize;
  const e = p.kvElementBytes;
  const row = mla.kvLoraRank + mla.qkRopeHeadDim;
  const ix = mla.indexer!;
  const numIndexerLayers = ix.layerTypes.filter((t) => t === "full").length;
  const ratio = (n: number) =>
    dense.maxConcurrent > 0 && n > 0 ? ` (${(n / dense.maxConcurrent).toFixed(1)}× dense)` : "";
  const given = {
    given: "  with --host-pool-gib:",
    max_model_len:
      "  with the default host pool (DSA: the one that holds the most requests of --max-model-len, here the context; on CUDA the engine caps it at half the RAM, split over the TP ranks, which this plan does not apply; set --host-pool-gib):",
    device_ratio:
      "  with the default host pool (2 × the GPU pool's pages: the budget holds no request of this context; set --host-pool-gib):",
  }[h.givenSizedBy];
  const perPage = h.numDenseLayers > 0 ? "indexer keys + dense layers" : "indexer keys";
  const dl = h.numDenseLayers > 0 ? ` + dense layers ${h.numDenseLayers} × ${bs} × ${row} × ${e} B` : "";
  return [
    `HiSparse for DSA (selector dsa: the indexer's top ${c.topk} rows per layer; hot buffer ${c.deviceBufferTokens} rows, window ${c.windowTokens}, dense layers [${c.denseLayers.join(", ")}])`,
    `  sparse layers  = ${p.model.numHiddenLayers} − ${h.numDenseLayers} dense = ${h.numSparseLayers}`,
    `  GPU block      = ${h.numSparseLayers} sparse layers × ${bs} × ${row} latent × ${e} B = ${formatBytes(h.mainBytesPerBlock)}`,
    `  host page      = the same latent rows = ${formatBytes(h.hostBytesPerBlock)} (each TP rank pins its own copy today)`,
    `  GPU per page   = indexer keys ${numIndexerLayers} layers × ${bs} × ${ix.headDim} × ${e} B${dl} = ${formatBytes(h.deviceBytesPerHostBlock)}`,
    `  per request    = ${formatInt(h.pagesPerRequest)} pages; on the GPU ceil((${c.windowTokens} + ${c.deviceBufferTokens}) / ${bs}) + 1 = ${formatInt(h.devicePagesPerRequest)} blocks`,
    `                 = ${formatInt(h.devicePagesPerRequest)} × ${formatBytes(h.mainBytesPerBlock)} + ${formatInt(h.pagesPerRequest)} × ${formatBytes(h.deviceBytesPerHostBlock)} = ${formatBytes(h.deviceBytesPerRequest)} of GPU memory (dense: ${formatBytes(dense.pagesPerRequest * dense.kvBytesPerBlock)})`,
    h.streamingPrefillBlocks === null || h.streamingPrefillBlocks >= h.pagesPerRequest
      ? `  prefill        = all ${formatInt(h.pagesPerRequest)} pages in GPU blocks while a request prefills; it shrinks to ${formatInt(h.devicePagesPerRequest)} blocks when it decodes`
      : `  prefill        = streams: at most ${formatInt(h.streamingPrefillBlocks)} GPU blocks while a request prefills (window, two chunks of ${formatInt(c.streamingPrefill!.maxChunkTokens)} tokens, hot buffer), its completed pages spilled to the host; ${formatInt(h.devicePagesPerRequest)} when it decodes`,
    ...poolLines(given, h.given, h, ratio(h.given.maxConcurrent), [], perPage),
    ...poolLines(
      `  with the best host pool for this context: --host-pool-gib ${(h.best.hostPoolBytes / GIB).toFixed(2)}`,
      h.best,
      h,
      ratio(h.best.maxConcurrent),
      [],
      perPage,
    ),
    `  decode-only   = floor(${formatInt(p.kvBudgetBytes)} B / (${formatInt(h.pagesPerRequest)} × ${formatInt(h.deviceBytesPerHostBlock)} B + ${formatInt(h.devicePagesPerRequest)} × ${formatInt(h.mainBytesPerBlock)} B)) = ${formatInt(h.decodeOnly)}${ratio(h.decodeOnly)}`,
    "                  (no prefill on this GPU: a P/D decode instance, as SGLang HiSparse and vLLM's calculator count; not what this engine runs)",
  ];
}
