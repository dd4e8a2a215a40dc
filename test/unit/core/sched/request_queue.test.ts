import assert from "node:assert/strict";
import { test } from "node:test";
import { RequestQueue } from "../../../../src/core/sched/request_queue.js";
import { req, tokens } from "../helpers.js";

const ids = (q: RequestQueue) => q.toArray().map((r) => r.requestId);

test("request queue: FCFS order, preempted requests to the front, removal from anywhere", () => {
  const q = new RequestQueue();
  const a = req("A", tokens(1, 2));
  const b = req("B", tokens(1, 2));
  const c = req("C", tokens(1, 2));
  const d = req("D", tokens(1, 2));
  q.add(a);
  q.add(b);
  q.add(c);
  assert.deepEqual(ids(q), ["A", "B", "C"]);
  assert.equal(q.peek(), a);
  assert.equal(q.popFront(), a);
  // A preempted request returns to the front (reusing the slot A left).
  q.prepend(d);
  assert.deepEqual(ids(q), ["D", "B", "C"]);
  // And another one in front of it, with no free slot at the head.
  q.prepend(a);
  assert.deepEqual(ids(q), ["A", "D", "B", "C"]);
  assert.equal(q.remove(b), true);
  assert.equal(q.remove(b), false);
  assert.deepEqual(ids(q), ["A", "D", "C"]);
  assert.equal(q.length, 3);
  q.popFront();
  q.popFront();
  q.popFront();
  assert.equal(q.length, 0);
  assert.equal(q.peek(), undefined);
  assert.throws(() => q.popFront(), /the waiting queue is empty/);
});

test("request queue: many pops compact the storage without changing the order", () => {
  const q = new RequestQueue();
  const all = Array.from({ length: 200 }, (_, i) => req(`R${i}`, tokens(1, 2)));
  for (const r of all) q.add(r);
  for (let i = 0; i < 150; i++) assert.equal(q.popFront(), all[i]);
  assert.deepEqual(
    ids(q),
    all.slice(150).map((r) => r.requestId),
  );
  q.prepend(all[0]!);
  assert.equal(q.peek(), all[0]);
  assert.equal(q.length, 51);
});

test("request queue: a popped or removed request is not kept alive by the queue", async () => {
  // The scheduler pops admitted requests and removes aborted ones; once they finish, nothing
  // else references them, so their token lists (a long prompt is megabytes) must be collectable
  // even while the queue stays in use with fewer than 64 pops (before any compaction).
  const { setFlagsFromString } = await import("node:v8");
  const { runInNewContext } = await import("node:vm");
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const q = new RequestQueue();
  const keep = req("KEEP", tokens(1, 2));
  let popped: ReturnType<typeof req> | null = req("POPPED", tokens(1, 100_000));
  let removed: ReturnType<typeof req> | null = req("REMOVED", tokens(1, 100_000));
  const poppedRef = new WeakRef(popped);
  const removedRef = new WeakRef(removed);
  q.add(popped);
  q.add(removed);
  q.add(keep);
  assert.equal(q.popFront(), popped);
  assert.equal(q.remove(removed), true);
  popped = null;
  removed = null;
  // WeakRef targets stay alive until the current job ends: collect in a later macrotask.
  await new Promise((r) => setImmediate(r));
  gc();
  assert.equal(poppedRef.deref(), undefined);
  assert.equal(removedRef.deref(), undefined);
  assert.deepEqual(ids(q), ["KEEP"]);
});
