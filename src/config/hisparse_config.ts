/**
 * Settings of Hybrid HiSparse (DESIGN.md §4): `EngineArgs.extensions.hisparse`, built from
 * `--enable-hybrid-sparse`, `--hybrid-sparse-topk`, `--hybrid-sparse-whitelist-tokens`,
 * `--host-pool-gib` and `--hisparse-config '<json>'` (snake_case keys, as SGLang's
 * `--hisparse-config`). Token counts, not pages; validated by {@link validateHiSparseConfig}
 * (a list of reasons, reported all at once at start-up).
 */
import { DEFAULT_DIGEST_DTYPE, DIGEST_DTYPES, type DigestDtype } from "../core/kv/kv_cache_interface.js";
import {
  defaultDigestTokens,
  defaultSinkTokens,
  defaultWindowTokens,
  digestTokensFor,
} from "./hisparse_budget.js";

export { DEFAULT_DIGEST_DTYPE, DIGEST_DTYPES, type DigestDtype } from "../core/kv/kv_cache_interface.js";
export {
  DEFAULT_SINK_TOKENS,
  DEFAULT_WINDOW_TOKENS,
  defaultDigestTokens,
  defaultSinkTokens,
  defaultWindowTokens,
} from "./hisparse_budget.js";

/**
 * When requests attend sparsely (DESIGN.md §4 "Hybrid residency"):
 * - `off`: the dense engine (vLLM behaviour);
 * - `auto`: pages stay on the device while there is room; an allocation that would fail spills
 *   pages of the requests holding the most resident pages to the host tier instead of preempting;
 * - `on`: every request longer than `minSparseTokens` attends sparsely in its decode steps; where
 *   its pages live is {@link HiSparseResidency}.
 */
export type HybridSparseMode = "auto" | "on" | "off";
export const HYBRID_SPARSE_MODES: readonly HybridSparseMode[] = ["auto", "on", "off"];

/**
 * Where the pages of an `on`-mode request live during decode (`--hisparse-config residency`):
 * - `host` (default for `on`, DESIGN.md §4): its spillable pages move to the host tier right after
 *   its prefill, as in SGLang's HiSparse; every recalled page comes through the hot buffer;
 * - `hybrid`: pages stay on the device while there is room and spill only under pressure, as
 *   `auto` does and as vLLM's Hybrid HiSparse keeps KV in the normal GPU pool; the request still
 *   attends to its top-k pages only, reading resident pages in place (Quest's speed-up, arXiv
 *   2406.10774) and recalling spilled ones through the hot buffer.
 * `auto` is always `hybrid` (and attends densely until a page of the request is spilled).
 * Beyond DESIGN.md §4: its exactness clause ("no page INACTIVE -> outputs equal the dense path")
 * holds for `auto` and for `on` with `host`, whose requests attend sparsely only once pages left
 * the device; `on` with `hybrid` attends sparsely while every page is resident, so its outputs
 * equal the dense path's only when topk covers the context.
 */
export type HiSparseResidency = "host" | "hybrid";
export const HISPARSE_RESIDENCIES: readonly HiSparseResidency[] = ["host", "hybrid"];

/**
 * Selectors (attention/sparse/): `quest` (training-free page selection, any dense model; the one
 * `--hisparse-config selector` names) and `dsa` (the model's own lightning indexer: DSA models
 * get it from their config, config/hisparse_dsa.ts, never from the flag).
 */
export type SparseSelectorName = "quest" | "dsa";
/** Selectors a user may name in `--hisparse-config selector`. */
export const SPARSE_SELECTORS: readonly SparseSelectorName[] = ["quest"];

/**
 * Element type of host-tier pages (`--host-kv-cache-dtype`, `--hisparse-config
 * host_kv_cache_dtype`), named after vLLM's `--kv-cache-dtype`:
 * - `auto` (default): the device pool's (`--kv-cache-dtype`), so a spill or recall copies bytes;
 * - `fp8`: e4m3 with per-tensor K and V scales, vLLM's fp8 KV semantics (core/kv/kv_cache_dtype.ts:
 *   stored = e4m3(x / scale), read = stored * scale), even when the device pool is bf16: the
 *   mirror quantises, the copy into the hot buffer dequantises, so a miss moves half the bytes
 *   of bf16 over the host link and the host pool holds twice the pages. Pages read from the host
 *   tier are then fp8-rounded: the exactness of `auto` while nothing is spilled is unchanged.
 * Quest HiSparse only (DSA models keep their latent rows as the device pool has them).
 */
export type HostKvCacheDtype = "auto" | "fp8";
export const HOST_KV_CACHE_DTYPES: readonly HostKvCacheDtype[] = ["auto", "fp8"];

/** Resolved HiSparse settings (every knob has its value). */
export interface HiSparseConfig {
  mode: HybridSparseMode;
  /** Tokens each sparse decode step attends to per GQA group, sinks and window included. */
  topk: number;
  /** Per-request device hot buffer, in tokens (its blocks hold pages recalled from the host). */
  deviceBufferTokens: number;
  /** First tokens of every request, always attended (attention sinks). */
  sinkTokens: number;
  /** Last tokens of every request (the tail page included), always attended. */
  windowTokens: number;
  /**
   * Quest: tokens per min/max digest, a divisor of the block size; each page keeps
   * blockSize / digestTokens sub-page digests and scores as its best sub-page (quest.ts).
   */
  digestTokens: number;
  /**
   * Quest: element type of the digests (`digest_dtype`): `bf16` (default) keeps the keys' exact
   * min / max; `fp8` stores e4m3 rounded outward (min toward -inf, max toward +inf), so the score
   * stays an upper bound at half the bytes (core/kv/kv_cache_interface.ts DEFAULT_DIGEST_DTYPE).
   */
  digestDtype: DigestDtype;
  /** Layers that attend densely over every page (their KV stays on the device). */
  denseLayers: number[];
  /** `on` mode: requests at most this long stay dense. */
  minSparseTokens: number;
  /** `on` mode: where decoding requests' pages live (auto: always hybrid). */
  residency: HiSparseResidency;
  selector: SparseSelectorName;
  /** Host tier size in bytes (`--host-pool-gib`); null = the default, sized by {@link defaultHostPool}. */
  hostPoolBytes: number | null;
  /** How the host tier is sized when `--host-pool-gib` is not given ({@link DefaultHostPool}). */
  defaultHostPool: DefaultHostPool;
  /** Element type of host-tier pages ({@link HostKvCacheDtype}). */
  hostKvCacheDtype: HostKvCacheDtype;
  /** Token ids whose pages are pinned: always attended, never spilled (`--hybrid-sparse-whitelist-tokens`). */
  whitelistTokenIds: number[];
  /**
   * Benchmark only, CUDA Quest (bench/hisparse_throughput.ts `--overlap`; no CLI flag or JSON
   * key sets it): each page of a request's previous selection is kept with this probability, so
   * throughput can be measured as a function of how much selections overlap (trained models
   * re-select 96-99% of pages, dummy weights far fewer). Absent: the engine's selection.
   */
  benchSelectionOverlap?: number;
  /**
   * The `--hisparse-config` keys (snake_case) whose values were given rather than defaulted, so
   * a model-specific layout (DSA: config/hisparse_dsa.ts) can refuse the keys that do not apply
   * to it and derive the others; absent = none given.
   */
  givenKeys?: readonly string[];
}

/** Default top-k budget: DeepSeek-V3.2 / GLM-5 DSA attend to 2048 tokens (LMSYS HiSparse blog). */
export const DEFAULT_TOPK = 2048;
/** Default dense layers: the first two, as Quest (arXiv 2406.10774 §4) runs them. */
export const DEFAULT_DENSE_LAYERS: readonly number[] = [0, 1];
/** Default hot buffer: 2x top-k (LMSYS HiSparse: 2-4x; arXiv 2608.07009: ~13% misses at 2x with LRU). */
export const DEFAULT_BUFFER_FACTOR = 2;
/**
 * Default host tier when `--host-pool-gib` is not given: this many times the device pool's pages
 * (SGLang HiCache's `--hicache-ratio` default is 2.0).
 */
export const HOST_POOL_DEFAULT_RATIO = 2;

/**
 * How the default host tier is sized (no `--host-pool-gib`; capped on CUDA at a share of the RAM):
 * - `device_ratio`: HOST_POOL_DEFAULT_RATIO x the device pool's pages (Quest: most of the budget
 *   stays in device blocks, where pages are resident and attention is exact);
 * - `max_model_len`: the split of the budget that holds the most requests of `--max-model-len`
 *   tokens (core/kv/kv_concurrency.ts defaultHostPoolBytes; DSA models: their sparse attention is
 *   the model's own selection wherever the rows live, so a resident page gains only speed).
 */
export type DefaultHostPool = "device_ratio" | "max_model_len";

/** The type a `--hisparse-config` value must have, and how a user reads it. */
interface JsonKeySpec {
  field: keyof HiSparseConfig;
  /** Completes "must be ..." in the wrong-type reason, e.g. "an integer". */
  expected: string;
  isValid: (value: unknown) => boolean;
}

/** Number-valued knobs; integrality and ranges are checked by validateHiSparseConfig. */
const INTEGER: Omit<JsonKeySpec, "field"> = {
  expected: "an integer",
  isValid: (v) => typeof v === "number",
};

/** The `--hisparse-config` JSON keys: the field each sets and the type its value must have. */
const JSON_KEYS = {
  topk: { field: "topk", ...INTEGER },
  device_buffer_tokens: { field: "deviceBufferTokens", ...INTEGER },
  sink_tokens: { field: "sinkTokens", ...INTEGER },
  window_tokens: { field: "windowTokens", ...INTEGER },
  digest_tokens: { field: "digestTokens", ...INTEGER },
  digest_dtype: {
    field: "digestDtype",
    expected: `a string (${DIGEST_DTYPES.join(" or ")})`,
    isValid: (v) => typeof v === "string",
  },
  dense_layers: {
    field: "denseLayers",
    expected: "a list of integers",
    isValid: (v) => Array.isArray(v) && v.every((x) => typeof x === "number"),
  },
  min_sparse_tokens: { field: "minSparseTokens", ...INTEGER },
  selector: {
    field: "selector",
    expected: `a string (${SPARSE_SELECTORS.join(" or ")})`,
    isValid: (v) => typeof v === "string",
  },
  residency: {
    field: "residency",
    expected: `a string (${HISPARSE_RESIDENCIES.join(" or ")})`,
    isValid: (v) => typeof v === "string",
  },
  host_kv_cache_dtype: {
    field: "hostKvCacheDtype",
    expected: `a string (${HOST_KV_CACHE_DTYPES.join(" or ")})`,
    isValid: (v) => typeof v === "string",
  },
} as const satisfies Record<string, JsonKeySpec>;

/**
 * Every key `--hisparse-config` accepts, in the order the help text and the unknown-key reason
 * list them (snake_case, as SGLang's `--hisparse-config`).
 */
export const HISPARSE_CONFIG_JSON_KEYS: readonly string[] = Object.keys(JSON_KEYS);

/** Knobs a user may give; missing ones take defaults ({@link resolveHiSparseConfig}). */
export type HiSparseOverrides = Partial<HiSparseConfig>;

/**
 * Parses `--hisparse-config` JSON (snake_case keys, {@link HISPARSE_CONFIG_JSON_KEYS}) into
 * overrides. Values are only type-checked here (a number, a list of numbers, a string); their
 * ranges are validateHiSparseConfig's.
 * @returns the overrides and the reasons it is invalid (not JSON, not an object, unknown keys,
 *   wrong types naming the expected one); the overrides hold only the well-typed keys.
 */
export function parseHiSparseConfigJson(text: string): { overrides: HiSparseOverrides; reasons: string[] } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return { overrides: {}, reasons: [`--hisparse-config is not valid JSON (${(e as Error).message})`] };
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    return { overrides: {}, reasons: ["--hisparse-config must be a JSON object"] };
  const overrides: Record<string, unknown> = {};
  const reasons: string[] = [];
  for (const [key, value] of Object.entries(raw)) {
    const spec = (JSON_KEYS as Record<string, JsonKeySpec>)[key];
    if (spec === undefined) {
      reasons.push(
        `--hisparse-config has an unknown key "${key}" (known: ${HISPARSE_CONFIG_JSON_KEYS.join(", ")})`,
      );
      continue;
    }
    if (spec.isValid(value)) overrides[spec.field] = value;
    else reasons.push(`--hisparse-config ${key} must be ${spec.expected}, got ${JSON.stringify(value)}`);
  }
  return { overrides: overrides as HiSparseOverrides, reasons };
}

/** The default block size (`--block-size`), for callers that resolve before knowing it. */
export const DEFAULT_BLOCK_SIZE = 16;

/**
 * Fills every knob: the given ones, then defaults. Derived defaults follow the final values:
 * `deviceBufferTokens` = 2 x topk; `windowTokens` and `sinkTokens` from topk and the block size
 * ({@link defaultWindowTokens}, {@link defaultSinkTokens}); `minSparseTokens` = sinkTokens +
 * windowTokens + deviceBufferTokens (a shorter request would hold more device memory sparse than
 * dense); `residency` = `host` for mode `on`, `hybrid` otherwise.
 * @param blockSize tokens per page (`--block-size`), for the page-rounded defaults
 */
export function resolveHiSparseConfig(
  o: HiSparseOverrides,
  blockSize: number = DEFAULT_BLOCK_SIZE,
): HiSparseConfig {
  const topk = o.topk ?? DEFAULT_TOPK;
  const mode = o.mode ?? "off";
  const deviceBufferTokens = o.deviceBufferTokens ?? DEFAULT_BUFFER_FACTOR * topk;
  const windowTokens = o.windowTokens ?? defaultWindowTokens(topk, blockSize);
  const sinkTokens = o.sinkTokens ?? defaultSinkTokens(topk, windowTokens, blockSize);
  const digestTokens = o.digestTokens ?? defaultDigestTokens(blockSize);
  return {
    mode,
    topk,
    deviceBufferTokens,
    sinkTokens,
    windowTokens,
    digestTokens,
    digestDtype: o.digestDtype ?? DEFAULT_DIGEST_DTYPE,
    denseLayers: [...(o.denseLayers ?? DEFAULT_DENSE_LAYERS)],
    minSparseTokens: o.minSparseTokens ?? sinkTokens + windowTokens + deviceBufferTokens,
    selector: o.selector ?? "quest",
    residency: o.residency ?? (mode === "on" ? "host" : "hybrid"),
    hostPoolBytes: o.hostPoolBytes ?? null,
    defaultHostPool: "device_ratio",
    hostKvCacheDtype: o.hostKvCacheDtype ?? "auto",
    whitelistTokenIds: [...(o.whitelistTokenIds ?? [])],
    givenKeys: Object.entries(JSON_KEYS)
      .filter(([, spec]) => o[spec.field] !== undefined)
      .map(([key]) => key),
  };
}

/** What the settings are checked against; fields absent before the model is loaded are skipped. */
export interface HiSparseValidationContext {
  blockSize: number;
  enablePrefixCaching: boolean;
  /** Decoder layers of the model. */
  numLayers?: number;
  vocabSize?: number;
}

/**
 * Reasons the settings are invalid (empty when valid): token counts must be whole pages, the
 * budget must hold the sinks and the window, the buffer must hold the budget, dense layers must
 * exist and leave a sparse one. Prefix caching combines with every mode (shared pages across both
 * tiers: core/hisparse/page_prefix_cache.ts).
 */
export function validateHiSparseConfig(c: HiSparseConfig, ctx: HiSparseValidationContext): string[] {
  const r: string[] = [];
  if (!HYBRID_SPARSE_MODES.includes(c.mode))
    r.push(`--enable-hybrid-sparse must be auto, on or off, got ${c.mode}`);
  if (c.mode === "off") return r;
  const bs = ctx.blockSize;
  const pages = (name: string, v: number, min: number) => {
    if (!Number.isInteger(v) || v < min) r.push(`${name} must be an integer >= ${min}, got ${v}`);
    else if (v % bs !== 0) r.push(`${name} (${v}) must be a multiple of the block size (${bs})`);
  };
  const before = r.length;
  pages("topk", c.topk, bs);
  const topkOk = r.length === before;
  // With a bad topk, values derived from it (resolveHiSparseConfig) would only echo its error;
  // comparisons with it stay meaningful while it is a whole number of tokens >= one page.
  const topkComparable = Number.isInteger(c.topk) && c.topk >= bs;
  const bufferDerived = c.deviceBufferTokens === DEFAULT_BUFFER_FACTOR * c.topk;
  if (topkOk || !bufferDerived) pages("device_buffer_tokens", c.deviceBufferTokens, bs);
  pages("sink_tokens", c.sinkTokens, 0);
  pages("window_tokens", c.windowTokens, bs);
  const dt = digestTokensFor(c, bs);
  if (!Number.isInteger(dt) || dt < 1 || bs % dt !== 0)
    r.push(`digest_tokens must be a divisor of the block size (${bs}), got ${dt}`);
  if (!DIGEST_DTYPES.includes(c.digestDtype))
    r.push(`digest_dtype must be one of ${DIGEST_DTYPES.join(", ")}, got ${c.digestDtype}`);
  if (topkComparable && (topkOk || !bufferDerived) && c.deviceBufferTokens < c.topk)
    r.push(`device_buffer_tokens (${c.deviceBufferTokens}) must be >= topk (${c.topk})`);
  if (topkComparable && c.sinkTokens + c.windowTokens > c.topk) r.push(sinkWindowReason(c));
  const minDerived = c.minSparseTokens === c.sinkTokens + c.windowTokens + c.deviceBufferTokens;
  if (
    (topkOk || !(minDerived && bufferDerived)) &&
    !(Number.isInteger(c.minSparseTokens) && c.minSparseTokens >= 0)
  )
    r.push(`min_sparse_tokens must be an integer >= 0, got ${c.minSparseTokens}`);
  // "dsa" is never a user's choice (parse takes any string): DSA set-ups derive it from the model.
  if (!SPARSE_SELECTORS.includes(c.selector) && c.selector !== "dsa")
    r.push(`selector must be one of ${SPARSE_SELECTORS.join(", ")}, got ${c.selector}`);
  if (!HISPARSE_RESIDENCIES.includes(c.residency))
    r.push(`residency must be one of ${HISPARSE_RESIDENCIES.join(", ")}, got ${c.residency}`);
  else if (c.mode === "auto" && c.residency === "host")
    r.push(
      'residency "host" needs --enable-hybrid-sparse on (auto keeps pages on the device while there is room)',
    );
  if (!HOST_KV_CACHE_DTYPES.includes(c.hostKvCacheDtype))
    r.push(
      `host_kv_cache_dtype must be one of ${HOST_KV_CACHE_DTYPES.join(", ")}, got ${c.hostKvCacheDtype}`,
    );
  if (c.hostPoolBytes !== null && !(c.hostPoolBytes > 0))
    r.push(`--host-pool-gib must be > 0, got ${c.hostPoolBytes / 2 ** 30}`);
  const dense = new Set<number>();
  for (const l of c.denseLayers) {
    if (!Number.isInteger(l) || l < 0) r.push(`dense_layers must hold integers >= 0, got ${l}`);
    else if (ctx.numLayers !== undefined && l >= ctx.numLayers)
      r.push(`dense layer ${l} does not exist (the model has ${ctx.numLayers} layers)`);
    else if (dense.has(l)) r.push(`dense layer ${l} is listed twice`);
    dense.add(l);
  }
  if (ctx.numLayers !== undefined && dense.size >= ctx.numLayers)
    r.push(
      `dense_layers lists every layer of the model (${ctx.numLayers}); at least one must attend sparsely`,
    );
  const V = ctx.vocabSize;
  const bad = c.whitelistTokenIds.find((t) => !Number.isInteger(t) || t < 0 || (V !== undefined && t >= V));
  if (bad !== undefined)
    r.push(
      `whitelist token ${bad} is not a token id${V === undefined ? "" : ` of the vocabulary (size ${V})`}`,
    );
  return r;
}

/**
 * The sinks-plus-window-exceed-topk reason, naming the values that are defaults (not in
 * givenKeys) and where to change them.
 */
function sinkWindowReason(c: HiSparseConfig): string {
  const given = new Set(c.givenKeys ?? ["sink_tokens", "window_tokens"]);
  const defaults = ["sink_tokens", "window_tokens"].filter((k) => !given.has(k));
  const note =
    defaults.length === 2 ? ", the defaults" : defaults.length === 1 ? `, ${defaults[0]} the default` : "";
  const sum = `${c.sinkTokens} + ${c.windowTokens} = ${c.sinkTokens + c.windowTokens}`;
  return (
    `sink_tokens + window_tokens (${sum}${note}) must be <= topk (${c.topk}); ` +
    "set sink_tokens / window_tokens in --hisparse-config"
  );
}

/** Sparse layer indices of a model: every layer not in `denseLayers`, ascending. */
export function sparseLayersOf(c: HiSparseConfig, numLayers: number): number[] {
  const dense = new Set(c.denseLayers);
  return Array.from({ length: numLayers }, (_, l) => l).filter((l) => !dense.has(l));
}

/** The HiSparse settings carried by engine args, or null when HiSparse is off or absent. */
export function hisparseConfigOf(extensions: Record<string, unknown>): HiSparseConfig | null {
  const c = extensions["hisparse"] as HiSparseConfig | undefined;
  return c === undefined || c.mode === "off" ? null : c;
}
