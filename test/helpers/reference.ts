/**
 * Where the reference models and HF fixtures are, for tests and GPU checks.
 * - Fixtures (HF transformers' fp32 outputs for five prompts; three for the tiny random
 *   checkpoints): test/fixtures/hf-<model>.json, copied from ../shared/fixtures so a clean clone
 *   has them.
 * - ref-small is bundled in the repo (models/ref-small). ref-base (40 MB) and the tiny random
 *   MoE checkpoints (10 MB each, mostly their 16384-token embeddings) are not: they are looked up
 *   in test/fixtures/models, $HISPARSE_MODELS, then ../shared/models beside the checkout (or two
 *   levels up, for git worktrees); tests that need them skip with a message when absent.
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

/**
 * One fixture case: the prompt (ref models; the tiny checkpoints' prompts are random ids), its
 * ids, HF's greedy ids (48 for the ref models, 24 for the tiny ones) and last-position logits.
 */
export interface FixtureCase {
  prompt?: string;
  input_ids: number[];
  greedy_ids: number[];
  greedy_text?: string;
  last_logits: number[];
}

/** The trained reference models. */
export type TrainedModel = "ref-small" | "ref-base";
/**
 * The tiny random checkpoints of transformers 5.17: the two of ../shared/models/README.md, and
 * those scripts/gpu/moe_fixtures.sh makes (a group-limited router with a nonzero correction
 * bias, a packed-expert checkpoint, 512-token-vocabulary copies of the two shapes small enough
 * for test/fixtures/models/). Tests of a model skip unless both it and its fixture are found.
 */
export const TINY_MODELS = [
  "tiny-qwen3-moe",
  "tiny-glm4-moe",
  "tiny-glm4-moe-grouped",
  "tiny-qwen3-moe-packed",
  "tiny-qwen3-moe-v512",
  "tiny-glm4-moe-v512",
] as const;
/**
 * The tiny MLA / DSA checkpoints (../shared/models/README.md), GLM-5 with "shared" indexer
 * layers (scripts/gpu/mla_configs.py --shared-fixture), and the vocabulary-pruned copies of the
 * three shared ones in test/fixtures/models (scripts/fixtures/prune_vocab.py). Their tests are
 * test/unit/models/mla_hf_reference.test.ts and test/e2e/engine/mla_generate.test.ts.
 */
export const MLA_TINY_MODELS = [
  "tiny-deepseek-v3",
  "tiny-deepseek-v32",
  "tiny-glm5-dsa",
  "tiny-glm5-dsa-shared",
  "tiny-deepseek-v3-pv",
  "tiny-deepseek-v32-pv",
  "tiny-glm5-dsa-pv",
  "tiny-glm5-dsa-shared-pv",
] as const;
export type TinyModel = (typeof TINY_MODELS)[number] | (typeof MLA_TINY_MODELS)[number];
export type RefModel = TrainedModel | TinyModel;

/** Directory of a reference model, or null when it is not available on this machine. */
export function refModelDir(name: RefModel): string | null {
  const candidates = [
    join(repoRoot, "models", name),
    join(repoRoot, "test", "fixtures", "models", name),
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

/** Whether test/fixtures/hf-<name>.json exists. */
export function hasFixture(name: RefModel): boolean {
  return existsSync(join(repoRoot, "test", "fixtures", `hf-${name}.json`));
}

/**
 * Directory of a model whose fixture exists too, or null (a tiny checkpoint may be found in
 * ../shared without its fixture having been copied, or the other way round).
 */
export function referencedModelDir(name: RefModel): string | null {
  return hasFixture(name) ? refModelDir(name) : null;
}

/** The HF fixture cases of a reference model. */
export function loadFixture(name: RefModel): FixtureCase[] {
  const path = join(repoRoot, "test", "fixtures", `hf-${name}.json`);
  return (JSON.parse(readFileSync(path, "utf8")) as { cases: FixtureCase[] }).cases;
}
