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
