/** HiSparseConfig: JSON parsing, derived defaults, and every validation reason at once. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { defaultDigestTokens, digestTokensFor } from "../../../src/config/hisparse_budget.js";
import {
  HISPARSE_CONFIG_JSON_KEYS,
  parseHiSparseConfigJson,
  resolveHiSparseConfig,
  sparseLayersOf,
  validateHiSparseConfig,
} from "../../../src/config/hisparse_config.js";

test("defaults: topk 2048, buffer 2x topk, sinks 64, window 256, a bf16 digest per page, dense layers 0 and 1, quest", () => {
  const c = resolveHiSparseConfig({ mode: "auto" });
  assert.deepEqual(c, {
    mode: "auto",
    topk: 2048,
    deviceBufferTokens: 4096,
    sinkTokens: 64,
    windowTokens: 256,
    digestTokens: 16,
    digestDtype: "bf16",
    denseLayers: [0, 1],
    minSparseTokens: 64 + 256 + 4096,
    selector: "quest",
    residency: "hybrid",
    hostPoolBytes: null,
    defaultHostPool: "device_ratio",
    hostKvCacheDtype: "auto",
    whitelistTokenIds: [],
    givenKeys: [],
  });
  // Derived defaults follow the given topk; `on` pages go host-resident unless told otherwise.
  const d = resolveHiSparseConfig({ mode: "on", topk: 256, sinkTokens: 64, windowTokens: 128 });
  assert.deepEqual([d.deviceBufferTokens, d.minSparseTokens, d.residency], [512, 64 + 128 + 512, "host"]);
  // The keys given (not defaulted), by their --hisparse-config names (DSA models refuse some).
  assert.deepEqual(d.givenKeys, ["topk", "sink_tokens", "window_tokens"]);
  assert.deepEqual(
    validateHiSparseConfig(d, { blockSize: 16, enablePrefixCaching: false, numLayers: 4 }),
    [],
  );
  assert.deepEqual(sparseLayersOf(d, 4), [2, 3]);
});

test("--hisparse-config JSON: snake_case keys map onto the knobs; unknown keys and wrong types are reasons", () => {
  assert.deepEqual(
    parseHiSparseConfigJson(
      '{"topk":512,"device_buffer_tokens":1024,"sink_tokens":32,"window_tokens":64,"dense_layers":[0],"min_sparse_tokens":0,"selector":"quest"}',
    ),
    {
      overrides: {
        topk: 512,
        deviceBufferTokens: 1024,
        sinkTokens: 32,
        windowTokens: 64,
        denseLayers: [0],
        minSparseTokens: 0,
        selector: "quest",
      },
      reasons: [],
    },
  );
  const bad = parseHiSparseConfigJson('{"top_k":1,"dense_layers":"0","topk":8}');
  assert.deepEqual(bad.overrides, { topk: 8 });
  assert.deepEqual(bad.reasons, [
    '--hisparse-config has an unknown key "top_k" (known: topk, device_buffer_tokens, sink_tokens, window_tokens, digest_tokens, digest_dtype, dense_layers, min_sparse_tokens, selector, residency, host_kv_cache_dtype)',
    '--hisparse-config dense_layers must be a list of integers, got "0"',
  ]);
  // Every wrong-type reason names the type the key expects.
  assert.deepEqual(
    parseHiSparseConfigJson('{"topk":"512","sink_tokens":null,"dense_layers":[0,"1"],"selector":5}').reasons,
    [
      '--hisparse-config topk must be an integer, got "512"',
      "--hisparse-config sink_tokens must be an integer, got null",
      '--hisparse-config dense_layers must be a list of integers, got [0,"1"]',
      "--hisparse-config selector must be a string (quest), got 5",
    ],
  );
  assert.match(parseHiSparseConfigJson("{topk: 1}").reasons[0]!, /^--hisparse-config is not valid JSON/);
  assert.deepEqual(parseHiSparseConfigJson("[1]").reasons, ["--hisparse-config must be a JSON object"]);
});

test("the accepted --hisparse-config keys, in help order", () => {
  assert.deepEqual(HISPARSE_CONFIG_JSON_KEYS, [
    "topk",
    "device_buffer_tokens",
    "sink_tokens",
    "window_tokens",
    "digest_tokens",
    "digest_dtype",
    "dense_layers",
    "min_sparse_tokens",
    "selector",
    "residency",
    "host_kv_cache_dtype",
  ]);
});

test("host_kv_cache_dtype: auto by default, fp8 from the JSON key, anything else a reason", () => {
  const parsed = parseHiSparseConfigJson('{"host_kv_cache_dtype":"fp8"}');
  assert.deepEqual(parsed, { overrides: { hostKvCacheDtype: "fp8" }, reasons: [] });
  const c = resolveHiSparseConfig({ mode: "on", ...parsed.overrides });
  assert.equal(c.hostKvCacheDtype, "fp8");
  assert.deepEqual(c.givenKeys, ["host_kv_cache_dtype"]);
  assert.deepEqual(validateHiSparseConfig(c, { blockSize: 16, enablePrefixCaching: false }), []);
  assert.deepEqual(parseHiSparseConfigJson('{"host_kv_cache_dtype":8}').reasons, [
    "--hisparse-config host_kv_cache_dtype must be a string (auto or fp8), got 8",
  ]);
  const bad = resolveHiSparseConfig({
    mode: "on",
    ...parseHiSparseConfigJson('{"host_kv_cache_dtype":"int4"}').overrides,
  });
  assert.deepEqual(validateHiSparseConfig(bad, { blockSize: 16, enablePrefixCaching: false }), [
    "host_kv_cache_dtype must be one of auto, fp8, got int4",
  ]);
});

test("digest_dtype: bf16 by default, fp8 from the JSON key, anything else a reason", () => {
  const parsed = parseHiSparseConfigJson('{"digest_dtype":"fp8"}');
  assert.deepEqual(parsed, { overrides: { digestDtype: "fp8" }, reasons: [] });
  const c = resolveHiSparseConfig({ mode: "on", ...parsed.overrides });
  assert.equal(c.digestDtype, "fp8");
  assert.deepEqual(c.givenKeys, ["digest_dtype"]);
  assert.deepEqual(validateHiSparseConfig(c, { blockSize: 16, enablePrefixCaching: false }), []);
  assert.equal(resolveHiSparseConfig({ mode: "on" }).digestDtype, "bf16");
  assert.deepEqual(parseHiSparseConfigJson('{"digest_dtype":1}').reasons, [
    "--hisparse-config digest_dtype must be a string (bf16 or fp8), got 1",
  ]);
  const bad = resolveHiSparseConfig({
    mode: "on",
    ...parseHiSparseConfigJson('{"digest_dtype":"f32"}').overrides,
  });
  assert.deepEqual(validateHiSparseConfig(bad, { blockSize: 16, enablePrefixCaching: false }), [
    "digest_dtype must be one of bf16, fp8, got f32",
  ]);
});

test("digest_tokens by default: the block size (one digest per page; sub-page digests are opt-in)", () => {
  const table = [1, 2, 4, 8, 16, 32, 64].map((bs) => [bs, defaultDigestTokens(bs)]);
  assert.deepEqual(table, [
    [1, 1],
    [2, 2],
    [4, 4],
    [8, 8],
    [16, 16],
    [32, 32],
    [64, 64],
  ]);
});

test("invalid combinations are all reported", () => {
  const c = resolveHiSparseConfig({
    mode: "on",
    topk: 100,
    deviceBufferTokens: 64,
    sinkTokens: 64,
    windowTokens: 0,
    denseLayers: [0, 4, 0],
    minSparseTokens: -1,
    hostPoolBytes: 0,
    whitelistTokenIds: [5, 99999],
  });
  assert.deepEqual(
    validateHiSparseConfig(c, { blockSize: 16, enablePrefixCaching: true, numLayers: 4, vocabSize: 16384 }),
    [
      "topk (100) must be a multiple of the block size (16)",
      "window_tokens must be an integer >= 16, got 0",
      "device_buffer_tokens (64) must be >= topk (100)",
      "min_sparse_tokens must be an integer >= 0, got -1",
      "--host-pool-gib must be > 0, got 0",
      "dense layer 4 does not exist (the model has 4 layers)",
      "dense layer 0 is listed twice",
      "whitelist token 99999 is not a token id of the vocabulary (size 16384)",
    ],
  );
  const allDense = resolveHiSparseConfig({
    mode: "auto",
    topk: 64,
    sinkTokens: 16,
    windowTokens: 16,
    denseLayers: [0, 1],
  });
  assert.deepEqual(
    validateHiSparseConfig(allDense, { blockSize: 16, enablePrefixCaching: false, numLayers: 2 }),
    ["dense_layers lists every layer of the model (2); at least one must attend sparsely"],
  );
  assert.deepEqual(
    validateHiSparseConfig(resolveHiSparseConfig({ mode: "auto", topk: 64 }), {
      blockSize: 16,
      enablePrefixCaching: false,
    }),
    [],
  );
  assert.deepEqual(
    validateHiSparseConfig(resolveHiSparseConfig({ mode: "auto", topk: 64, windowTokens: 32 }), {
      blockSize: 16,
      enablePrefixCaching: false,
    }),
    [], // the derived sinks leave room for the given window: 64 / 16 = 16 tokens, within 64 - 32
  );
  assert.deepEqual(
    validateHiSparseConfig(
      resolveHiSparseConfig({ mode: "auto", topk: 64, sinkTokens: 48, windowTokens: 32 }),
      {
        blockSize: 16,
        enablePrefixCaching: false,
      },
    ),
    [
      "sink_tokens + window_tokens (48 + 32 = 80) must be <= topk (64); set sink_tokens / window_tokens in --hisparse-config",
    ],
  );
});

test("a bad topk is reported alone, not with the reasons derived from it", () => {
  const ctx = { blockSize: 16, enablePrefixCaching: false };
  assert.deepEqual(validateHiSparseConfig(resolveHiSparseConfig({ mode: "on", topk: -5 }), ctx), [
    "topk must be an integer >= 16, got -5",
  ]);
  // A misaligned topk: its derived buffer (200) is not reported misaligned too.
  assert.deepEqual(
    validateHiSparseConfig(
      resolveHiSparseConfig({ mode: "on", topk: 100, sinkTokens: 16, windowTokens: 16 }),
      ctx,
    ),
    ["topk (100) must be a multiple of the block size (16)"],
  );
  // Values given explicitly are still checked.
  assert.deepEqual(
    validateHiSparseConfig(
      resolveHiSparseConfig({ mode: "on", topk: -5, deviceBufferTokens: 8, minSparseTokens: -1 }),
      ctx,
    ),
    [
      "topk must be an integer >= 16, got -5",
      "device_buffer_tokens must be an integer >= 16, got 8",
      "min_sparse_tokens must be an integer >= 0, got -1",
    ],
  );
});

test("dense_layers must hold integers >= 0", () => {
  const c = resolveHiSparseConfig({ mode: "on", topk: 512, denseLayers: [-1, 1.5] });
  assert.deepEqual(validateHiSparseConfig(c, { blockSize: 16, enablePrefixCaching: false }), [
    "dense_layers must hold integers >= 0, got -1",
    "dense_layers must hold integers >= 0, got 1.5",
  ]);
});

test("residency: host or hybrid from --hisparse-config; host needs mode on", () => {
  const ctx = { blockSize: 16, enablePrefixCaching: false, numLayers: 4 };
  const parsed = parseHiSparseConfigJson('{"residency":"hybrid"}');
  assert.deepEqual(parsed, { overrides: { residency: "hybrid" }, reasons: [] });
  assert.deepEqual(parseHiSparseConfigJson('{"residency":1}').reasons, [
    "--hisparse-config residency must be a string (host or hybrid), got 1",
  ]);
  const on = resolveHiSparseConfig({ mode: "on", ...parsed.overrides });
  assert.deepEqual([on.residency, validateHiSparseConfig(on, ctx)], ["hybrid", []]);
  assert.deepEqual(validateHiSparseConfig(resolveHiSparseConfig({ mode: "auto", residency: "host" }), ctx), [
    'residency "host" needs --enable-hybrid-sparse on (auto keeps pages on the device while there is room)',
  ]);
  const bad = resolveHiSparseConfig({ mode: "on", residency: "gpu" as never });
  assert.deepEqual(validateHiSparseConfig(bad, ctx), ["residency must be one of host, hybrid, got gpu"]);
});

test("sink and window derive from topk and the block size; given values are honoured", () => {
  // topk / 16 sinks and topk / 8 window in whole pages, at least a page, at most 64 and 256.
  const at = (topk: number, bs = 16, o: Record<string, number> = {}) => {
    const c = resolveHiSparseConfig({ mode: "on", topk, ...o }, bs);
    return [c.sinkTokens, c.windowTokens, c.digestTokens];
  };
  assert.deepEqual(at(256), [16, 32, 16]); // 13 of 16 pages left to Quest (was 4 with 64 + 128)
  assert.deepEqual(at(512), [32, 64, 16]);
  assert.deepEqual(at(1024), [64, 128, 16]);
  assert.deepEqual(at(2048), [64, 256, 16]);
  assert.deepEqual(at(8192), [64, 256, 16]);
  assert.deepEqual(at(16), [0, 16, 16]); // one page: the tail page's window only
  assert.deepEqual(at(32), [16, 16, 16]);
  assert.deepEqual(at(256, 32), [32, 32, 32]); // whole pages of 32
  assert.deepEqual(at(256, 16, { sinkTokens: 64, windowTokens: 128, digestTokens: 4 }), [64, 128, 4]);
  assert.deepEqual(at(256, 16, { windowTokens: 240 }), [16, 240, 16]);
  const bad = resolveHiSparseConfig({ mode: "on", topk: 256, digestTokens: 3 });
  assert.deepEqual(validateHiSparseConfig(bad, { blockSize: 16, enablePrefixCaching: false }), [
    "digest_tokens must be a divisor of the block size (16), got 3",
  ]);
  // Resolved before the engine's --block-size is known (16), then used at block size 8: the
  // default digest follows the engine's page, a given one is checked as given.
  const early = resolveHiSparseConfig({ mode: "on", topk: 64, deviceBufferTokens: 128 });
  assert.deepEqual(validateHiSparseConfig(early, { blockSize: 8, enablePrefixCaching: false }), []);
  assert.equal(digestTokensFor(early, 8), 8);
  const given = resolveHiSparseConfig({ mode: "on", topk: 64, digestTokens: 16 });
  assert.equal(digestTokensFor(given, 8), 16);
  assert.deepEqual(validateHiSparseConfig(given, { blockSize: 8, enablePrefixCaching: false }), [
    "digest_tokens must be a divisor of the block size (8), got 16",
  ]);
});
