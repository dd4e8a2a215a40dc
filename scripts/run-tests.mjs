#!/usr/bin/env node
// Runs the node:test suites under the given folders (default: test/unit and test/e2e) with tsx,
// so TypeScript tests run without a build. Node 20's --test takes no recursive globs, so the
// files are listed here.
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
/**
 * Seconds without any output after which the run is taken as hung (no test takes a tenth of it).
 * Node 20's module hooks run on a separate loader thread (tsx's --import registers them), and a
 * process can stall there for good at an import (nodejs/node#50948, "ESM hook deadlocks"; seen
 * here about once in five full runs on a loaded 2-core machine): a stall kills the run's process
 * group and runs the suites once more; a second stall fails.
 */
const STALL_S = Number(process.env.HISPARSE_TEST_STALL_S ?? 300);

/** One `node --test` over every file; resolves its exit code and whether it stalled. */
function runOnce() {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", "--test", ...flags, ...files], {
      stdio: ["inherit", "pipe", "pipe"],
      detached: true,
    });
    let last = Date.now();
    let stalled = false;
    const forward = (out) => (chunk) => {
      last = Date.now();
      out.write(chunk);
    };
    child.stdout.on("data", forward(process.stdout));
    child.stderr.on("data", forward(process.stderr));
    const watchdog = setInterval(() => {
      if (Date.now() - last < STALL_S * 1000) return;
      stalled = true;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    }, 5000);
    child.on("close", (code) => {
      clearInterval(watchdog);
      resolve({ code: code ?? 1, stalled });
    });
  });
}

let r = await runOnce();
if (r.stalled) {
  console.error(`run-tests: no output for ${STALL_S} s, a test process hung; running the suites once more`);
  r = await runOnce();
  if (r.stalled) console.error(`run-tests: no output for ${STALL_S} s again: failing`);
}
process.exit(r.stalled ? 1 : r.code);
