// Load node-llama-cpp's prebuilt addon directly (no node-llama-cpp JS layer) and report which
// ggml backends load: a quick diagnosis before the benchmark. ggml's own logs go to stdout/stderr.
// Run from the folder holding node-llama-cpp's node_modules (scripts/gpu/peers_bench.sh copies it there):
//   node nlc_probe.mjs [BINS_DIR]   (default: the CUDA prebuilt inside ./node_modules)
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dir = process.argv[2] ? path.resolve(process.argv[2]) : path.join(here, "node_modules/@node-llama-cpp/linux-x64-cuda/bins/linux-x64-cuda");
const require = createRequire(import.meta.url);
const out = { dir };
try {
    const b = require(path.join(dir, "llama-addon.node"));
    b.setLoggerLogLevel(6); // debug: print everything ggml says while loading backends
    b.loadBackends();
    out.gpuAfterDefault = b.getGpuType() ?? null;
    b.loadBackends(dir);
    out.gpuType = b.getGpuType() ?? null;
    await b.init();
    out.vram = b.getGpuVramInfo();
    out.devices = b.getGpuDeviceInfo();
    out.systemInfo = b.systemInfo();
    out.ok = out.gpuType === "cuda";
} catch (e) {
    out.ok = false;
    out.error = String(e?.stack ?? e).slice(0, 1500);
}
console.log(JSON.stringify({ probe: out }, (k, v) => (typeof v === "bigint" ? Number(v) : v)));
process.exit(out.ok ? 0 : 1);
