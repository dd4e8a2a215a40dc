// Child process of threads.test.ts: uses a threaded backend and returns without dispose();
// the process must still exit on its own.
import { CpuBackend } from "../../../../src/backends/cpu/index.js";

const b = new CpuBackend({ numThreads: 2, chunkMacs: 1 });
const y = b.toHost(
  b.linear(
    b.stage(Float32Array.from([1, 2]), [1, 2], "f32"),
    b.upload(Float32Array.from([1, 1, 2, 0, 0, 1, 1, 0]), [4, 2], "f32"),
    null,
  ),
);
console.log(`linear ok: ${y[0]}`);
