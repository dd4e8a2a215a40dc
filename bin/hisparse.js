#!/usr/bin/env node
// Entry point of the `hisparse` command. Runs the compiled CLI from dist/ when it is up to date;
// in a source checkout without a fresh build it runs src/ through tsx, so `npm ci && npx hisparse`
// works with no build step.
import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const distMain = join(root, "dist", "src", "cli", "main.js");
const srcMain = join(root, "src", "cli", "main.ts");

function newestMtime(dir) {
  let newest = 0;
  for (const name of readdirSync(dir)) {
    const full = join(dir, name);
    const st = statSync(full);
    newest = Math.max(newest, st.isDirectory() ? newestMtime(full) : st.mtimeMs);
  }
  return newest;
}

async function main() {
  const haveDist = existsSync(distMain);
  const haveSrc = existsSync(srcMain);
  const distFresh = haveDist && (!haveSrc || statSync(distMain).mtimeMs >= newestMtime(join(root, "src")));
  if (!distFresh && haveSrc) {
    try {
      const { register } = await import("tsx/esm/api");
      register();
      await import(pathToFileURL(srcMain).href);
      return;
    } catch (err) {
      if (err?.code !== "ERR_MODULE_NOT_FOUND" || !String(err?.message).includes("tsx")) throw err;
    }
  }
  if (!haveDist) {
    console.error(
      "hisparse: no build found; run `npm run build` (or install devDependencies to run from source)",
    );
    process.exit(1);
  }
  await import(pathToFileURL(distMain).href);
}

await main();
