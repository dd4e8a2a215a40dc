/**
 * The SVG chart of a concurrency sweep (`bench serve --sweep-concurrency`): three panels sharing
 * the concurrency axis (evenly spaced, one tick per run): output throughput, TTFT and TPOT
 * (median and P99 where measured). Plain SVG 1.1 text, no dependencies.
 */
import type { BenchmarkMetrics, MetricSummary } from "./metrics.js";

/** One run of the sweep. */
export interface SweepPoint {
  concurrency: number;
  /** Output tokens per second. */
  outputThroughput: number;
  /** Requests per second. */
  requestThroughput: number;
  medianTtftMs: number;
  p99TtftMs: number | null;
  medianTpotMs: number;
  p99TpotMs: number | null;
}

/** A line of a panel. */
export interface Series {
  name: string;
  color: string;
  values: readonly number[];
}

/** Geometry of one panel in pixels. */
interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

const PANEL_W = 360;
const PANEL_H = 260;
const MARGIN = { left: 64, right: 16, top: 44, bottom: 48 };
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/** Escapes text for SVG content and attributes. */
function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Rounds to 2 decimals for compact coordinates. */
function r2(x: number): number {
  return Math.round(x * 100) / 100;
}

/**
 * Axis ticks from 0 to a "nice" maximum >= max (steps of 1, 2 or 5 × 10^k, about 5 ticks).
 * @returns tick values, the last one being the axis top
 */
export function niceTicks(max: number): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const ticks: number[] = [];
  for (let v = 0; v < max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  if (ticks[ticks.length - 1]! < max) ticks.push(Number((ticks.length * step).toPrecision(12)));
  return ticks;
}

/** X position of the i-th of n points inside a panel's plot area. */
export function xAt(i: number, n: number, plot: Box): number {
  return n === 1 ? plot.x + plot.w / 2 : plot.x + (i / (n - 1)) * plot.w;
}

/** One panel: frame, grid, ticks, polylines with markers, legend, title. */
export function panel(
  box: Box,
  title: string,
  yLabel: string,
  xLabels: readonly string[],
  series: readonly Series[],
): string {
  const plot = {
    x: box.x + MARGIN.left,
    y: box.y + MARGIN.top,
    w: box.w - MARGIN.left - MARGIN.right,
    h: box.h - MARGIN.top - MARGIN.bottom,
  };
  const top = Math.max(0, ...series.flatMap((s) => s.values.filter(Number.isFinite)));
  const ticks = niceTicks(top);
  const yMax = ticks[ticks.length - 1]!;
  const yAt = (v: number) => plot.y + plot.h - (v / yMax) * plot.h;
  const parts: string[] = [
    `<text x="${r2(box.x + box.w / 2)}" y="${box.y + 18}" text-anchor="middle" font-weight="bold">${esc(title)}</text>`,
  ];
  for (const t of ticks) {
    const y = r2(yAt(t));
    parts.push(
      `<line x1="${plot.x}" y1="${y}" x2="${plot.x + plot.w}" y2="${y}" stroke="#ddd"/>`,
      `<text x="${plot.x - 6}" y="${r2(y + 4)}" text-anchor="end">${t}</text>`,
    );
  }
  xLabels.forEach((label, i) => {
    const x = r2(xAt(i, xLabels.length, plot));
    parts.push(`<text x="${x}" y="${plot.y + plot.h + 16}" text-anchor="middle">${esc(label)}</text>`);
  });
  parts.push(
    `<rect x="${plot.x}" y="${plot.y}" width="${plot.w}" height="${plot.h}" fill="none" stroke="#333"/>`,
    `<text x="${r2(plot.x + plot.w / 2)}" y="${plot.y + plot.h + 36}" text-anchor="middle">concurrency</text>`,
    `<text transform="translate(${box.x + 14},${r2(plot.y + plot.h / 2)}) rotate(-90)" text-anchor="middle">${esc(yLabel)}</text>`,
  );
  series.forEach((s, k) => {
    const pts = s.values.map((v, i) => `${r2(xAt(i, s.values.length, plot))},${r2(yAt(v))}`);
    parts.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts.join(" ")}"/>`);
    for (const p of pts) {
      const [x, y] = p.split(",");
      parts.push(`<circle cx="${x}" cy="${y}" r="3" fill="${s.color}"/>`);
    }
    // Legend in a row between the title and the plot area.
    const lx = plot.x + k * 110;
    const ly = plot.y - 8;
    parts.push(
      `<line x1="${lx}" y1="${ly - 4}" x2="${lx + 16}" y2="${ly - 4}" stroke="${s.color}" stroke-width="2"/>`,
      `<text x="${lx + 20}" y="${ly}">${esc(s.name)}</text>`,
    );
  });
  return parts.join("\n");
}

/**
 * The whole chart for a sweep, runs in the given order.
 * @param title shown above the panels (model, dataset)
 */
export function sweepSvg(points: readonly SweepPoint[], title: string): string {
  const labels = points.map((p) => String(p.concurrency));
  const withP99 = (name: string, med: number[], p99: (number | null)[], c: number): Series[] => {
    const s: Series[] = [{ name: `median ${name}`, color: COLORS[c]!, values: med }];
    if (p99.every((v) => v !== null))
      s.push({ name: `P99 ${name}`, color: COLORS[c + 1]!, values: p99 as number[] });
    return s;
  };
  const width = PANEL_W * 3;
  const height = PANEL_H + 30;
  const body = [
    panel({ x: 0, y: 30, w: PANEL_W, h: PANEL_H }, "Output throughput", "tokens/s", labels, [
      { name: "output tok/s", color: COLORS[0]!, values: points.map((p) => p.outputThroughput) },
    ]),
    panel(
      { x: PANEL_W, y: 30, w: PANEL_W, h: PANEL_H },
      "Time to first token",
      "ms",
      labels,
      withP99(
        "TTFT",
        points.map((p) => p.medianTtftMs),
        points.map((p) => p.p99TtftMs),
        0,
      ),
    ),
    panel(
      { x: 2 * PANEL_W, y: 30, w: PANEL_W, h: PANEL_H },
      "Time per output token",
      "ms",
      labels,
      withP99(
        "TPOT",
        points.map((p) => p.medianTpotMs),
        points.map((p) => p.p99TpotMs),
        2,
      ),
    ),
  ];
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">${esc(title)}</text>`,
    ...body,
    "</svg>",
    "",
  ].join("\n");
}

/** The plotted figures of one run (P99 only when 99 is among the selected percentiles). */
export function sweepPointFrom(concurrency: number, m: BenchmarkMetrics): SweepPoint {
  const p99 = (s: MetricSummary) => s.percentiles.find(([p]) => p === 99)?.[1] ?? null;
  return {
    concurrency,
    outputThroughput: m.outputThroughput,
    requestThroughput: m.requestThroughput,
    medianTtftMs: m.latency.ttft.median,
    p99TtftMs: p99(m.latency.ttft),
    medianTpotMs: m.latency.tpot.median,
    p99TpotMs: p99(m.latency.tpot),
  };
}
