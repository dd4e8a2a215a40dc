/**
 * HiSparse knobs for `hisparse plan`, from the same flags the engine takes
 * (`--hybrid-sparse-topk`, `--hisparse-config '<json>'` with snake_case keys, `--host-pool-gib`),
 * parsed and defaulted by the engine's own code (config/hisparse_config.ts), so that plan accepts
 * exactly the JSON that `serve` accepts. Knobs that change no figure (selector, min_sparse_tokens,
 * residency: the plan counts the pages every mode holds once its requests are spilled) are kept
 * in `unplanned` for the engine's validation and otherwise ignored.
 */
import { parseHiSparseConfigJson, resolveHiSparseConfig } from "../config/hisparse_config.js";
import { PlanError, type PlanHiSparse } from "./plan.js";

/**
 * Resolves the knobs: JSON values, then `topk` from the flag, then the engine's defaults (the
 * hot buffer defaults to 2 × topk).
 * @throws PlanError listing every reason: invalid JSON, unknown keys, wrong types, a flag/JSON
 *   topk mismatch.
 */
export function planHiSparseKnobs(o: {
  json?: string;
  topk?: number;
  hostPoolBytes?: number;
  /** Tokens per page, for the page-rounded sink and window defaults (default 16). */
  blockSize?: number;
}): PlanHiSparse {
  const { overrides, reasons } =
    o.json === undefined ? { overrides: {}, reasons: [] } : parseHiSparseConfigJson(o.json);
  if (o.topk !== undefined && overrides.topk !== undefined && overrides.topk !== o.topk)
    reasons.push(`--hybrid-sparse-topk (${o.topk}) and --hisparse-config topk (${overrides.topk}) disagree`);
  if (reasons.length > 0) throw new PlanError(reasons.join("; "));
  const c = resolveHiSparseConfig({ ...overrides, mode: "on", topk: o.topk ?? overrides.topk }, o.blockSize);
  const unplanned = Object.fromEntries(
    (["minSparseTokens", "selector", "residency"] as const)
      .filter((k) => overrides[k] !== undefined)
      .map((k) => [k, overrides[k]]),
  );
  return {
    topk: c.topk,
    deviceBufferTokens: c.deviceBufferTokens,
    sinkTokens: c.sinkTokens,
    windowTokens: c.windowTokens,
    digestTokens: c.digestTokens,
    denseLayers: c.denseLayers,
    hostPoolBytes: o.hostPoolBytes ?? null,
    ...(c.hostKvCacheDtype === "fp8" ? { hostKvCacheDtype: c.hostKvCacheDtype } : {}),
    ...(overrides.digestDtype !== undefined ? { digestDtype: c.digestDtype } : {}),
    ...(Object.keys(unplanned).length > 0 ? { unplanned } : {}),
  };
}
