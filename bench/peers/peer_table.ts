/**
 * The peer table of bench/peers (issue 20 item 4): hisparse's figures from
 * `node dist/bench/cuda_bench.js --json` beside node-llama-cpp's from
 * `bench/peers/nlc_bench.mjs --summary`, both measured on one machine in one sitting
 * (scripts/gpu/peers_bench.sh), with the ratio hisparse / node-llama-cpp (speed over speed:
 * above 1 means hisparse is faster) and issue 20's acceptance target where it sets one.
 * Pure: takes the parsed JSON files, returns rows and markdown. Inputs are checked with zod, so
 * a wrong file gives one clear error naming the field.
 */
import { z } from "zod";

/** One batch-1 measurement of nlc_bench.mjs: P prompt tokens, then N decode steps. */
const nlcSingle = z.object({
  kind: z.literal("single"),
  P: z.number(),
  prefill_tok_s: z.number().optional(),
  decode_tok_s: z.number().optional(),
  skipped: z.string().optional(),
  error: z.string().optional(),
});
/** One batched measurement: B sequences of P prompt tokens each, aggregate decode tokens/s. */
const nlcBatched = z.object({
  kind: z.literal("batched"),
  P: z.number(),
  B: z.number(),
  decode_tok_s: z.number().optional(),
  skipped: z.string().optional(),
  error: z.string().optional(),
});
/** nlc_bench.mjs --summary FILE. */
export const nlcSummarySchema = z.object({
  engine: z.literal("node-llama-cpp"),
  version: z.string().nullable().optional(),
  llamaCpp: z.object({ release: z.string() }).partial().optional(),
  gpuNames: z.array(z.string()).optional(),
  single: z.array(nlcSingle),
  batched: z.array(nlcBatched),
  phases: z.array(z.object({ phase: z.string(), s: z.number() }).passthrough()),
});
export type NlcSummary = z.infer<typeof nlcSummarySchema>;

/** cuda_bench.js --json FILE (bench/cuda_bench.ts). */
export const hisparseBenchSchema = z.object({
  config: z.string(),
  loadSeconds: z.number().optional(),
  decodeRows: z.array(
    z.object({ path: z.string(), batch: z.number(), context: z.number(), tokPerS: z.number().nullable() }),
  ),
  prefillRows: z.array(z.object({ tokens: z.number(), tokPerS: z.number() })),
});
export type HisparseBench = z.infer<typeof hisparseBenchSchema>;

/** A shape of the table; `minRatio` is issue 20's acceptance target, where it sets one. */
export interface PeerShape {
  kind: "decode" | "prefill" | "load";
  batch: number;
  context: number;
  minRatio?: number;
}

/** Issue 20's table: batch-1 decode at 1K/8K/32K, 32 and 64 sequences x 1K/8K, prefill 8K/32K, load. */
export const PEER_SHAPES: readonly PeerShape[] = [
  { kind: "decode", batch: 1, context: 1024, minRatio: 1.45 },
  { kind: "decode", batch: 1, context: 8192, minRatio: 1.45 },
  { kind: "decode", batch: 1, context: 32768, minRatio: 1.45 },
  { kind: "decode", batch: 32, context: 1024 },
  { kind: "decode", batch: 32, context: 8192 },
  { kind: "decode", batch: 64, context: 1024 },
  { kind: "decode", batch: 64, context: 8192, minRatio: 2 },
  { kind: "prefill", batch: 1, context: 8192 },
  { kind: "prefill", batch: 1, context: 32768, minRatio: 2 },
  { kind: "load", batch: 1, context: 0 },
];

export interface PeerRow {
  shape: PeerShape;
  label: string;
  unit: string;
  hisparse: number | null;
  peer: number | null;
  /** hisparse speed / node-llama-cpp speed (for load: peer seconds / hisparse seconds). */
  ratio: number | null;
  /** Whether the ratio meets `shape.minRatio`; null without a target or a ratio. */
  met: boolean | null;
  /** Why a side has no figure (skipped, error, not measured). */
  note: string;
}

const k = (n: number) => (n % 1024 === 0 ? `${n / 1024}K` : String(n));

/** Pairs each shape's figures; a side that skipped or failed gives null and says why. */
export function peerRows(
  hs: HisparseBench,
  nlc: NlcSummary,
  shapes: readonly PeerShape[] = PEER_SHAPES,
): PeerRow[] {
  const hsPath = hs.decodeRows[0]?.path ?? "new";
  return shapes.map((shape) => {
    const notes: string[] = [];
    let label: string;
    let unit = "tok/s";
    let hisparse: number | null = null;
    let peer: number | null = null;
    if (shape.kind === "decode") {
      label =
        shape.batch === 1
          ? `decode, batch 1, ${k(shape.context)} context`
          : `decode, ${shape.batch} sequences x ${k(shape.context)} (all sequences)`;
      const h = hs.decodeRows.find(
        (r) => r.path === hsPath && r.batch === shape.batch && r.context === shape.context,
      );
      hisparse = h?.tokPerS ?? null;
      if (h === undefined) notes.push("hisparse: not measured");
      else if (h.tokPerS === null) notes.push("hisparse: does not fit");
      const n =
        shape.batch === 1
          ? nlc.single.find((r) => r.P === shape.context)
          : nlc.batched.find((r) => r.P === shape.context && r.B === shape.batch);
      peer = n?.decode_tok_s ?? null;
      if (peer === null)
        notes.push(`node-llama-cpp: ${n?.skipped ?? n?.error?.split("\n")[0] ?? "not measured"}`);
    } else if (shape.kind === "prefill") {
      label = `prefill ${k(shape.context)}, one sequence`;
      hisparse = hs.prefillRows.find((r) => r.tokens === shape.context)?.tokPerS ?? null;
      if (hisparse === null) notes.push("hisparse: not measured");
      const n = nlc.single.find((r) => r.P === shape.context);
      peer = n?.prefill_tok_s ?? null;
      if (peer === null)
        notes.push(`node-llama-cpp: ${n?.skipped ?? n?.error?.split("\n")[0] ?? "not measured"}`);
    } else {
      label = "model load to first use (s)";
      unit = "s";
      hisparse = hs.loadSeconds ?? null;
      peer = nlc.phases.find((p) => p.phase === "loadModel")?.s ?? null;
      if (hisparse === null) notes.push("hisparse: no loadSeconds in the JSON");
      if (peer === null) notes.push("node-llama-cpp: no loadModel phase");
    }
    let ratio: number | null = null;
    if (hisparse !== null && peer !== null && hisparse > 0 && peer > 0)
      ratio = shape.kind === "load" ? peer / hisparse : hisparse / peer;
    const met = shape.minRatio === undefined || ratio === null ? null : ratio >= shape.minRatio;
    return { shape, label, unit, hisparse, peer, ratio, met, note: notes.join("; ") };
  });
}

const fmt = (x: number | null, unit: string) =>
  x === null ? "-" : unit === "s" ? x.toFixed(2) : x >= 100 ? x.toFixed(0) : x.toFixed(1);

/** The markdown table, a line of targets met, and where each side's figures come from. */
export function peerMarkdown(rows: PeerRow[], hs: HisparseBench, nlc: NlcSummary, sources: string[]): string {
  const lines = [
    "| shape | hisparse | node-llama-cpp | ratio | target (issue 20) | note |",
    "|---|---|---|---|---|---|",
  ];
  for (const r of rows) {
    const target =
      r.shape.minRatio === undefined
        ? ""
        : `>= ${r.shape.minRatio}x: ${r.met === null ? "-" : r.met ? "met" : "NOT met"}`;
    lines.push(
      `| ${r.label} | ${fmt(r.hisparse, r.unit)} | ${fmt(r.peer, r.unit)} | ${r.ratio === null ? "-" : `${r.ratio.toFixed(2)}x`} | ${target} | ${r.note} |`,
    );
  }
  const targeted = rows.filter((r) => r.shape.minRatio !== undefined);
  const met = targeted.filter((r) => r.met === true).length;
  lines.push(
    "",
    `Targets met: ${met} of ${targeted.length}.`,
    "",
    `hisparse: ${hs.config}, dummy bf16 weights, decode path "${hs.decodeRows[0]?.path ?? "new"}" ` +
      "(bench/cuda_bench.ts: mean of 20 replays of the captured decode-step graph at that context, " +
      "KV cache holding zeros; prefill in chunks of 8192; load = dummy weights).",
    `node-llama-cpp ${nlc.version ?? "?"} (llama.cpp ${nlc.llamaCpp?.release ?? "?"}, ` +
      `${nlc.gpuNames?.join(", ") || "no GPU name"}): GGUF of the same shape with random bf16 weights ` +
      "(bench/peers/make_gguf.py), flash attention; decode = N greedy steps after a real prefill of P " +
      "random tokens; prefill = time to the first token; load = GGUF from the page cache.",
    `Sources: ${sources.join(", ")}.`,
  );
  return `${lines.join("\n")}\n`;
}
