/** detectCuda() never throws and explains why CUDA is unavailable (for `--device auto`). */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { detectCuda } from "../../../src/backends/detect.js";

describe("detectCuda", () => {
  it("reports a missing addon with the command that builds it", () => {
    const d = detectCuda("/nonexistent/hisparse_native.node");
    assert.equal(d.available, false);
    assert.match(d.reason, /run `npm run build:native`/);
    assert.equal(d.addonPath, "/nonexistent/hisparse_native.node");
    assert.equal(d.deviceName, null);
    assert.equal(d.driverVersion, null);
  });

  it("reports a file that is not an addon as unloadable", () => {
    const dir = mkdtempSync(join(tmpdir(), "hisparse-detect-"));
    const path = join(dir, "hisparse_native.node");
    writeFileSync(path, "not an ELF file");
    const d = detectCuda(path);
    rmSync(dir, { recursive: true });
    assert.equal(d.available, false);
    assert.match(d.reason, /failed to load/);
  });

  it("never throws with the default addon; a reason accompanies every unavailable result", () => {
    const d = detectCuda();
    assert.equal(typeof d.available, "boolean");
    if (!d.available) assert.ok(d.reason.length > 0);
    else assert.ok(d.deviceName !== null && d.computeCapability !== null);
  });
});
