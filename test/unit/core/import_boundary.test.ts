/**
 * Layering rule (DESIGN.md §1, CONVENTIONS.md 2): src/core may import only src/core and
 * src/config; no node builtins, packages, backends/, worker/, server/ or engine/.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const coreDir = join(repoRoot, "src/core");
const allowed = [join(repoRoot, "src/core"), join(repoRoot, "src/config")];

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return tsFiles(p);
    return p.endsWith(".ts") ? [p] : [];
  });
}

/** Module specifiers of static imports/exports, dynamic import() and require() calls. */
function importSpecifiers(source: string): string[] {
  const re = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|\brequire\s*\(\s*)["']([^"']+)["']/g;
  return [...source.matchAll(re)].map((m) => m[1]!);
}

test("import scanner finds every form of import", () => {
  const src = `import a from "./a.js";\nimport type { B } from '../b.js';\nexport * from "./c.js";\nimport "./d.js";\nconst e = await import("./e.js");\nconst f = require("f");`;
  assert.deepEqual(importSpecifiers(src), ["./a.js", "../b.js", "./c.js", "./d.js", "./e.js", "f"]);
});

test("src/core imports only src/core and src/config", () => {
  const files = tsFiles(coreDir);
  assert.ok(files.length >= 10, `expected the core sources, found ${files.length} files`);
  const violations: string[] = [];
  for (const file of files) {
    for (const spec of importSpecifiers(readFileSync(file, "utf8"))) {
      const rel = relative(repoRoot, file);
      if (!spec.startsWith(".")) {
        violations.push(`${rel} imports "${spec}" (not a relative path inside src/core or src/config)`);
        continue;
      }
      const target = resolve(dirname(file), spec);
      if (!allowed.some((dir) => target === dir || target.startsWith(`${dir}/`)))
        violations.push(`${rel} imports "${spec}" -> ${relative(repoRoot, target)}`);
    }
  }
  assert.deepEqual(violations, []);
});
