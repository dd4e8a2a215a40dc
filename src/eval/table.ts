/**
 * The side-by-side tables of `hisparse eval`: one row per measured quantity, one column per
 * engine variant, printed as an aligned Markdown table (readable in a terminal and pasteable).
 */
import type { NeedleCell } from "./needle.js";
import type { PplResult } from "./ppl.js";

/**
 * Aligned Markdown table; the first `numLabelColumns` columns are left-aligned, the rest right.
 * @param rows cells as text; every row has headers.length cells
 */
export function markdownTable(
  headers: readonly string[],
  rows: readonly string[][],
  numLabelColumns = 1,
): string[] {
  const widths = headers.map((h, c) => Math.max(h.length, 3, ...rows.map((r) => (r[c] ?? "").length)));
  const pad = (s: string, c: number) => (c < numLabelColumns ? s.padEnd(widths[c]!) : s.padStart(widths[c]!));
  const line = (cells: readonly string[]) => `| ${cells.map((s, c) => pad(s, c)).join(" | ")} |`;
  const rule = `|${widths.map((w, c) => (c < numLabelColumns ? `${"-".repeat(w + 1)}-` : `${"-".repeat(w + 1)}:`)).join("|")}|`;
  return [line(headers), rule, ...rows.map(line)];
}

/** A depth in [0, 1] as a percentage label ("0%", "33%", "100%"). */
export function depthLabel(depth: number): string {
  return `${Math.round(depth * 100)}%`;
}

/**
 * Needle accuracy: rows (length, depth) then the per-length and overall "all" rows; cells
 * "accuracy% (hits/trials)".
 */
export function needleTable(variants: readonly { name: string; cells: readonly NeedleCell[] }[]): string[] {
  const first = variants[0]?.cells ?? [];
  const rows = first.map((c, i) => [
    c.length === null ? "all" : String(c.length),
    c.depth === null ? "all" : depthLabel(c.depth),
    ...variants.map((v) => {
      const x = v.cells[i]!;
      return `${(x.accuracy * 100).toFixed(1)}% (${x.hits}/${x.trials})`;
    }),
  ]);
  return markdownTable(["length", "depth", ...variants.map((v) => v.name)], rows, 2);
}

/** Perplexity: rows perplexity, change vs the first variant, scored tokens, windows. */
export function pplTable(variants: readonly { name: string; result: PplResult }[]): string[] {
  const base = variants[0]?.result.perplexity ?? Number.NaN;
  const rel = (p: number) => `${p >= base ? "+" : ""}${(((p - base) / base) * 100).toFixed(2)}%`;
  const rows = [
    ["perplexity", ...variants.map((v) => v.result.perplexity.toFixed(4))],
    [`vs ${variants[0]?.name ?? "-"}`, ...variants.map((v) => rel(v.result.perplexity))],
    ["NLL / token (nats)", ...variants.map((v) => (v.result.nll / v.result.numScoredTokens).toFixed(5))],
    ["scored tokens", ...variants.map((v) => String(v.result.numScoredTokens))],
    ["windows", ...variants.map((v) => String(v.result.numWindows))],
  ];
  return markdownTable(["", ...variants.map((v) => v.name)], rows);
}

/** "1 window", "2 windows": a count and its noun, plural unless the count is 1. */
export function countOf(n: number, singular: string, plural = `${singular}s`): string {
  return `${n} ${n === 1 ? singular : plural}`;
}

/**
 * The line above the perplexity table, e.g. "Perplexity of a.txt: 1 window of 64 tokens, 32
 * prefilled, 32 scored by forced decoding".
 * @param ctx tokens per window; @param prefixTokens tokens of each window prefilled (the rest scored)
 */
export function pplHeading(file: string, numWindows: number, ctx: number, prefixTokens: number): string {
  return (
    `Perplexity of ${file}: ${countOf(numWindows, "window")} of ${countOf(ctx, "token")}, ` +
    `${prefixTokens} prefilled, ${ctx - prefixTokens} scored by forced decoding`
  );
}

/**
 * The line above the needle table, e.g. "Passkey retrieval: 1 document per cell, 1 needle each,
 * greedy, filler: a.txt".
 * @param needles [min, max] needles per document; one number when they are equal
 */
export function needleHeading(
  trials: number,
  needles: readonly [number, number],
  fillerFiles: readonly string[],
): string {
  const [lo, hi] = needles;
  const each = lo === hi ? countOf(lo, "needle") : `${lo}-${hi} needles`;
  return `Passkey retrieval: ${countOf(trials, "document")} per cell, ${each} each, greedy, filler: ${fillerFiles.join(", ")}`;
}
