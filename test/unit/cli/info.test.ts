/**
 * `hisparse info`'s backend line: on a machine without an NVIDIA driver it says so, instead of
 * the addon's advice to run `npm run build:native` (which cannot help there); with a driver the
 * detection's reason (build advice included) is kept. Parameter counts print in a unit that fits
 * (a tiny MoE model's active parameters in K, not "0.00 B").
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { cpuBackendReason, moeSummary, nvidiaDriverPresent } from "../../../src/cli/info.js";
import { loadModelConfig } from "../../../src/config/model_config.js";
import { formatParameterCount } from "../../../src/plan/format.js";
import { repoRoot } from "../../helpers/reference.js";

const tmp = mkdtempSync(join(tmpdir(), "hisparse-info-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

describe("info: why the CPU backend runs", () => {
  const missingAddon = "the native CUDA addon is not built (x.node is missing): run `npm run build:native`";

  it("no driver: no build advice", () => {
    const r = cpuBackendReason(missingAddon, false);
    assert.equal(r, "no NVIDIA GPU driver on this machine; the CPU backend runs every model");
    assert.ok(!r.includes("build:native"));
  });

  it("a driver but no addon: the build advice stays", () => {
    assert.equal(cpuBackendReason(missingAddon, true), `CUDA not available: ${missingAddon}`);
  });

  it("the driver is seen through its files", () => {
    const f = join(tmp, "version");
    assert.equal(nvidiaDriverPresent([f]), false);
    writeFileSync(f, "NVRM version: 580\n");
    assert.equal(nvidiaDriverPresent([join(tmp, "nope"), f]), true);
  });
});

describe("info: parameter counts in a unit that fits", () => {
  it("B, M, K, or the count itself", () => {
    assert.deepEqual([8.03e9, 5_180_000, 529_792, 3_200, 512].map(formatParameterCount), [
      "8.03 B",
      "5.18 M",
      "529.79 K",
      "3.20 K",
      "512",
    ]);
  });

  it("a tiny MoE model's active parameters are not 0.00 B", () => {
    const c = loadModelConfig(join(repoRoot, "test", "fixtures", "models", "tiny-qwen3-moe-packed"));
    assert.match(moeSummary(c)!, /no shared expert; 529\.79 K active parameters$/);
    const big = loadModelConfig(join(repoRoot, "configs", "qwen3-30b-a3b"));
    assert.match(moeSummary(big)!, /; 3\.35 B active parameters$/);
  });
});
