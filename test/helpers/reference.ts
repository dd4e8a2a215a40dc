/**
 * Where the reference models and HF fixtures are, for tests and GPU checks.
 * - Fixtures (HF transformers' fp32 outputs for five prompts): test/fixtures/hf-<model>.json,
 *   copied from ../shared/fixtures so a clean clone has them.
 * - ref-small is bundled in the repo (models/ref-small). ref-base (40 MB) is not: it is looked up
 *   in $HISPARSE_MODELS, then ../shared/models beside the checkout (or two levels up, for git
 *   worktrees); tests that need it skip with a message when it is absent.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

/** The repository root (works from test/ under tsx and from dist/test/ after tsc). */
export const repoRoot = ((): string => {
  let dir = fileURLToPath(new URL(".", import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "models"))) return dir;
    dir = join(dir, "..");
  }
  throw new Error("cannot find the repository root from test/helpers/reference.ts");
})();

/** One fixture case: the prompt, its ids, HF's 48 greedy ids and last-position logits. */
export interface FixtureCase {
  prompt: string;
  input_ids: number[];
  greedy_ids: number[];
  greedy_text: string;
  last_logits: number[];
}

export type RefModel = "ref-small" | "ref-base";

/** Directory of a reference model, or null when it is not available on this machine. */
export function refModelDir(name: RefModel): string | null {
  const candidates = [
    join(repoRoot, "models", name),
    process.env.HISPARSE_MODELS ? join(process.env.HISPARSE_MODELS, name) : "",
    join(repoRoot, "..", "shared", "models", name),
    join(repoRoot, "..", "..", "shared", "models", name),
  ];
  return candidates.find((d) => d !== "" && existsSync(join(d, "config.json"))) ?? null;
}

/**
 * `describe(title, fn)` when the reference model was found (`dir` from {@link refModelDir});
 * otherwise one skipped test in its place, so the run's summary counts it under "# skipped"
 * (node:test counts nothing for a skipped describe, which printed `# SKIP` yet reported
 * "# skipped 0").
 */
export function describeIfFound(title: string, name: RefModel, dir: string | null, fn: () => void): void {
  if (dir !== null) describe(title, fn);
  else it(title, { skip: `${name} not found (see test/helpers/reference.ts)` }, () => {});
}

/** The HF fixture cases of a reference model. */
export function loadFixture(name: RefModel): FixtureCase[] {
  const path = join(repoRoot, "test", "fixtures", `hf-${name}.json`);
  return (JSON.parse(readFileSync(path, "utf8")) as { cases: FixtureCase[] }).cases;
}
