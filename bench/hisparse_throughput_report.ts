/**
 * The tables bench/hisparse_throughput.ts prints at the end of a run (its rows, their columns).
 */

/** One measured point. */
export interface Row {
  context: number;
  /** The column label: the mode, or `mode#k` for its k-th round, then ` p=P` with several overlaps. */
  mode: string;
  /** The selection overlap p of the point (HiSparse modes with `--overlap`), else null. */
  overlap: number | null;
  batch: number;
  tokPerS: number;
  stepMs: number;
  running: number;
  waiting: number;
  preemptions: number;
  hitRate: number | null;
  h2dGBps: number | null;
  /** Request decode steps that attended sparsely, over the counted steps. */
  sparseDecodes: number;
  note: string;
}

/** The columns and points of a run. */
export interface TableSpec {
  /** Contexts as run (tokens). */
  contexts: readonly number[];
  /** The batch sizes of a context. */
  batchesFor: (ctx: number) => number[];
  /** Column labels in order (off's included). */
  labels: readonly string[];
  /** The columns compared with off. */
  ratioLabels: readonly string[];
  /** The off column a column is compared with. */
  offOf: (label: string) => string;
}

/**
 * The point table (tok/s per column and B, ratios to off at the same B), then the peaks: each
 * column's best pure-decode tok/s over the batch sizes of a context and its ratio to off's peak
 * (issue 18's target: >= 2.5x), and batch 1 against off's batch 1 (target: auto >= 0.98x).
 */
export function printThroughputTables(rows: readonly Row[], t: TableSpec): void {
  const { contexts, batchesFor, labels, ratioLabels, offOf } = t;
  console.log(
    `\n| context | B | ${labels.map((m) => `${m} tok/s (running)`).join(" | ")} | ${ratioLabels.map((m) => `${m}/${offOf(m)}`).join(" | ")} |`,
  );
  console.log(`|---|---|${labels.map(() => "---|").join("")}${ratioLabels.map(() => "---|").join("")}`);
  for (const ctx of contexts)
    for (const b of batchesFor(ctx)) {
      const get = (m: string) => rows.find((r) => r.context === ctx && r.batch === b && r.mode === m);
      if (!labels.some((m) => get(m) !== undefined)) continue;
      const cells = labels.map((m) => {
        const r = get(m);
        // *: some timed steps also prefilled and were not counted (see the point's note)
        return r === undefined ? "-" : `${r.tokPerS.toFixed(0)} (${r.running})${r.note === "" ? "" : "*"}`;
      });
      const ratio = (m: string) => {
        const [a, o] = [get(m), get(offOf(m))];
        return a && o ? `${(a.tokPerS / o.tokPerS).toFixed(2)}x` : "-";
      };
      console.log(`| ${ctx} | ${b} | ${cells.join(" | ")} | ${ratioLabels.map(ratio).join(" | ")} |`);
    }
  console.log(
    "\n| context | column | peak tok/s (B, running) | hit rate at peak | peak / off's peak | B=1 / off's B=1 |",
  );
  console.log("|---|---|---|---|---|---|");
  for (const ctx of contexts) {
    const peak = (m: string) =>
      rows
        .filter((r) => r.context === ctx && r.mode === m && r.note === "" && r.tokPerS > 0)
        .reduce<Row | null>((a, r) => (a === null || r.tokPerS > a.tokPerS ? r : a), null);
    const b1 = (m: string) => rows.find((r) => r.context === ctx && r.mode === m && r.batch === 1);
    for (const m of labels) {
      const pk = peak(m);
      if (pk === null) continue;
      const off = peak(offOf(m));
      const [a1, o1] = [b1(m), b1(offOf(m))];
      const vsPeak = off === null || m === offOf(m) ? "-" : `${(pk.tokPerS / off.tokPerS).toFixed(2)}x`;
      const vsB1 = a1 && o1 && m !== offOf(m) ? `${(a1.tokPerS / o1.tokPerS).toFixed(3)}x` : "-";
      const hit = pk.hitRate === null ? "-" : `${(100 * pk.hitRate).toFixed(1)}%`;
      console.log(
        `| ${ctx} | ${m} | ${pk.tokPerS.toFixed(0)} (B=${pk.batch}, ${pk.running}) | ${hit} | ${vsPeak} | ${vsB1} |`,
      );
    }
  }
}
