/** The HiSparse flags: parsed through commander into EngineArgs.extensions.hisparse, or reasons. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { Command } from "commander";
import { addEngineFlags, engineArgsFromOptions } from "../../../src/cli/engine_flags.js";
import type { HiSparseConfig } from "../../../src/config/hisparse_config.js";

const dir = mkdtempSync(join(tmpdir(), "hisparse-flags-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Parses engine flags the way `hisparse generate` does. */
function parse(argv: string[]) {
  const cmd = addEngineFlags(new Command("t").exitOverride());
  cmd.parse(argv, { from: "user" });
  return engineArgsFromOptions(cmd.opts());
}

test("no HiSparse flag: HiSparse is off and absent from the args", () => {
  assert.deepEqual(parse([]).extensions, {});
});

test("every flag lands in extensions.hisparse; the whitelist file is read", () => {
  const wl = join(dir, "whitelist.json");
  writeFileSync(wl, "[13, 42]");
  const args = parse([
    "--enable-hybrid-sparse",
    "on",
    "--hybrid-sparse-topk",
    "512",
    "--hybrid-sparse-whitelist-tokens",
    wl,
    "--host-pool-gib",
    "0.5",
    "--hisparse-config",
    '{"sink_tokens":32,"window_tokens":64,"dense_layers":[0],"min_sparse_tokens":100}',
  ]);
  const hs = args.extensions["hisparse"] as HiSparseConfig;
  assert.deepEqual(hs, {
    mode: "on",
    topk: 512,
    deviceBufferTokens: 1024,
    sinkTokens: 32,
    windowTokens: 64,
    digestTokens: 16,
    digestDtype: "bf16",
    denseLayers: [0],
    minSparseTokens: 100,
    selector: "quest",
    residency: "host",
    hostPoolBytes: 2 ** 29,
    defaultHostPool: "device_ratio",
    hostKvCacheDtype: "auto",
    whitelistTokenIds: [13, 42],
    // The --hisparse-config names of the knobs given rather than defaulted (DSA models refuse some).
    givenKeys: ["topk", "sink_tokens", "window_tokens", "dense_layers", "min_sparse_tokens"],
  });
});

test("--host-kv-cache-dtype fp8 sets host_kv_cache_dtype; it must agree with --hisparse-config and needs HiSparse", () => {
  const hs = parse(["--enable-hybrid-sparse", "on", "--host-kv-cache-dtype", "fp8"]).extensions[
    "hisparse"
  ] as HiSparseConfig;
  assert.equal(hs.hostKvCacheDtype, "fp8");
  assert.throws(
    () =>
      parse([
        "--enable-hybrid-sparse",
        "on",
        "--host-kv-cache-dtype",
        "fp8",
        "--hisparse-config",
        '{"host_kv_cache_dtype":"auto"}',
      ]),
    /--host-kv-cache-dtype \(fp8\) and --hisparse-config host_kv_cache_dtype \(auto\) disagree/,
  );
  assert.throws(
    () => parse(["--host-kv-cache-dtype", "fp8"]),
    /--host-kv-cache-dtype needs --enable-hybrid-sparse on or auto/,
  );
  assert.throws(
    () => parse(["--enable-hybrid-sparse", "on", "--host-kv-cache-dtype", "int4"]),
    /Allowed choices are auto, fp8/,
  );
});

test("bad flags are refused with every reason", () => {
  assert.throws(() => parse(["--hybrid-sparse-topk", "64", "--host-pool-gib", "1"]), {
    name: "ConfigError",
    message:
      "invalid configuration:\n  - --hybrid-sparse-topk needs --enable-hybrid-sparse on or auto\n  - --host-pool-gib needs --enable-hybrid-sparse on or auto",
  });
  const notList = join(dir, "bad.json");
  writeFileSync(notList, '{"a": 1}');
  assert.throws(
    () =>
      parse([
        "--enable-hybrid-sparse",
        "auto",
        "--hybrid-sparse-topk",
        "64",
        "--hisparse-config",
        '{"topk":128}',
        "--hybrid-sparse-whitelist-tokens",
        notList,
      ]),
    (e: Error & { reasons?: string[] }) => {
      assert.deepEqual(e.reasons, [
        "--hybrid-sparse-topk (64) and --hisparse-config topk (128) disagree",
        `--hybrid-sparse-whitelist-tokens: ${notList} must hold a JSON list of token ids`,
      ]);
      return true;
    },
  );
});

test("an unknown --hisparse-config key is reported with the knobs' other problems", () => {
  assert.throws(
    () =>
      parse([
        "--enable-hybrid-sparse",
        "on",
        "--hybrid-sparse-topk",
        "64",
        "--hisparse-config",
        '{"top_k":64,"dense_layers":[-1]}',
      ]),
    {
      name: "ConfigError",
      message:
        "invalid configuration:\n" +
        '  - --hisparse-config has an unknown key "top_k" (known: topk, device_buffer_tokens, sink_tokens, window_tokens, digest_tokens, digest_dtype, dense_layers, min_sparse_tokens, selector, residency, host_kv_cache_dtype)\n' +
        "  - dense_layers must hold integers >= 0, got -1",
    },
  );
});

test("--hisparse-config without on or auto: its own JSON problems come with the mode's reason", () => {
  const needs = "--hisparse-config needs --enable-hybrid-sparse on or auto";
  const unknown =
    '--hisparse-config has an unknown key "top_k" (known: topk, device_buffer_tokens, sink_tokens, window_tokens, digest_tokens, digest_dtype, dense_layers, min_sparse_tokens, selector, residency, host_kv_cache_dtype)';
  for (const mode of [[], ["--enable-hybrid-sparse", "off"]]) {
    assert.throws(
      () => parse([...mode, "--hisparse-config", '{"top_k":64,"residency":1,"topk":512}']),
      (e: Error & { reasons?: string[] }) => {
        assert.deepEqual(e.reasons, [
          needs,
          unknown,
          "--hisparse-config residency must be a string (host or hybrid), got 1",
        ]);
        return true;
      },
    );
  }
  assert.throws(
    () => parse(["--hisparse-config", "{topk: 512}"]),
    (e: Error & { reasons?: string[] }) => {
      assert.equal(e.reasons?.length, 2);
      assert.equal(e.reasons[0], needs);
      assert.match(e.reasons[1]!, /^--hisparse-config is not valid JSON \(/);
      return true;
    },
  );
  // Well-formed JSON adds nothing: the mode is the only problem.
  assert.throws(() => parse(["--hisparse-config", '{"topk":512}']), {
    name: "ConfigError",
    message: `invalid configuration: ${needs}`,
  });
});

test("help: --enable-hybrid-sparse describes on for both residencies; --hisparse-config lists every key", () => {
  const help = addEngineFlags(new Command("t")).helpInformation().replace(/\s+/g, " ");
  assert.match(
    help,
    /on \(requests longer than min_sparse_tokens attend to their top-k pages; residency host\|hybrid\)/,
  );
  assert.match(
    help,
    /HiSparse knobs as JSON: topk, device_buffer_tokens, sink_tokens, window_tokens, digest_tokens, digest_dtype, dense_layers, min_sparse_tokens, selector, residency/,
  );
});

test("one reason keeps the invalid configuration: prefix", () => {
  assert.throws(() => parse(["--host-pool-gib", "1"]), {
    name: "ConfigError",
    message: "invalid configuration: --host-pool-gib needs --enable-hybrid-sparse on or auto",
  });
});
