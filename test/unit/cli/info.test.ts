/**
 * `hisparse info`'s backend line: on a machine without an NVIDIA driver it says so, instead of
 * the addon's advice to run `npm run build:native` (which cannot help there); with a driver the
 * detection's reason (build advice included) is kept.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { cpuBackendReason, nvidiaDriverPresent } from "../../../src/cli/info.js";

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
