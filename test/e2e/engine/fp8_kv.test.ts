/**
 * `--kv-cache-dtype fp8` end to end on the CPU backend (the e4m3 oracle, src/backends/fp8.ts):
 * ref-small scores HF's greedy continuations of the fixture prompts (forced tokens, one decode
 * step each, after a prefill that reads the fp8 cache too) with a negative log-likelihood within
 * 1% of the f32 cache's, and the fp8 run differs from f32 (the cache really is rounded). With
 * `--calculate-kv-scales` every layer's scales are pending until the first batch, set by it
 * (amax / 200, amax / 100: not 1.0), and kept by the next call; the NLL stays within 1%.
 */
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import type { Tensor } from "../../../src/backends/backend.js";
import type { CpuBackend } from "../../../src/backends/cpu/cpu_backend.js";
import { LLM } from "../../../src/engine/llm.js";
import type { Worker } from "../../../src/worker/worker.js";
import { describeIfFound, loadFixture, refModelDir } from "../../helpers/reference.js";

const dir = refModelDir("ref-small");

describeIfFound("fp8 KV cache on the CPU backend: ref-small", "ref-small", dir, () => {
  let f32: LLM;
  let fp8: LLM;
  let calib: LLM;
  before(() => {
    calib = new LLM({
      model: dir!,
      device: "cpu",
      maxModelLen: 256,
      kvCacheDtype: "fp8",
      calculateKvScales: true,
      inprocWorker: true,
    });
    f32 = new LLM({ model: dir!, device: "cpu", maxModelLen: 256 });
    fp8 = new LLM({ model: dir!, device: "cpu", maxModelLen: 256, kvCacheDtype: "fp8" });
  });
  after(async () => {
    await f32.shutdown();
    await fp8.shutdown();
    await calib.shutdown();
  });

  const cases = loadFixture("ref-small");
  /** Σ -log p of each case's HF greedy ids, forced after its prompt. */
  const nll = async (llm: LLM) => {
    const outs = await llm.generate(
      cases.map((c) => ({ promptTokenIds: c.input_ids })),
      cases.map((c) => ({
        temperature: 0,
        maxTokens: c.greedy_ids.length,
        ignoreEos: true,
        logprobs: 0,
        forcedTokenIds: c.greedy_ids,
      })),
    );
    return outs.map((o) => -o.outputs[0]!.logprobs!.reduce((s, l) => s + l.sampledLogprob, 0));
  };
  const total = (v: number[]) => v.reduce((s, x) => s + x, 0);

  it("HF's greedy continuations score within 1% of the f32 cache's NLL", async (t) => {
    const a = await nll(f32);
    const b = await nll(fp8);
    const rel = (total(b) - total(a)) / total(a);
    t.diagnostic(`NLL f32 ${total(a).toFixed(4)}, fp8 ${total(b).toFixed(4)} (${(100 * rel).toFixed(3)}%)`);
    assert.ok(
      Math.abs(rel) < 0.01,
      `NLL f32 ${total(a).toFixed(3)} vs fp8 ${total(b).toFixed(3)} (${(100 * rel).toFixed(2)}%)`,
    );
    assert.notDeepEqual(b, a, "the fp8 cache changes the logprobs");
  });

  it("--calculate-kv-scales: the first batch sets every layer's scales, the next call keeps them", async (t) => {
    const engine = await calib.getEngine();
    // The in-process worker's backend and caches (private fields: test inspection only).
    const worker = (engine as unknown as { executor: { inner: Worker } }).executor.inner;
    const backend = (worker as unknown as { backend: CpuBackend }).backend;
    const caches = (worker.modelRunner as unknown as { kvCaches: readonly Tensor[] }).kvCaches;
    const scales = () => caches.map((c) => ({ ...backend.kvCacheScales(c)! }));
    assert.ok(scales().every((s) => s.pending && s.kScale === 1 && s.vScale === 1));
    const a = total(await nll(calib));
    const first = scales();
    assert.ok(
      first.every((s) => !s.pending && s.kScale !== 1 && s.kScale > 0 && s.vScale !== 1 && s.vScale > 0),
    );
    t.diagnostic(
      `k/v scales: ${first.map((s) => `${s.kScale.toPrecision(3)}/${s.vScale.toPrecision(3)}`).join(" ")}`,
    );
    const b = total(await nll(calib));
    assert.deepEqual(scales(), first, "fixed after the first batch");
    assert.equal(b, a, "same scales, same cache values, same NLL");
    const ref = total(await nll(f32));
    t.diagnostic(
      `NLL f32 ${ref.toFixed(4)}, fp8 calibrated ${a.toFixed(4)} (${((100 * (a - ref)) / ref).toFixed(3)}%)`,
    );
    assert.ok(Math.abs(a - ref) / ref < 0.01);
  });
});
