/** HiSparse Prometheus series and the periodic sparse_block_state line. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Registry } from "prom-client";
import type { HiSparseStats } from "../../../src/core/hisparse/plan.js";
import {
  attachHiSparseObservability,
  formatSparseBlockStateLine,
  HiSparseMetrics,
} from "../../../src/metrics/hisparse_metrics.js";

function stats(p: Partial<HiSparseStats>): HiSparseStats {
  return {
    numActivePages: 0,
    numSparsePages: 0,
    numInactivePages: 0,
    numSparseRequests: 0,
    hostPoolUsedBlocks: 0,
    hostPoolTotalBlocks: 100,
    hitsTotal: 0,
    missesTotal: 0,
    hostToDeviceBytesTotal: 0,
    deviceToHostBytesTotal: 0,
    spilledPagesTotal: 0,
    mirroredPagesTotal: 0,
    sparseDecodesTotal: 0,
    ...p,
  };
}

/** The served model name every series is labelled with. */
const MODEL = "ref-small";
const L = `model_name="${MODEL}"`;

test("counters advance by the stats' differences; gauges take the latest values", async () => {
  const registry = new Registry();
  const m = new HiSparseMetrics(registry, MODEL);
  // Before any step the counters are scraped at 0, already labelled.
  assert.match(await registry.metrics(), new RegExp(`^hisparse_cache_hits_total\\{${L}\\} 0$`, "m"));
  m.update(stats({ hitsTotal: 10, missesTotal: 4, hostToDeviceBytesTotal: 4096, spilledPagesTotal: 7 }));
  m.update(
    stats({
      hitsTotal: 25,
      missesTotal: 5,
      hostToDeviceBytesTotal: 5120,
      spilledPagesTotal: 7,
      sparseDecodesTotal: 9,
      numActivePages: 12,
      numSparsePages: 3,
      numInactivePages: 40,
      numSparseRequests: 2,
      hostPoolUsedBlocks: 55,
    }),
  );
  const text = await registry.metrics();
  const value = (series: string) => {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.split(" ")[1]);
  };
  assert.equal(value(`hisparse_cache_hits_total{${L}}`), 25);
  assert.equal(value(`hisparse_cache_misses_total{${L}}`), 5);
  assert.equal(value(`hisparse_host_to_device_bytes_total{${L}}`), 5120);
  assert.equal(value(`hisparse_device_to_host_bytes_total{${L}}`), 0);
  assert.equal(value(`hisparse_spilled_pages_total{${L}}`), 7);
  assert.equal(value(`hisparse_sparse_decodes_total{${L}}`), 9);
  assert.equal(value(`hisparse_pages{${L},state="ACTIVE"}`), 12);
  assert.equal(value(`hisparse_pages{${L},state="SPARSE"}`), 3);
  assert.equal(value(`hisparse_pages{${L},state="INACTIVE"}`), 40);
  assert.equal(value(`hisparse_host_pool_used_pages{${L}}`), 55);
  assert.equal(value(`hisparse_host_pool_usage{${L}}`), 0.55);
  assert.equal(value(`hisparse_sparse_requests{${L}}`), 2);
  // Every sample of every series carries the label: 6 counters, 3 page states, 3 gauges.
  const samples = text.split("\n").filter((l) => l.startsWith("hisparse_"));
  assert.equal(samples.length, 12);
  for (const l of samples) assert.ok(l.includes(`{${L}`), l);
});

test("the periodic line reports pages now, and hit rate and GB/s over the interval", () => {
  const prev = stats({ hitsTotal: 100, missesTotal: 20, hostToDeviceBytesTotal: 1e9 });
  const cur = stats({
    numActivePages: 12,
    numSparsePages: 3,
    numInactivePages: 40,
    hitsTotal: 187,
    missesTotal: 33,
    hostToDeviceBytesTotal: 1e9 + 2.5e8,
  });
  assert.equal(
    formatSparseBlockStateLine(cur, prev, 10),
    "sparse_block_state: ACTIVE=12 SPARSE=3 INACTIVE=40 hit_rate=0.870 h2d_GBps=0.025",
  );
  assert.equal(
    formatSparseBlockStateLine(stats({ numActivePages: 5 }), null, 10),
    "sparse_block_state: ACTIVE=5 SPARSE=0 INACTIVE=0 hit_rate=n/a h2d_GBps=0.000",
  );
});

test("attachHiSparseObservability: series refreshed by the collector, one log line per interval", async () => {
  const registry = new Registry();
  const collectors: (() => void)[] = [];
  const lines: (() => string | null)[] = [];
  let cur = stats({ hitsTotal: 0, missesTotal: 0, hostToDeviceBytesTotal: 0 });
  let t = 100;
  attachHiSparseObservability(
    { registry, modelName: MODEL, addCollector: (fn) => collectors.push(fn) },
    { addLine: (fn) => lines.push(fn) },
    () => cur,
    () => t,
  );
  assert.equal(collectors.length, 1);
  assert.equal(lines.length, 1);
  // Interval 1: 3 hits, 1 miss, 2e9 bytes in 2 s.
  cur = stats({ hitsTotal: 3, missesTotal: 1, hostToDeviceBytesTotal: 2e9 });
  t = 102;
  collectors[0]!();
  assert.match(await registry.metrics(), /^hisparse_cache_hits_total\{model_name="ref-small"\} 3$/m);
  assert.match(lines[0]!()!, /hit_rate=0\.750 h2d_GBps=1\.000$/);
  // Interval 2: nothing looked up.
  t = 104;
  assert.match(lines[0]!()!, /hit_rate=n\/a h2d_GBps=0\.000$/);
});
