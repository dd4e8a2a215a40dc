/**
 * HiSparse knobs for `hisparse plan`, from the same flags the engine takes
 * (`--hybrid-sparse-topk`, `--hisparse-config '<json>'` with snake_case keys, `--host-pool-gib`)
 * and the engine's defaults (PLAN_HISPARSE_DEFAULTS).
 */
import { PLAN_HISPARSE_DEFAULTS, PlanError, type PlanHiSparse } from "./plan.js";

/** Keys of `--hisparse-config` (config/hisparse_config.ts); the last two do not change the plan. */
const KEYS = [
  "topk",
  "device_buffer_tokens",
  "sink_tokens",
  "window_tokens",
  "dense_layers",
  "min_sparse_tokens",
  "selector",
];

/**
 * Resolves the knobs: JSON values, then `topk` from the flag, then defaults; the hot buffer
 * defaults to 2 × topk.
 * @throws PlanError for invalid JSON, unknown keys, wrong types, or a flag/JSON topk mismatch.
 */
export function planHiSparseKnobs(o: { json?: string; topk?: number; hostPoolBytes?: number }): PlanHiSparse {
  let cfg: Record<string, unknown> = {};
  if (o.json !== undefined) {
    let raw: unknown;
    try {
      raw = JSON.parse(o.json);
    } catch (e) {
      throw new PlanError(`--hisparse-config is not valid JSON (${(e as Error).message})`);
    }
    if (raw === null || typeof raw !== "object" || Array.isArray(raw))
      throw new PlanError("--hisparse-config must be a JSON object");
    cfg = raw as Record<string, unknown>;
    for (const [k, v] of Object.entries(cfg)) {
      if (!KEYS.includes(k))
        throw new PlanError(`--hisparse-config has an unknown key "${k}" (known: ${KEYS.join(", ")})`);
      const ok =
        k === "selector"
          ? typeof v === "string"
          : k === "dense_layers"
            ? Array.isArray(v) && v.every(Number.isInteger)
            : Number.isInteger(v);
      if (!ok) throw new PlanError(`--hisparse-config ${k} has the wrong type (${JSON.stringify(v)})`);
    }
  }
  const num = (k: string) => cfg[k] as number | undefined;
  if (o.topk !== undefined && num("topk") !== undefined && num("topk") !== o.topk)
    throw new PlanError(
      `--hybrid-sparse-topk (${o.topk}) and --hisparse-config topk (${num("topk")}) disagree`,
    );
  const d = PLAN_HISPARSE_DEFAULTS;
  const topk = o.topk ?? num("topk") ?? d.topk;
  return {
    topk,
    deviceBufferTokens: num("device_buffer_tokens") ?? d.bufferFactor * topk,
    sinkTokens: num("sink_tokens") ?? d.sinkTokens,
    windowTokens: num("window_tokens") ?? d.windowTokens,
    denseLayers: (cfg.dense_layers as number[] | undefined) ?? d.denseLayers,
    hostPoolBytes: o.hostPoolBytes ?? null,
  };
}
