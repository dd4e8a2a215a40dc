/**
 * ThreadExecutor.shutdown() while a step is in flight: the thread is terminated, so its reply
 * never comes; the pending executeModel() must reject instead of staying pending forever (an
 * engine.step() awaiting it would hang). The worker thread is replaced by a fake that never
 * replies, so the order of events is fixed.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { describe, it } from "node:test";
import type { SchedulerOutput } from "../../../src/core/sched/output.js";
import { ThreadExecutor } from "../../../src/engine/executor.js";

/** Settles-or-not of a promise once every pending microtask has run. */
function stateOf(p: Promise<unknown>): Promise<string> {
  return Promise.race([
    p.then(
      () => "resolved",
      (e: Error) => `rejected: ${e.name}: ${e.message}`,
    ),
    new Promise<string>((r) => setImmediate(() => r("pending"))),
  ]);
}

describe("ThreadExecutor.shutdown during a step", () => {
  it("rejects the step in flight with WorkerExit, and later steps are refused", async () => {
    const ex = new ThreadExecutor();
    const posted: unknown[] = [];
    let terminated = 0;
    const fakeThread = Object.assign(new EventEmitter(), {
      postMessage: (m: unknown) => posted.push(m),
      terminate: async () => {
        terminated++;
        return 1;
      },
      ref: () => {},
      unref: () => {},
    });
    (ex as unknown as { thread: unknown }).thread = fakeThread;
    const step = ex.executeModel({} as SchedulerOutput);
    assert.equal(posted.length, 1); // the step went to the thread, which will never answer
    await ex.shutdown();
    assert.equal(terminated, 1);
    assert.equal(
      await stateOf(step),
      "rejected: WorkerExit: the worker thread was shut down before it replied",
    );
    assert.equal(
      await stateOf(ex.executeModel({} as SchedulerOutput)),
      "rejected: WorkerExit: worker thread is not running",
    );
  });
});

describe("ThreadExecutor keeps the process alive only while a request waits for its reply", () => {
  it("ref when a step is posted, unref when its reply (or error) comes back", async () => {
    const ex = new ThreadExecutor();
    const events: string[] = [];
    const fakeThread = Object.assign(new EventEmitter(), {
      postMessage: () => events.push("post"),
      terminate: async () => 1,
      ref: () => events.push("ref"),
      unref: () => events.push("unref"),
    });
    (ex as unknown as { thread: unknown }).thread = fakeThread;
    const onMessage = (m: unknown) => (ex as unknown as { onMessage(m: unknown): void }).onMessage(m);

    // step 1: posted (ref), answered (unref)
    const step1 = ex.executeModel({} as SchedulerOutput);
    assert.deepEqual(events, ["ref", "post"]);
    onMessage({ type: "result", output: { ok: 1 } });
    assert.deepEqual(await step1, { ok: 1 });
    assert.deepEqual(events, ["ref", "post", "unref"]);

    // step 2: progress messages do not release it; the error reply does
    const step2 = ex.executeModel({} as SchedulerOutput);
    onMessage({ type: "progress", done: 1, total: 2 });
    assert.deepEqual(events.slice(3), ["ref", "post"]);
    onMessage({ type: "error", name: "RuntimeError", message: "boom" });
    assert.equal(await stateOf(step2), "rejected: RuntimeError: boom");
    assert.deepEqual(events.slice(3), ["ref", "post", "unref"]);
  });
});
