#!/usr/bin/env node
// Runs the node:test suites under the given folders (default: test/unit and test/e2e) with tsx,
// so TypeScript tests run without a build. Node 20's --test takes no recursive globs, so the
// files are listed here.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

const roots = process.argv.slice(2).filter((a) => !a.startsWith("-"));
const flags = process.argv.slice(2).filter((a) => a.startsWith("-"));
const dirs = roots.length > 0 ? roots : ["test/unit", "test/e2e"];

/** @param {string} p @returns {string[]} */
function collect(p) {
  if (!existsSync(p)) return [];
  if (statSync(p).isFile()) return [p];
  return readdirSync(p)
    .sort()
    .flatMap((name) => {
      const full = join(p, name);
      if (statSync(full).isDirectory()) return collect(full);
      return name.endsWith(".test.ts") ? [full] : [];
    });
}

const files = dirs.flatMap(collect);
if (files.length === 0) {
  console.error(`no test files under ${dirs.join(", ")}`);
  process.exit(1);
}
const r = spawnSync(process.execPath, ["--import", "tsx", "--test", ...flags, ...files], {
  stdio: "inherit",
});
process.exit(r.status ?? 1);
