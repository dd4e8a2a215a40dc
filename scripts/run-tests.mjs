#!/usr/bin/env node
// Runs the node:test suites under the given folders (default: test/unit and test/e2e) with tsx,
// so TypeScript tests run without a build. Node 20's --test takes no recursive globs, so the
// files are listed here. Each file runs in its own `node --test` process group with a watchdog:
// Node 20's module hooks run on a separate loader thread (tsx's --import registers them), and a
// test process can stall there for good at an import (nodejs/node#50948, "ESM hook deadlocks";
// seen in about half of the full runs of 2026-12-03 on a loaded 2-core machine). A file that
// prints nothing for HISPARSE_TEST_STALL_S seconds (default 120; no test takes over 11 s) is
// killed and run again, up to twice; a failing file is not rerun. The counts of every file's
// `# tests / pass / fail / skipped ...` lines are summed at the end.
import { spawn } from "node:child_process";
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
const STALL_S = Number(process.env.HISPARSE_TEST_STALL_S ?? 120);
const ATTEMPTS = 3;
const COUNTED = ["tests", "suites", "pass", "fail", "cancelled", "skipped", "todo"];

/**
 * One `node --test` of one file, its output forwarded; resolves its exit code, whether it
 * stalled, and its summary counts.
 * @param {string} file
 * @returns {Promise<{ code: number, stalled: boolean, counts: Map<string, number> }>}
 */
function runFile(file) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "--test", ...flags, file], {
      stdio: ["inherit", "pipe", "pipe"],
      detached: true,
    });
    let last = Date.now();
    let stalled = false;
    let text = "";
    child.stdout.on("data", (chunk) => {
      last = Date.now();
      text += chunk;
      process.stdout.write(chunk);
    });
    child.stderr.on("data", (chunk) => {
      last = Date.now();
      process.stderr.write(chunk);
    });
    const watchdog = setInterval(() => {
      if (Date.now() - last < STALL_S * 1000) return;
      stalled = true;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    }, 2000);
    child.on("close", (code) => {
      clearInterval(watchdog);
      const counts = new Map();
      for (const m of text.matchAll(/^# (\w+) (\d+)$/gm))
        if (COUNTED.includes(m[1])) counts.set(m[1], Number(m[2]));
      resolve({ code: code ?? 1, stalled, counts });
    });
  });
}

const totals = new Map(COUNTED.map((k) => [k, 0]));
const failed = [];
for (const file of files) {
  let r = await runFile(file);
  for (let attempt = 1; r.stalled && attempt < ATTEMPTS; attempt++) {
    console.error(`run-tests: ${file} printed nothing for ${STALL_S} s (a hung process): running it again`);
    r = await runFile(file);
  }
  if (r.stalled) console.error(`run-tests: ${file} stalled ${ATTEMPTS} times`);
  for (const [k, v] of r.counts) totals.set(k, totals.get(k) + v);
  if (r.stalled || r.code !== 0) failed.push(file);
}
console.log(`# all ${files.length} files`);
for (const [k, v] of totals) console.log(`# ${k} ${v}`);
if (failed.length > 0) console.log(`# failing files: ${failed.join(", ")}`);
process.exit(failed.length > 0 ? 1 : 0);
