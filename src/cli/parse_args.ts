import { InvalidArgumentError } from "commander";
import { BLOCK_SIZES } from "../config/configs.js";

/** Flag value parsers; commander reports their errors as one line. */

/** Parses an integer flag value; commander reports the error as one line. */
export function parseIntArg(v: string): number {
  if (!/^-?\d+$/.test(v.trim())) throw new InvalidArgumentError("must be an integer.");
  return Number.parseInt(v, 10);
}

/** Parses a flag value that must be an integer >= 1 (and a safe integer). */
export function parsePositiveIntArg(v: string): number {
  const n = parseIntArg(v);
  if (n < 1 || !Number.isSafeInteger(n)) throw new InvalidArgumentError("must be an integer >= 1.");
  return n;
}

/** Parses `--block-size`: the engine's rule (config/configs.ts BLOCK_SIZES). */
export function parseBlockSizeArg(v: string): number {
  const n = parseIntArg(v);
  if (!BLOCK_SIZES.includes(n)) throw new InvalidArgumentError("must be a power of two in [1, 256].");
  return n;
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

/**
 * Parses token ids: a comma-separated list (`1,2,3`) or a JSON array (`[1, 2, 3]`) of integers
 * >= 0, at least one (vLLM and OpenAI take token-id prompts). Whether each id is in the model's
 * vocabulary is the engine's check (it knows the vocabulary size).
 */
export function parseTokenIdsArg(v: string): number[] {
  const text = v.trim();
  let items: unknown[];
  if (text.startsWith("[")) {
    try {
      const j: unknown = JSON.parse(text);
      items = Array.isArray(j) ? j : [null];
    } catch {
      items = [null];
    }
  } else items = text === "" ? [] : text.split(",").map((s) => (/^\s*\d+\s*$/.test(s) ? Number(s) : null));
  if (items.length === 0 || !items.every((x) => typeof x === "number" && Number.isSafeInteger(x) && x >= 0))
    throw new InvalidArgumentError(
      "must be token ids: a comma-separated list (1,2,3) or a JSON array ([1,2,3]) of integers >= 0.",
    );
  return items as number[];
}
