/**
 * The rounds of bench/hisparse_throughput.ts: per listed mode, one round per benchmark-only
 * setting asked for (the Quest selection overlap p, the DSA row prefetch on/off), and the column
 * label of each. Pure parsing and naming; errors are one-line `Error`s naming the flag.
 */

/** One round of a mode: its selection overlap and (DSA) row prefetch setting; null = the engine's own. */
export interface Round {
  p: number | null;
  prefetch: boolean | null;
}

/**
 * `--overlap P` or `--overlap P1,P2,...`: the selection-overlap knob per round of the HiSparse
 * modes, or [null] (the engine's own selection, no knob). @throws Error for a value outside [0, 1].
 */
export function parseOverlaps(arg: string): (number | null)[] {
  const overlaps: (number | null)[] = arg === "" ? [null] : arg.split(",").map(Number);
  for (const p of overlaps)
    if (p !== null && !(p >= 0 && p <= 1))
      throw new Error(`--overlap must be probabilities in [0, 1], got ${arg}`);
  return overlaps;
}

/**
 * `--row-prefetch on,off,...`: rounds of the DSA HiSparse modes with the exact row prefetch on or
 * off (A/B), or [null] (the default, on, no label). @throws Error for another word.
 */
export function parsePrefetches(arg: string): (boolean | null)[] {
  if (arg === "") return [null];
  return arg.split(",").map((v) => {
    if (v !== "on" && v !== "off") throw new Error(`--row-prefetch takes on and/or off, got ${arg}`);
    return v === "on";
  });
}

/** Column label of each listed mode: the mode, or `mode#k` for its k-th round when listed again. */
export function roundLabelsOf(modes: readonly string[]): string[] {
  return modes.map((m, i) => {
    const k = modes.slice(0, i + 1).filter((x) => x === m).length;
    return modes.filter((x) => x === m).length > 1 ? `${m}#${k}` : m;
  });
}

/** The rounds a mode runs: off one (no selection), the HiSparse modes each p x each prefetch setting. */
export function roundsOfMode(
  isOff: boolean,
  overlaps: readonly (number | null)[],
  prefetches: readonly (boolean | null)[],
): Round[] {
  if (isOff) return [{ p: null, prefetch: null }];
  return overlaps.flatMap((p) => prefetches.map((prefetch) => ({ p, prefetch })));
}

/** A round's column label: the mode's label, ` p=P` when several overlaps run, ` [prefetch on|off]` when asked. */
export function roundLabel(modeLabel: string, r: Round, severalOverlaps: boolean): string {
  const p = severalOverlaps && r.p !== null ? `${modeLabel} p=${r.p}` : modeLabel;
  return p + (r.prefetch === null ? "" : ` [prefetch ${r.prefetch ? "on" : "off"}]`);
}

/**
 * The labels with every repeated one numbered in order (`auto [prefetch on]#1`, `#2`, ...), so
 * that the report, which looks rows up by label, keeps each round apart. Same nesting as given.
 */
export function uniqueLabels(table: readonly (readonly string[])[]): string[][] {
  const all = table.flat();
  const seen = new Map<string, number>();
  return table.map((row) =>
    row.map((l) => {
      if (all.filter((x) => x === l).length === 1) return l;
      const k = (seen.get(l) ?? 0) + 1;
      seen.set(l, k);
      return `${l}#${k}`;
    }),
  );
}

/**
 * Refuses `--row-prefetch` rounds for a model without a DSA indexer (`indexerTypes` null), and
 * notes when every layer has its own indexer (nothing to prefetch: the rounds measure the same).
 * @throws Error naming the flag.
 */
export function checkPrefetchRounds(
  prefetches: readonly (boolean | null)[],
  indexerTypes: readonly string[] | null,
): void {
  if (prefetches[0] === null) return;
  if (indexerTypes === null)
    throw new Error("--row-prefetch is for DSA models (--config configs/glm-5 --num-layers N)");
  if (!indexerTypes.includes("shared"))
    console.log(
      "note: every layer has its own indexer (no --indexer-share): the row prefetch has nothing to copy ahead",
    );
}
