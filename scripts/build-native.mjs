#!/usr/bin/env node
// `npm run build:native`: builds the CUDA addon build/Release/hisparse_native.node with cmake-js
// (native/CMakeLists.txt). Without nvcc it prints one line and exits 0, so installs on machines
// without CUDA keep working (the CPU backend needs no addon).
//
// cmake-js builds against node-api-headers + node-addon-api (native/package.json declares
// binary.napi_versions), so nothing is downloaded from nodejs.org.
//
// Options (after `--`): --debug (Debug build, stream sync after every launch: HISPARSE_DEBUG_SYNC),
// --ptxas-verbose (register / shared memory / spill report of every kernel), --clean (fresh
// configure).
//
// Layout: CMake's work files go to build/native/, the addon to build/Release/. Only build/Release
// needs to travel to the GPU machine.
import { spawnSync } from "node:child_process";
import { existsSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = new Set(process.argv.slice(2));

/** Absolute path of nvcc: PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin; null if absent. */
function findNvcc() {
  const dirs = [
    ...(process.env.PATH ?? "").split(delimiter).filter((d) => d !== ""),
    ...["CUDA_HOME", "CUDA_PATH"].flatMap((v) => (process.env[v] ? [join(process.env[v], "bin")] : [])),
    "/usr/local/cuda/bin",
  ];
  for (const d of dirs) {
    const p = join(d, "nvcc");
    if (existsSync(p) && statSync(p).isFile()) return p;
  }
  return null;
}

const nvcc = findNvcc();
if (nvcc === null) {
  console.log("hisparse: nvcc not found; skipping the native CUDA addon (the CPU backend still works)");
  process.exit(0);
}

let cmakeJs;
try {
  cmakeJs = createRequire(import.meta.url).resolve("cmake-js/bin/cmake-js");
} catch {
  console.error(
    "hisparse: cmake-js is not installed; install the devDependencies (npm install) to build the addon",
  );
  process.exit(1);
}

const workDir = join(root, "build", "native");
const outDir = join(root, "build", "Release");
if (args.has("--clean")) rmSync(workDir, { recursive: true, force: true });
const debug = args.has("--debug");
const cmakeArgs = [
  cmakeJs,
  "build",
  "--directory",
  join(root, "native"),
  "--out",
  workDir,
  "--parallel",
  String(Math.max(1, availableParallelism())),
  `--CDCMAKE_CUDA_COMPILER=${nvcc}`,
  `--CDHISPARSE_OUTPUT_DIR=${outDir}`,
  `--CDHISPARSE_DEBUG_SYNC=${debug ? "ON" : "OFF"}`,
  `--CDHISPARSE_PTXAS_VERBOSE=${args.has("--ptxas-verbose") ? "ON" : "OFF"}`,
  ...(debug ? ["--config", "Debug"] : ["--config", "Release"]),
];
console.log(`hisparse: building the native addon with ${nvcc}`);
const env = { ...process.env, CUDACXX: nvcc };
const r = spawnSync(process.execPath, cmakeArgs, { stdio: "inherit", cwd: root, env });
if (r.status !== 0) {
  console.error("hisparse: the native addon build failed (see the output above)");
  process.exit(r.status ?? 1);
}
const addon = join(outDir, "hisparse_native.node");
if (!existsSync(addon)) {
  console.error(`hisparse: the build finished but ${addon} is missing`);
  process.exit(1);
}
console.log(`hisparse: built ${addon} (${(statSync(addon).size / 2 ** 20).toFixed(1)} MiB)`);
