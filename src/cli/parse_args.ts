import { InvalidArgumentError } from "commander";

/** Flag value parsers; commander reports their errors as one line. */

/** Parses an integer flag value; commander reports the error as one line. */
export function parseIntArg(v: string): number {
  if (!/^-?\d+$/.test(v.trim())) throw new InvalidArgumentError("must be an integer.");
  return Number.parseInt(v, 10);
}

/** Parses a number flag value. */
export function parseFloatArg(v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new InvalidArgumentError("must be a number.");
  return n;
}

/** Parses a size in GiB (fractional allowed) into bytes. */
export function parseGibArg(v: string): number {
  const n = parseFloatArg(v);
  if (n <= 0) throw new InvalidArgumentError("must be > 0.");
  return Math.round(n * 2 ** 30);
}
