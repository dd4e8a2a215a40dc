/**
 * Hybrid HiSparse settings of DSA models (DeepSeek-V3.2, GLM-5; issue 15, DESIGN.md §4 and §7):
 * the model's own lightning indexer is the selector, so Quest's page knobs do not apply. What a
 * DSA model attends to is fixed by the model (its `index_topk` token rows per layer); HiSparse
 * only decides where those rows live: the latent rows of completed pages may move to the host
 * tier, and a per-request hot buffer of `device_buffer_tokens` latent rows (default 2 x
 * index_topk, as vLLM and SGLang size it) holds the rows recalled from there.
 */
import {
  DEFAULT_BUFFER_FACTOR,
  type HiSparseConfig,
  type HiSparseValidationContext,
  validateHiSparseConfig,
} from "./hisparse_config.js";
import type { DsaIndexerConfig } from "./mla_config.js";
import type { ModelConfig } from "./model_config.js";

/** `--hisparse-config` keys that mean nothing for a DSA model (Quest's page selection). */
export const DSA_REFUSED_KEYS: readonly string[] = [
  "sink_tokens",
  "window_tokens",
  "selector",
  "digest_tokens",
  "digest_dtype",
];

/** What the DSA settings are derived and checked against. */
export interface DsaHiSparseContext {
  indexer: DsaIndexerConfig;
  blockSize: number;
  enablePrefixCaching: boolean;
  numLayers: number;
  vocabSize?: number;
  /** For the reasons ("GlmMoeDsaForCausalLM"). */
  architecture: string;
}

/** n rounded up to a multiple of m. */
const roundUp = (n: number, m: number): number => Math.ceil(n / m) * m;

/**
 * The HiSparse settings a DSA model runs with, from the user's ({@link HiSparseConfig.givenKeys}
 * tells given keys from defaults):
 * - selector `dsa`; topk = index_topk (a given topk must equal it);
 * - device_buffer_tokens: given, else DEFAULT_BUFFER_FACTOR x index_topk, in whole blocks (hot rows
 *   are token granular, the hot buffer is allocated as pool blocks);
 * - no sinks, a one-page window: the tail page (the newest rows) stays on the device, the rest
 *   may spill (the indexer picks the sinks it wants);
 * - dense_layers: given, else none (every layer attends to the indexer's rows anyway);
 * - min_sparse_tokens: given, else the window plus the hot buffer (a shorter request would hold
 *   more device memory sparse than dense);
 * - the default host pool holds the most requests of --max-model-len (`max_model_len`: where a
 *   row lives changes no output, only speed; the device ratio held 1.8x dense at 128K, this 4.8x).
 * @returns the settings and every reason they cannot work (sink_tokens, window_tokens or
 *   selector given; topk disagreeing with index_topk; a hot buffer below index_topk; and the
 *   shared checks of validateHiSparseConfig).
 */
export function dsaHiSparseConfig(
  hs: HiSparseConfig,
  ctx: DsaHiSparseContext,
): { config: HiSparseConfig; reasons: string[] } {
  const given = new Set(hs.givenKeys ?? []);
  const k = ctx.indexer.topk;
  const bs = ctx.blockSize;
  const reasons: string[] = [];
  for (const key of DSA_REFUSED_KEYS)
    if (given.has(key))
      reasons.push(
        `--hisparse-config ${key} does not apply to DSA models (${ctx.architecture}): the model's lightning indexer selects the ${k} tokens each layer attends to; leave ${key} out`,
      );
  if (given.has("topk") && hs.topk !== k)
    reasons.push(
      `topk (${hs.topk}) must equal the DSA model's index_topk (${k}) or be left out: ${ctx.architecture} attends to its indexer's top ${k} tokens`,
    );
  const deviceBufferTokens = given.has("device_buffer_tokens")
    ? hs.deviceBufferTokens
    : roundUp(DEFAULT_BUFFER_FACTOR * k, bs);
  if (
    given.has("device_buffer_tokens") &&
    Number.isInteger(hs.deviceBufferTokens) &&
    hs.deviceBufferTokens < k
  )
    reasons.push(
      `device_buffer_tokens (${hs.deviceBufferTokens}) must be >= the DSA model's index_topk (${k}): one step's selected rows must fit the hot buffer`,
    );
  const windowTokens = bs;
  const config: HiSparseConfig = {
    ...hs,
    selector: "dsa",
    topk: k,
    deviceBufferTokens,
    sinkTokens: 0,
    windowTokens,
    denseLayers: given.has("dense_layers") ? [...hs.denseLayers] : [],
    minSparseTokens: given.has("min_sparse_tokens") ? hs.minSparseTokens : windowTokens + deviceBufferTokens,
    defaultHostPool: "max_model_len",
  };
  // The shared checks (mode, residency, hot buffer in whole blocks, dense layers, whitelist,
  // prefix caching) on a page-rounded topk: the indexer's topk need not be whole pages.
  const shared = validateHiSparseConfig(
    { ...config, topk: roundUp(k, bs) },
    {
      blockSize: bs,
      enablePrefixCaching: ctx.enablePrefixCaching,
      numLayers: ctx.numLayers,
      vocabSize: ctx.vocabSize,
    },
  ).filter((r) => !r.includes("must be >= topk"));
  reasons.push(...shared);
  if (ctx.enablePrefixCaching && hs.mode !== "off")
    reasons.push(
      `--enable-prefix-caching with --enable-hybrid-sparse ${hs.mode} is not supported for DSA models yet (${ctx.architecture}): their latent rows and indexer keys do not take part in the host tier's page identity; use --enable-hybrid-sparse off or leave prefix caching off`,
    );
  return { config, reasons };
}

/**
 * The reasons HiSparse settings cannot work, checked before the weights load, in the order that
 * names the real problem first: for a DSA model (its config has a lightning indexer) the DSA
 * rules ({@link dsaHiSparseConfig}: Quest's keys refused, topk = index_topk, then the shared
 * checks), never Quest's page checks (sinks and window within topk), which do not apply to it;
 * for any other model, or when its config could not be read (`model` null: the load reports
 * that), Quest's checks ({@link validateHiSparseConfig}).
 */
export function hisparseReasonsFor(
  hs: HiSparseConfig,
  ctx: Pick<HiSparseValidationContext, "blockSize" | "enablePrefixCaching">,
  model: ModelConfig | null,
): string[] {
  const indexer = model?.mla?.indexer ?? null;
  if (model === null || indexer === null || hs.mode === "off") return validateHiSparseConfig(hs, ctx);
  return dsaHiSparseConfig(hs, {
    indexer,
    blockSize: ctx.blockSize,
    enablePrefixCaching: ctx.enablePrefixCaching,
    numLayers: model.numHiddenLayers,
    vocabSize: model.vocabSize,
    architecture: model.architecture,
  }).reasons;
}
