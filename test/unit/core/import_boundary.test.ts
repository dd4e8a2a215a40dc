/**
 * Import rules of src/ (DESIGN.md §1, CONVENTIONS.md 2): src/core may import only src/core and
 * src/config (no node builtins, packages, backends/, worker/, server/ or engine/); src/attention
 * imports nothing from src/worker (the attention backends and their CUDA twins are called by the
 * worker, never the other way round); and no file of src/ takes part in an import cycle (type
 * imports included: a cycle of types is a knot in the design all the same).
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

/** Static import graph of src/: file -> the src files it imports (relative specifiers, `.js` -> `.ts`). */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of tsFiles(join(repoRoot, "src"))) {
    const targets = importSpecifiers(readFileSync(file, "utf8"))
      .filter((spec) => spec.startsWith("."))
      .map((spec) => resolve(dirname(file), spec).replace(/\.js$/, ".ts"));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
function importCycles(graph: Map<string, string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue; // not a source file of src/ (checked by tsc)
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      scc.push(relative(repoRoot, w));
    } while (w !== v);
    if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) cycles.push(scc.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return cycles;
}

test("the cycle finder finds a loop of two files and a file importing itself, and nothing in a chain", () => {
  const g = new Map([
    ["/a", ["/b"]],
    ["/b", ["/a", "/c"]],
    ["/c", ["/d"]],
    ["/d", []],
    ["/e", ["/e"]],
  ]);
  const cycles = importCycles(g).map((c) => c.map((f) => f.split("/").at(-1)));
  assert.deepEqual(cycles, [["a", "b"], ["e"]]);
});

test("no import cycle anywhere in src/", () => {
  const graph = importGraph();
  assert.ok(graph.size >= 100, `expected the sources, found ${graph.size} files`);
  assert.deepEqual(importCycles(graph), []);
});

test("src/attention imports nothing from src/worker", () => {
  const worker = join(repoRoot, "src/worker");
  const violations: string[] = [];
  for (const [file, targets] of importGraph())
    if (file.startsWith(join(repoRoot, "src/attention/")))
      for (const t of targets)
        if (t.startsWith(`${worker}/`))
          violations.push(`${relative(repoRoot, file)} -> ${relative(repoRoot, t)}`);
  assert.deepEqual(violations, []);
});
