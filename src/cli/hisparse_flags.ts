import { readFileSync } from "node:fs";
import { type Command, Option } from "commander";
import {
  DEFAULT_BLOCK_SIZE,
  HISPARSE_CONFIG_JSON_KEYS,
  HISPARSE_RESIDENCIES,
  type HiSparseConfig,
  type HiSparseOverrides,
  HOST_KV_CACHE_DTYPES,
  type HostKvCacheDtype,
  HYBRID_SPARSE_MODES,
  type HybridSparseMode,
  parseHiSparseConfigJson,
  resolveHiSparseConfig,
} from "../config/hisparse_config.js";
import { parseGibArg, parseIntArg } from "./parse_args.js";

/**
 * Adds the Hybrid HiSparse flags (DESIGN.md §5): `--enable-hybrid-sparse`, `--hybrid-sparse-topk`,
 * `--hybrid-sparse-whitelist-tokens`, `--host-pool-gib`, `--host-kv-cache-dtype`, `--hisparse-config`.
 */
export function addHiSparseFlags(cmd: Command): Command {
  return cmd
    .addOption(
      new Option(
        "--enable-hybrid-sparse <mode>",
        "Hybrid HiSparse: auto (spill pages to host memory instead of preempting), " +
          "on (requests longer than min_sparse_tokens attend to their top-k pages; " +
          `residency ${HISPARSE_RESIDENCIES.join("|")}), off (dense)`,
      )
        .choices([...HYBRID_SPARSE_MODES])
        .default("off"),
    )
    .option(
      "--hybrid-sparse-topk <n>",
      "tokens each sparse decode step attends to (default 2048)",
      parseIntArg,
    )
    .option(
      "--hybrid-sparse-whitelist-tokens <file>",
      "JSON list of token ids: pages holding one are always attended and never spilled",
    )
    .option(
      "--host-pool-gib <gib>",
      "host KV pool in GiB (default: 2x the device pool's pages; DSA models: the split that holds the most --max-model-len requests)",
      parseGibArg,
    )
    .addOption(
      new Option(
        "--host-kv-cache-dtype <dtype>",
        "host KV pages: auto (the device pool's --kv-cache-dtype) or fp8 (e4m3, per-tensor scales; " +
          "half the host-link bytes per miss and twice the host pages, even with a bf16 device pool)",
      ).choices([...HOST_KV_CACHE_DTYPES]),
    )
    .option("--hisparse-config <json>", HISPARSE_CONFIG_HELP);
}

/** Help of `--hisparse-config` (serve, generate, bench, eval, plan): every key the parser accepts. */
export const HISPARSE_CONFIG_HELP = `HiSparse knobs as JSON: ${HISPARSE_CONFIG_JSON_KEYS.join(", ")}`;

/**
 * Builds the HiSparse settings from parsed flags (commander's camelCase keys).
 * @returns the settings (null when HiSparse is off and no HiSparse flag is given) and the
 *   reasons the flags are invalid (bad JSON, unknown keys or wrong types in it, unreadable
 *   whitelist file, conflicting topk, knobs given with `off`; with `off` the JSON is still parsed
 *   so its own reasons come too). Knob values themselves are checked later by
 *   validateHiSparseConfig.
 */
export function hisparseConfigFromOptions(o: Record<string, unknown>): {
  config: HiSparseConfig | null;
  reasons: string[];
} {
  const mode = (o["enableHybridSparse"] as HybridSparseMode | undefined) ?? "off";
  const topk = o["hybridSparseTopk"] as number | undefined;
  const whitelistFile = o["hybridSparseWhitelistTokens"] as string | undefined;
  const hostPoolBytes = o["hostPoolGib"] as number | undefined;
  const hostKvCacheDtype = o["hostKvCacheDtype"] as HostKvCacheDtype | undefined;
  const json = o["hisparseConfig"] as string | undefined;
  const given = [
    ["--hybrid-sparse-topk", topk],
    ["--hybrid-sparse-whitelist-tokens", whitelistFile],
    ["--host-pool-gib", hostPoolBytes],
    ["--host-kv-cache-dtype", hostKvCacheDtype],
    ["--hisparse-config", json],
  ].filter(([, v]) => v !== undefined);
  if (mode === "off") {
    // The JSON's own problems come with the mode's, so one run lists everything to fix.
    const reasons = given.map(([flag]) => `${flag} needs --enable-hybrid-sparse on or auto`);
    if (json !== undefined) reasons.push(...parseHiSparseConfigJson(json).reasons);
    return { config: null, reasons };
  }
  const reasons: string[] = [];
  let overrides: HiSparseOverrides = {};
  if (json !== undefined) {
    const parsed = parseHiSparseConfigJson(json);
    overrides = parsed.overrides;
    reasons.push(...parsed.reasons);
  }
  if (topk !== undefined) {
    if (overrides.topk !== undefined && overrides.topk !== topk)
      reasons.push(`--hybrid-sparse-topk (${topk}) and --hisparse-config topk (${overrides.topk}) disagree`);
    overrides.topk = topk;
  }
  if (hostKvCacheDtype !== undefined) {
    if (overrides.hostKvCacheDtype !== undefined && overrides.hostKvCacheDtype !== hostKvCacheDtype)
      reasons.push(
        `--host-kv-cache-dtype (${hostKvCacheDtype}) and --hisparse-config host_kv_cache_dtype (${overrides.hostKvCacheDtype}) disagree`,
      );
    overrides.hostKvCacheDtype = hostKvCacheDtype;
  }
  const whitelistTokenIds = whitelistFile === undefined ? [] : readWhitelist(whitelistFile, reasons);
  const config = resolveHiSparseConfig(
    { ...overrides, mode, hostPoolBytes: hostPoolBytes ?? null, whitelistTokenIds },
    (o["blockSize"] as number | undefined) ?? DEFAULT_BLOCK_SIZE,
  );
  return { config, reasons };
}

/** Reads a JSON list of token ids; problems go to `reasons`. */
function readWhitelist(path: string, reasons: string[]): number[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    reasons.push(
      `--hybrid-sparse-whitelist-tokens: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
    );
    return [];
  }
  let ids: unknown;
  try {
    ids = JSON.parse(text);
  } catch {
    ids = null;
  }
  if (!Array.isArray(ids) || !ids.every((t) => Number.isInteger(t) && t >= 0)) {
    reasons.push(`--hybrid-sparse-whitelist-tokens: ${path} must hold a JSON list of token ids`);
    return [];
  }
  return ids as number[];
}
