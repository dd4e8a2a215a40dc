/**
 * Scheduler: `longPrefillTokenThreshold` (vLLM v1's long_prefill_token_threshold,
 * vllm/v1/core/sched/scheduler.py schedule(): `if 0 < threshold < num_new_tokens:
 * num_new_tokens = threshold`, for running and waiting requests). A long chunked prefill that
 * would take the whole step budget is cut to the threshold, so a short prompt arriving behind it
 * gets in within the same step. Block size 4; budget 64 tokens; caching off unless stated.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Command } from "commander";
import { addEngineFlags, engineArgsFromOptions } from "../../../../src/cli/engine_flags.js";
import { validateSchedulerConfig } from "../../../../src/config/configs.js";
import { validateEngineArgs } from "../../../../src/config/engine_args.js";
import { Scheduler } from "../../../../src/core/sched/scheduler.js";
import {
  bids,
  cacheConfig,
  makeScheduler,
  newReqBlocks,
  req,
  schedConfig,
  scheduled,
  step,
  tokens,
} from "../helpers.js";

const POOL = { numGpuBlocks: 64 };

test("off (0, the default): a 200-token prefill takes the whole 64-token budget; a short prompt waits 3 steps", () => {
  const s = makeScheduler({ maxNumBatchedTokens: 64 }, POOL);
  s.addRequest(req("A", tokens(1000, 200), { maxTokens: 4 }));
  // Step 1: A's first chunk is the whole budget, 64 tokens.
  let { so } = step(s);
  assert.deepEqual(scheduled(so), { A: 64 });
  // B (10 tokens) arrives. Steps 2 and 3: A, the running request, is served first and takes all 64.
  s.addRequest(req("B", tokens(2000, 10), { maxTokens: 4 }));
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 64 });
  assert.equal(s.numWaiting, 1);
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 64 });
  // Step 4: A's last 8 prompt tokens leave 56 of the budget: B's whole prompt gets in, and both
  // get their first token.
  const r = step(s);
  assert.deepEqual(scheduled(r.so), { A: 8, B: 10 });
  assert.deepEqual(
    r.outs.map((o) => [o.reqId, o.numOutputTokens]),
    [
      ["A", 1],
      ["B", 1],
    ],
  );
});

test("threshold 32: the 200-token prefill goes 32 tokens a step; the short prompt is admitted in the step after it arrives", () => {
  const s = makeScheduler({ maxNumBatchedTokens: 64, longPrefillTokenThreshold: 32 }, POOL);
  const a = req("A", tokens(1000, 200), { maxTokens: 4 });
  s.addRequest(a);
  // Step 1: A wants 200 > 32 tokens: capped at 32 (8 blocks, 0-7); 32 of the budget stay unused.
  let { so, outs } = step(s);
  assert.deepEqual(scheduled(so), { A: 32 });
  assert.deepEqual(newReqBlocks(so), { A: bids(0, 1, 2, 3, 4, 5, 6, 7) });
  assert.equal(so.totalNumScheduledTokens, 32);
  // B (10 tokens) arrives. Step 2: A (running) takes its next 32 (blocks 8-15); 32 are left and
  // B's whole 10-token prompt (under the threshold: not capped) gets in (blocks 16-18) and
  // samples its first token in this step.
  s.addRequest(req("B", tokens(2000, 10), { maxTokens: 4 }));
  ({ so, outs } = step(s));
  assert.deepEqual(scheduled(so), { A: 32, B: 10 });
  assert.deepEqual(newReqBlocks(so), { B: bids(16, 17, 18) });
  assert.deepEqual(
    outs.map((o) => [o.reqId, o.numOutputTokens]),
    [["B", 1]],
  );
  assert.equal(a.numComputedTokens, 64);
  // Step 3: A 32 more (96 of 200), B decodes 1 token: decodes are never capped.
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 32, B: 1 });
  // Steps 4-7: A goes on 32 at a time (128, 160, 192) and then its last 8; B decodes until
  // maxTokens 4 (steps 4, 5) and finishes.
  const perStep: Record<string, number>[] = [];
  for (let i = 0; i < 4; i++) perStep.push(scheduled(step(s).so));
  assert.deepEqual(perStep, [{ A: 32, B: 1 }, { A: 32, B: 1 }, { A: 32 }, { A: 8 }]);
  assert.equal(a.numComputedTokens, 200);
  assert.equal(a.outputTokenIds.length, 1);
});

test("a waiting request's first chunk is capped too, and the next waiting request takes the rest of the budget", () => {
  const s = makeScheduler({ maxNumBatchedTokens: 64, longPrefillTokenThreshold: 40 }, POOL);
  s.addRequest(req("A", tokens(1000, 100), { maxTokens: 2 }));
  s.addRequest(req("B", tokens(2000, 100), { maxTokens: 2 }));
  // Step 1: A (waiting) gets min(cap 40, budget 64) = 40; B gets min(cap 40, budget 24) = 24.
  let { so } = step(s);
  assert.deepEqual(scheduled(so), { A: 40, B: 24 });
  // Step 2: both running: A 40 (80 of 100), B min(40, 24 left) = 24 (48 of 100).
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 40, B: 24 });
  // Step 3: A's rest is 20 (under the cap), B's 52 is capped at 40: 60 of the 64.
  ({ so } = step(s));
  assert.deepEqual(scheduled(so), { A: 20, B: 40 });
});

test("the cap counts the tokens left after prefix-cache hits (vLLM: num_tokens - num_computed_tokens)", () => {
  const s = makeScheduler(
    { maxNumBatchedTokens: 64, longPrefillTokenThreshold: 16 },
    { ...POOL, enablePrefixCaching: true },
  );
  const shared = tokens(1000, 40);
  s.addRequest(req("A", shared, { maxTokens: 1 }));
  // A: 40 tokens at 16 a step (16, 16, 8); its first token ends it (maxTokens 1).
  const steps: Record<string, number>[] = [];
  for (let i = 0; i < 3; i++) steps.push(scheduled(step(s).so));
  assert.deepEqual(steps, [{ A: 16 }, { A: 16 }, { A: 8 }]);
  // B: the same 40 tokens + 8 new: 10 full blocks (40 tokens) hit, 8 left < 16: one step.
  s.addRequest(req("B", [...shared, ...tokens(3000, 8)], { maxTokens: 1 }));
  const { so } = step(s);
  assert.deepEqual(scheduled(so), { B: 8 });
  assert.equal(so.scheduledNewReqs[0]!.numComputedTokens, 40);
});

test("config: the threshold must be an integer >= 0, at most max-model-len, and needs chunked prefill", () => {
  assert.deepEqual(validateSchedulerConfig(schedConfig({ longPrefillTokenThreshold: 0 })), []);
  assert.deepEqual(validateSchedulerConfig(schedConfig({ longPrefillTokenThreshold: 1024 })), []);
  assert.deepEqual(validateSchedulerConfig(schedConfig({ longPrefillTokenThreshold: -1 })), [
    "--long-prefill-token-threshold must be an integer >= 0 (0 = off), got -1",
  ]);
  assert.deepEqual(validateSchedulerConfig(schedConfig({ longPrefillTokenThreshold: 2048 })), [
    "--long-prefill-token-threshold (2048) cannot be greater than --max-model-len (1024)",
  ]);
  const unchunked = schedConfig({ enableChunkedPrefill: false, maxNumBatchedTokens: 1024 });
  assert.deepEqual(validateSchedulerConfig({ ...unchunked, longPrefillTokenThreshold: 256 }), [
    "--long-prefill-token-threshold 256 splits prefills into chunks of 256 tokens: it needs chunked prefill (drop --no-enable-chunked-prefill)",
  ]);
  assert.throws(
    () => new Scheduler({ ...unchunked, longPrefillTokenThreshold: 256 }, cacheConfig()),
    /^Error: invalid scheduler setup: --long-prefill-token-threshold 256 splits prefills/,
  );
});

test("CLI: --long-prefill-token-threshold lands in the engine args (default 0) and is validated", () => {
  const parse = (argv: string[]) => {
    const cmd = addEngineFlags(new Command("t").exitOverride());
    cmd.parse(argv, { from: "user" });
    return engineArgsFromOptions(cmd.opts());
  };
  assert.equal(parse([]).longPrefillTokenThreshold, 0);
  const a = parse(["--long-prefill-token-threshold", "512"]);
  assert.equal(a.longPrefillTokenThreshold, 512);
  assert.deepEqual(validateEngineArgs(a), []);
  assert.deepEqual(
    validateEngineArgs(
      parse(["--long-prefill-token-threshold", "512", "--no-enable-chunked-prefill"]),
    ).filter((x) => x.includes("long-prefill")),
    [
      "--long-prefill-token-threshold 512 splits prefills into chunks of 512 tokens: it needs chunked prefill (drop --no-enable-chunked-prefill)",
    ],
  );
  // Against a given --max-model-len before the model loads (a derived one: the scheduler's check).
  assert.deepEqual(
    validateEngineArgs(parse(["--long-prefill-token-threshold", "200", "--max-model-len", "128"])),
    ["--long-prefill-token-threshold (200) cannot be greater than --max-model-len (128)"],
  );
  assert.deepEqual(validateEngineArgs(parse(["--long-prefill-token-threshold", "200"])), []);
});
