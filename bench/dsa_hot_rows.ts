/**
 * DSA hot-row hit rate (issue 15), CPU, no model: the row resolver (LruHotRowResolver, the
 * oracle of hsRowResolve) over selections with a set step-to-step overlap p
 * (SelectionOverlap: each previous row kept with probability p, the rest drawn uniformly from
 * the context), every page but the tail host-resident (`on`, residency host). Reports, per p and
 * hot-buffer size (2x and 4x index_topk), the steady-state miss rate (misses / selected host
 * rows, after a warm-up) and the host-to-device bytes per step and layer at GLM-5's latent row
 * (576 bf16 = 1,152 B). These are the figures the throughput benchmark's p knob stands for.
 *
 *   node --import tsx bench/dsa_hot_rows.ts [--context 131072] [--topk 2048] [--steps 200] [--out FILE]
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import {
  type HostRowTier,
  LruHotRowResolver,
  NO_ENTRY,
  SelectionOverlap,
} from "../src/attention/sparse/dsa.js";
import type { SparseBatch } from "../src/attention/sparse/selector.js";
import { asRequestId } from "../src/core/ids.js";

const { values } = parseArgs({
  options: {
    context: { type: "string", default: "131072" },
    topk: { type: "string", default: "2048" },
    steps: { type: "string", default: "200" },
    warmup: { type: "string", default: "20" },
    out: { type: "string" },
  },
});
const context = Number(values.context);
const K = Number(values.topk);
const steps = Number(values.steps);
const warmup = Number(values.warmup);
const BS = 64;
const ROW_BYTES = 576 * 2;

/** One request of `context` tokens, every page host-resident but the tail, with `hotRows` hot rows. */
function batchOf(hotRows: number): SparseBatch {
  const pages = Math.ceil(context / BS);
  const blockIds = new Int32Array(pages).fill(-1);
  blockIds[pages - 1] = 0;
  return {
    numSparse: 1,
    reqIds: [asRequestId("r")],
    batchIdx: Int32Array.of(0),
    tokenIdx: Int32Array.of(0),
    numTokens: Int32Array.of(context),
    pageStart: Int32Array.of(0, pages),
    hostBlockIds: Int32Array.from({ length: pages }, (_, i) => i),
    blockIds,
    pinned: new Uint8Array(pages),
    hotStart: Int32Array.of(0, hotRows / BS),
    hotBlockIds: Int32Array.from({ length: hotRows / BS }, (_, i) => 1 + i),
  };
}

/** Steady-state miss rate for overlap p and a hot buffer of `factor` x topk rows. */
function missRate(p: number, factor: number): { missRate: number; bytesPerStep: number } {
  const tier: HostRowTier = { rowBytes: ROW_BYTES, loadRows: () => {} };
  const resolver = new LruHotRowResolver(tier, BS);
  const overlap = new SelectionOverlap(p, 12345);
  const batch = batchOf(factor * K);
  let [misses, lookups, bytes] = [0, 0, 0];
  let seed = 2463534242;
  const uniform = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 2 ** 32;
  };
  for (let step = 0; step < warmup + steps; step++) {
    // The "model's" picks (only the first step keeps them): K distinct positions.
    const row = new Int32Array(K).fill(NO_ENTRY);
    const first = new Set<number>();
    while (first.size < K) first.add(Math.floor(uniform() * context));
    row.set([...first].sort((a, b) => a - b));
    overlap.apply(batch.reqIds[0]!, 0, row, context);
    const res = resolver.resolve(0, { K, positions: row }, batch);
    resolver.apply(0, res, { shape: [1], dtype: "f32" });
    const c = resolver.takeCounters();
    if (step < warmup) continue;
    misses += c.misses;
    lookups += c.misses + c.hits;
    bytes += c.hostToDeviceBytes;
  }
  return { missRate: misses / lookups, bytesPerStep: bytes / steps };
}

const lines = [
  `# DSA hot rows: LRU miss rate vs selection overlap (CPU, resolver only)`,
  "",
  `Command: \`node --import tsx bench/dsa_hot_rows.ts --context ${context} --topk ${K} --steps ${steps}\``,
  "",
  `One request of ${context} tokens, every page host-resident but the tail (on, residency host), index_topk ${K},`,
  `pages of ${BS}; ${warmup} warm-up steps, then ${steps} measured. Miss rate = rows copied from the host tier /`,
  "selected host-resident rows; bytes per step and layer at GLM-5's 1,152-byte latent row. The selections",
  "use the benchmark-only overlap knob p (SelectionOverlap): they are synthetic, not a model's.",
  "",
  "| p | hot buffer | miss rate | H2D per step and layer |",
  "|---|---|---|---|",
];
for (const p of [0, 0.87, 0.93])
  for (const factor of [2, 4]) {
    const r = missRate(p, factor);
    lines.push(
      `| ${p} | ${factor}x topk (${factor * K} rows) | ${(100 * r.missRate).toFixed(1)}% | ${(r.bytesPerStep / 2 ** 20).toFixed(2)} MiB |`,
    );
  }
const text = `${lines.join("\n")}\n`;
process.stdout.write(text);
if (values.out !== undefined) writeFileSync(values.out, text);
