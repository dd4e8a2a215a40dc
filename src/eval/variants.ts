/**
 * Engine variants compared side by side by `hisparse eval` (`--compare SPEC...`). A spec is
 * `NAME: FLAGS`, bare `FLAGS` (named by its text), or a bare `NAME` (no flags: the command
 * line's engine flags as they are). FLAGS are engine flags in shell syntax, applied on top of
 * the command line's, e.g.
 *   --compare dense "topk256: --enable-hybrid-sparse on --hybrid-sparse-topk 256"
 */

/** A parsed spec. */
export interface VariantSpec {
  name: string;
  /** Engine flags, split as a POSIX shell would. */
  argv: string[];
}

/** Error for a spec that cannot be parsed; the message is one sentence for the user. */
export class VariantError extends Error {
  override name = "VariantError";
}

/**
 * Splits a command line like a POSIX shell: whitespace separates words; 'single quotes' keep
 * everything; "double quotes" keep everything but \" and \\; a backslash outside quotes escapes
 * the next character.
 * @throws VariantError for an unterminated quote or a trailing backslash.
 */
export function shellSplit(s: string): string[] {
  const words: string[] = [];
  let cur = "";
  let inWord = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (/\s/.test(c)) {
      if (inWord) words.push(cur);
      cur = "";
      inWord = false;
      continue;
    }
    inWord = true;
    if (c === "'") {
      const end = s.indexOf("'", i + 1);
      if (end < 0) throw new VariantError(`unterminated ' quote in "${s}"`);
      cur += s.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      for (; j < s.length && s[j] !== '"'; j++) {
        if (s[j] === "\\" && (s[j + 1] === '"' || s[j + 1] === "\\")) j++;
        cur += s[j];
      }
      if (j >= s.length) throw new VariantError(`unterminated " quote in "${s}"`);
      i = j;
    } else if (c === "\\") {
      if (i + 1 >= s.length) throw new VariantError(`trailing backslash in "${s}"`);
      cur += s[++i];
    } else cur += c;
  }
  if (inWord) words.push(cur);
  return words;
}

/**
 * Parses one `--compare` spec.
 * @throws VariantError for an empty spec or bad quoting.
 */
export function parseVariantSpec(spec: string): VariantSpec {
  const s = spec.trim();
  if (s.length === 0) throw new VariantError("a --compare variant is empty");
  const named = /^([A-Za-z0-9_.+=-]+):(?:\s+|$)(.*)$/s.exec(s);
  if (named !== null && !named[1]!.startsWith("-")) return { name: named[1]!, argv: shellSplit(named[2]!) };
  if (!s.startsWith("-")) {
    if (/\s/.test(s))
      throw new VariantError(
        `--compare "${s}": flags must start with --, or name the variant as NAME: FLAGS`,
      );
    return { name: s, argv: [] };
  }
  return { name: s, argv: shellSplit(s) };
}

/**
 * Parses every spec (none = one variant, "default", with the command line's flags).
 * @throws VariantError for a bad spec or two variants with the same name.
 */
export function parseVariantSpecs(specs: readonly string[] | undefined): VariantSpec[] {
  const list =
    specs === undefined || specs.length === 0 ? [{ name: "default", argv: [] }] : specs.map(parseVariantSpec);
  const seen = new Set<string>();
  for (const v of list) {
    if (seen.has(v.name)) throw new VariantError(`two --compare variants are named "${v.name}"`);
    seen.add(v.name);
  }
  return list;
}
