/**
 * GPU sampling: nvidia-smi's CSV lines are parsed, energy is the trapezoidal integral of power
 * over nvidia-smi's timestamps per GPU, and the monitor reads a (fake) nvidia-smi process.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  GpuMonitor,
  NVIDIA_SMI_ARGS,
  nvidiaSmiAvailable,
  parseNvidiaSmiLine,
  summarizeGpuSamples,
} from "../../../src/bench/gpu_monitor.js";

/**
 * Two GPUs, three samples 100 ms apart; GPU 1 reports no power at 0.1 s.
 * GPU 0 energy: (100 + 300)/2 × 0.1 + (300 + 100)/2 × 0.1 = 40 J; GPU 1: 200 W over 0.2 s =
 * 40 J (the N/A sample is skipped). Memory sums 3000, 4000, 3800 MiB: peak 4000.
 */
const LINES = [
  "2025/01/31 12:00:00.000, 0, 1000, 100.00",
  "2025/01/31 12:00:00.000, 1, 2000, 200.00",
  "2025/01/31 12:00:00.100, 0, 1500, 300.00",
  "2025/01/31 12:00:00.100, 1, 2500, [N/A]",
  "2025/01/31 12:00:00.200, 0, 1200, 100.00",
  "2025/01/31 12:00:00.200, 1, 2600, 200.00",
];

describe("GPU monitor", () => {
  const dir = mkdtempSync(join(tmpdir(), "hisparse-smi-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("parses a sample line and rejects other lines", () => {
    const s = parseNvidiaSmiLine("2025/01/31 12:00:00.250, 3, 81234, 612.45")!;
    assert.equal(s.index, 3);
    assert.equal(s.memoryUsedMiB, 81234);
    assert.equal(s.powerW, 612.45);
    assert.equal(s.timeMs, new Date(2025, 0, 31, 12, 0, 0, 250).getTime());
    assert.equal(parseNvidiaSmiLine("No devices were found"), null);
    assert.ok(Number.isNaN(parseNvidiaSmiLine("2025/01/31 12:00:00.250, 0, 1, [N/A]")!.powerW));
  });

  it("integrates power per GPU and sums memory across GPUs", () => {
    const stats = summarizeGpuSamples(LINES.map((l) => parseNvidiaSmiLine(l)!));
    assert.equal(stats.numGpus, 2);
    assert.equal(stats.numSamples, 6);
    assert.ok(Math.abs(stats.energyJ - 80) < 1e-9, String(stats.energyJ));
    assert.ok(Math.abs(stats.meanPowerW - 400) < 1e-6, String(stats.meanPowerW));
    assert.equal(stats.maxMemoryUsedMiB, 4000);
  });

  it("reads a running nvidia-smi (a script printing the lines) until stopped", async () => {
    const smi = join(dir, "nvidia-smi");
    writeFileSync(
      smi,
      `#!/bin/sh\nif [ "$1" = "-L" ]; then echo "GPU 0: Fake"; exit 0; fi\n` +
        `[ "$*" = "${NVIDIA_SMI_ARGS.join(" ")}" ] || exit 3\n` +
        `printf '${LINES.join("\\n")}\\n'\nexec sleep 30\n`,
    );
    chmodSync(smi, 0o755);
    assert.equal(nvidiaSmiAvailable(smi), true);
    assert.equal(nvidiaSmiAvailable(join(dir, "missing")), false);
    const m = new GpuMonitor(smi);
    m.start();
    // Wait until the script's lines were read (stop() kills it and keeps what was read).
    while (m.numSamples < LINES.length) await new Promise((r) => setTimeout(r, 10));
    const stats = await m.stop();
    assert.equal(stats.numSamples, 6);
    assert.ok(Math.abs(stats.energyJ - 80) < 1e-9);
  });
});
