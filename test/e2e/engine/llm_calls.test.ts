/**
 * LLM (offline generation) across calls: concurrent generate() calls each get their own outputs
 * (the engine steps one call at a time), and a call whose step fails must not leave its
 * requests in the engine, or the next generate() keeps stepping a request that can never
 * finish. A worker failure is injected by replacing the executor's executeModel for one call.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Executor } from "../../../src/engine/executor.js";
import { LLM } from "../../../src/engine/llm.js";
import type { LLMEngine } from "../../../src/engine/llm_engine.js";
import { refModelDir } from "../../helpers/reference.js";

const GREEDY = { temperature: 0, maxTokens: 3, ignoreEos: true };

describe("LLM.generate after a failed step (ref-small, CPU, in-process worker)", () => {
  let llm: LLM;
  let engine: LLMEngine;
  let executor: Executor;
  before(async () => {
    llm = new LLM({ model: refModelDir("ref-small")!, device: "cpu", maxModelLen: 128, inprocWorker: true });
    engine = await llm.getEngine();
    executor = (engine as unknown as { executor: Executor }).executor;
  });
  after(() => llm.shutdown());

  it("a failed step rejects generate, leaves no request behind, and the next generate completes", async () => {
    // Step 1 fails: generate rejects with the worker's error and no request stays running or waiting.
    const real = executor.executeModel;
    executor.executeModel = async () => {
      throw new Error("injected worker failure");
    };
    try {
      await assert.rejects(llm.generate(["Hello", "World"], GREEDY), /^Error: injected worker failure$/);
    } finally {
      executor.executeModel = real;
    }
    assert.equal(engine.scheduler.numRunning, 0);
    assert.equal(engine.scheduler.numWaiting, 0);
    assert.equal(engine.hasUnfinishedRequests(), false);
    // Step 2 (the next call) runs only its own request: 3 greedy tokens, then the engine is idle
    // with every block free. (Before the fix the failed requests stayed RUNNING with nothing left
    // to compute, so this call stepped forever.)
    const [out] = await llm.generate(["Hello"], GREEDY);
    assert.equal(out!.finished, true);
    assert.equal(out!.outputs[0]!.tokenIds.length, 3);
    assert.equal(engine.hasPendingWork(), false);
    const kv = engine.scheduler.kvCacheManager;
    assert.equal(kv.numFreeBlocks, kv.blockPool.numGpuBlocks);
  });
});

describe("forced tokens outside the vocabulary (ref-small: 16384 tokens)", () => {
  let llm: LLM;
  before(() => {
    llm = new LLM({ model: refModelDir("ref-small")!, device: "cpu", maxModelLen: 128, inprocWorker: true });
  });
  after(() => llm.shutdown());

  it("forcedTokenIds [5, 16384] is refused before any step, like an out-of-vocabulary prompt token", async () => {
    const params = { temperature: 0, maxTokens: 2, ignoreEos: true, logprobs: 0, forcedTokenIds: [5, 16384] };
    await assert.rejects(llm.generate([{ promptTokenIds: [1, 2, 3] }], params), {
      name: "EngineInputError",
      message: "forced token id 16384 is out of vocabulary (size 16384)",
    });
    const engine = await llm.getEngine();
    assert.equal(engine.hasPendingWork(), false);
  });
});

describe("concurrent LLM.generate calls (ref-small, CPU)", () => {
  let llm: LLM;
  before(() => {
    llm = new LLM({ model: refModelDir("ref-small")!, device: "cpu", maxModelLen: 128 });
  });
  after(() => llm.shutdown());

  it("two calls started together both resolve, each with the tokens it gets when run alone", async () => {
    const [alone1] = await llm.generate(["Hello"], GREEDY);
    const [alone2] = await llm.generate(["The Linux kernel"], GREEDY);
    const [both1, both2] = await Promise.all([
      llm.generate(["Hello"], GREEDY),
      llm.generate(["The Linux kernel"], GREEDY),
    ]);
    assert.deepEqual(both1![0]!.outputs[0]!.tokenIds, alone1!.outputs[0]!.tokenIds);
    assert.deepEqual(both2![0]!.outputs[0]!.tokenIds, alone2!.outputs[0]!.tokenIds);
    assert.equal(both1![0]!.outputs[0]!.tokenIds.length, 3);
    const engine = await llm.getEngine();
    assert.equal(engine.hasPendingWork(), false);
  });
});
