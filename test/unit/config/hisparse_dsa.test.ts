/**
 * HiSparse settings of DSA models: what the model fixes (selector, topk), what is derived from
 * the user's knobs (hot buffer 2 x index_topk, no sinks, a one-page window, no dense layers) and
 * the keys refused with their reasons, all at once.
 */
import assert from "node:assert/strict";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { makeEngineArgs, validateEngineArgs } from "../../../src/config/engine_args.js";
import { parseHiSparseConfigJson, resolveHiSparseConfig } from "../../../src/config/hisparse_config.js";
import {
  type DsaHiSparseContext,
  dsaHiSparseConfig,
  hisparseReasonsFor,
} from "../../../src/config/hisparse_dsa.js";
import { loadModelConfig } from "../../../src/config/model_config.js";

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

const CTX: DsaHiSparseContext = {
  indexer: { topk: 32, headDim: 32, numHeads: 4, ropeInterleave: true, layerTypes: ["full", "shared"] },
  blockSize: 16,
  enablePrefixCaching: false,
  numLayers: 2,
  vocabSize: 383,
  architecture: "GlmMoeDsaForCausalLM",
};

/** The settings `--enable-hybrid-sparse mode --hisparse-config json` resolve to. */
const user = (mode: "auto" | "on", json = "{}") =>
  resolveHiSparseConfig({ ...parseHiSparseConfigJson(json).overrides, mode });

test("defaults: selector dsa, topk = index_topk, hot buffer 2x, no sinks, a one-page window, no dense layers", () => {
  const { config: c, reasons } = dsaHiSparseConfig(user("on"), CTX);
  assert.deepEqual(reasons, []);
  assert.deepEqual(
    [
      c.selector,
      c.topk,
      c.deviceBufferTokens,
      c.sinkTokens,
      c.windowTokens,
      c.denseLayers,
      c.minSparseTokens,
    ],
    ["dsa", 32, 64, 0, 16, [], 16 + 64],
  );
  assert.equal(c.residency, "host");
  // The hot buffer is allocated in whole blocks: 2 x 20 = 40 tokens round up to 48.
  const odd = dsaHiSparseConfig(user("auto"), { ...CTX, indexer: { ...CTX.indexer, topk: 20 } });
  assert.deepEqual([odd.reasons, odd.config.topk, odd.config.deviceBufferTokens], [[], 20, 48]);
});

test("given knobs that apply are kept: device_buffer_tokens, dense_layers, min_sparse_tokens, residency, topk = index_topk", () => {
  const json =
    '{"topk":32,"device_buffer_tokens":128,"dense_layers":[0],"min_sparse_tokens":0,"residency":"hybrid"}';
  const { config: c, reasons } = dsaHiSparseConfig(user("on", json), CTX);
  assert.deepEqual(reasons, []);
  assert.deepEqual(
    [c.deviceBufferTokens, c.denseLayers, c.minSparseTokens, c.residency],
    [128, [0], 0, "hybrid"],
  );
});

test("Quest's keys, a topk other than index_topk and a hot buffer below it are refused, every reason at once", () => {
  const json =
    '{"sink_tokens":16,"window_tokens":16,"selector":"quest","digest_tokens":4,"digest_dtype":"fp8","topk":64,"device_buffer_tokens":16}';
  const { reasons } = dsaHiSparseConfig(user("on", json), CTX);
  const refusedKey = (k: string) =>
    `--hisparse-config ${k} does not apply to DSA models (GlmMoeDsaForCausalLM): the model's lightning indexer selects the 32 tokens each layer attends to; leave ${k} out`;
  assert.deepEqual(reasons, [
    ...["sink_tokens", "window_tokens", "selector", "digest_tokens", "digest_dtype"].map(refusedKey),
    "topk (64) must equal the DSA model's index_topk (32) or be left out: GlmMoeDsaForCausalLM attends to its indexer's top 32 tokens",
    "device_buffer_tokens (16) must be >= the DSA model's index_topk (32): one step's selected rows must fit the hot buffer",
  ]);
});

test("the shared checks still apply: whole-block hot buffer, dense layers, prefix caching", () => {
  const { reasons } = dsaHiSparseConfig(user("auto", '{"device_buffer_tokens":40,"dense_layers":[0,1]}'), {
    ...CTX,
    enablePrefixCaching: true,
  });
  assert.deepEqual(reasons, [
    "device_buffer_tokens (40) must be a multiple of the block size (16)",
    "dense_layers lists every layer of the model (2); at least one must attend sparsely",
    "--enable-prefix-caching with --enable-hybrid-sparse auto is not supported for DSA models yet (GlmMoeDsaForCausalLM): their latent rows and indexer keys do not take part in the host tier's page identity; use --enable-hybrid-sparse off or leave prefix caching off",
  ]);
});

test("the checks before loading follow the model: a DSA model refuses Quest's keys before any Quest check", () => {
  // Quest's keys with sinks + window (1024 + 2048) beyond the explicit topk (2048): for a Quest
  // model that is Quest's sink+window reason; for GLM-5 (index_topk 2048) only the DSA refusals.
  const hs = user("on", '{"topk":2048,"sink_tokens":1024,"window_tokens":2048,"selector":"quest"}');
  const ctx = { blockSize: 16, enablePrefixCaching: false };
  const glm5 = loadModelConfig(join(repoRoot, "configs", "glm-5"));
  const refused = (key: string) =>
    `--hisparse-config ${key} does not apply to DSA models (GlmMoeDsaForCausalLM): the model's lightning indexer selects the 2048 tokens each layer attends to; leave ${key} out`;
  assert.deepEqual(hisparseReasonsFor(hs, ctx, glm5), [
    refused("sink_tokens"),
    refused("window_tokens"),
    refused("selector"),
  ]);
  const sinkWindow =
    "sink_tokens + window_tokens (1024 + 2048 = 3072) must be <= topk (2048); set sink_tokens / window_tokens in --hisparse-config";
  const llama = loadModelConfig(join(repoRoot, "configs", "llama-3.1-8b"));
  assert.deepEqual(hisparseReasonsFor(hs, ctx, llama), [sinkWindow]);
  // config.json unreadable: Quest's checks (the load then reports the model's own error).
  assert.deepEqual(hisparseReasonsFor(hs, ctx, null), [sinkWindow]);
  // validateEngineArgs: by the model's rules when given one; without one (the engine's call) the
  // worker checks them once it has read config.json.
  const args = makeEngineArgs({ extensions: { hisparse: hs } });
  assert.deepEqual(validateEngineArgs(args, glm5), hisparseReasonsFor(hs, ctx, glm5));
  assert.deepEqual(validateEngineArgs(args, llama), [sinkWindow]);
  assert.deepEqual(validateEngineArgs(args), []);
});
