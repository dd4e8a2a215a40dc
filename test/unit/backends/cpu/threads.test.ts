/**
 * The worker-thread pool: threaded matmuls equal the single-threaded ones bit for bit, worker
 * failures surface as errors, and an undisposed backend does not keep the process alive.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { CpuBackend } from "../../../../src/backends/cpu/index.js";
import { CpuThreadPool, JOB_LINEAR, MAX_CHUNKS } from "../../../../src/backends/cpu/thread_pool.js";
import { makeRand, randF32 } from "./helpers.js";

const single = new CpuBackend({ numThreads: 1 });
const two = new CpuBackend({ numThreads: 2, chunkMacs: 1 });
const three = new CpuBackend({ numThreads: 3, chunkMacs: 1 });
after(() => {
  for (const b of [single, two, three]) b.dispose();
});

describe("threaded linear", () => {
  const rand = makeRand(99);
  for (const [T, N, K] of [
    [1, 16384 / 64, 256],
    [1, 7, 9],
    [3, 101, 37],
    [16, 96, 64],
  ] as const) {
    it(`[${T}, ${K}] x [${N}, ${K}]^T + bias: 2 and 3 threads give the single-thread bits`, () => {
      const x = randF32(rand, T * K);
      const w = randF32(rand, N * K);
      const bias = randF32(rand, N);
      const run = (b: CpuBackend) => {
        const y = b.toHost(
          b.linear(b.stage(x, [T, K], "f32"), b.upload(w, [N, K], "f32"), b.upload(bias, [N], "f32")),
        );
        b.resetWorkspace();
        return [...y];
      };
      const ref = run(single);
      assert.deepEqual(run(two), ref);
      assert.deepEqual(run(three), ref);
    });
  }

  it("reads weights uploaded and workspace chunks added after the threads started", () => {
    const K = 64;
    const N = 512;
    for (let round = 0; round < 3; round++) {
      const T = 1 + round * 40; // the workspace grows each round
      const x = randF32(rand, T * K);
      const w = randF32(rand, N * K);
      const ref = single.toHost(
        single.linear(single.stage(x, [T, K], "f32"), single.upload(w, [N, K], "f32"), null),
      );
      const got = two.toHost(two.linear(two.stage(x, [T, K], "f32"), two.upload(w, [N, K], "f32"), null));
      assert.deepEqual([...got], [...ref]);
      single.resetWorkspace();
      two.resetWorkspace();
    }
  });
});

describe("CpuThreadPool", () => {
  it("reports a worker's kernel failure as an Error on the calling thread", () => {
    const pool = new CpuThreadPool(2);
    // Buffer ids 7 and 8 were never registered: any chunk a worker claims fails. The caller's
    // own chunks sleep 5 ms each, so the worker (once started) claims some of the 1023.
    const args = [7, 0, 8, 0, -1, 0, 7, 0, 1, 2046, 4];
    const nap = new Int32Array(new SharedArrayBuffer(4));
    const sleepy = () => void Atomics.wait(nap, 0, 0, 5);
    assert.throws(
      () => pool.run(JOB_LINEAR, args, MAX_CHUNKS, sleepy),
      /a CPU backend worker thread failed: .*unknown buffer 7/,
    );
    assert.throws(() => pool.run(JOB_LINEAR, args, 0, sleepy), /a job needs 1\.\.1023 chunks, got 0/);
    pool.dispose();
    assert.throws(() => pool.run(JOB_LINEAR, args, 1, sleepy), /disposed/);
  });

  it("rethrows an error of the caller's own chunk after the job completes", () => {
    const pool = new CpuThreadPool(2);
    const failing = () => {
      throw new Error("boom");
    };
    // Kind 0 is a no-op for workers; of 1023 chunks the caller claims the first within nanoseconds.
    assert.throws(() => pool.run(0, [], MAX_CHUNKS, failing), /boom/);
    pool.dispose();
  });

  it("does not keep the process alive when the backend is never disposed", () => {
    // Runs from TypeScript sources (through tsx) or from the compiled dist/ tree (plain node).
    const fromTs = import.meta.url.endsWith(".ts");
    const helper = fileURLToPath(new URL(`./threads_exit_helper.${fromTs ? "ts" : "js"}`, import.meta.url));
    const args = fromTs ? ["--import", "tsx", helper] : [helper];
    const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 60_000 });
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout.trim(), "linear ok: 3");
  });
});
