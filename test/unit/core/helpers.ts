/**
 * Test helpers for the core scheduler tests: request factories, configs, and a fake worker
 * that "runs" a SchedulerOutput (samples a token for every request whose prefill is complete).
 */

import type { CacheConfig, SchedulerConfig } from "../../../src/config/configs.js";
import { type ExtensionData, newExtensionData } from "../../../src/core/extension_data.js";
import { asRequestId, type BlockId, type RequestId } from "../../../src/core/ids.js";
import { Request } from "../../../src/core/request.js";
import { makeSamplingParams, type SamplingParams } from "../../../src/core/sampling_params.js";
import type { SchedulerOptions } from "../../../src/core/sched/extensions.js";
import type { EngineCoreOutput, ModelRunnerOutput, SchedulerOutput } from "../../../src/core/sched/output.js";
import { Scheduler } from "../../../src/core/sched/scheduler.js";

/** EOS id of the fake model. */
export const EOS = 2;
/** Token the fake worker samples unless told otherwise (not EOS, not a stop token). */
export const DEFAULT_SAMPLED = 7;

/** `n` consecutive token ids starting at `start` (distinct ranges avoid accidental prefix hits). */
export function tokens(start: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => start + i);
}

/** A request with the given prompt and sampling parameters (maxTokens defaults to 16). */
export function req(id: string, prompt: number[], sp: Partial<SamplingParams> = {}): Request {
  return new Request(asRequestId(id), prompt, makeSamplingParams({ temperature: 0, ...sp }), [EOS], 0);
}

export const rid = (s: string): RequestId => asRequestId(s);
export const bids = (...ids: number[]): BlockId[] => ids as BlockId[];

export function schedConfig(p: Partial<SchedulerConfig> = {}): SchedulerConfig {
  return { maxNumSeqs: 8, maxNumBatchedTokens: 64, maxModelLen: 1024, enableChunkedPrefill: true, ...p };
}

export function cacheConfig(p: Partial<CacheConfig> = {}): CacheConfig {
  return {
    blockSize: 4,
    numGpuBlocks: 16,
    gpuMemoryUtilization: 0.9,
    kvCacheDtype: "auto",
    enablePrefixCaching: false,
    ...p,
  };
}

export function makeScheduler(
  s: Partial<SchedulerConfig> = {},
  c: Partial<CacheConfig> = {},
  options: SchedulerOptions = {},
): Scheduler {
  return new Scheduler(schedConfig(s), cacheConfig(c), options);
}

/**
 * What a worker returns for `so`: after `schedule()` advanced numComputedTokens, a request whose
 * prefill is complete (numComputedTokens == numTokens) gets one token, `sample(reqId)`; one in
 * the middle of a chunked prefill gets none.
 */
export function fakeRunnerOutput(
  sched: Scheduler,
  so: SchedulerOutput,
  sample: (reqId: RequestId) => number = () => DEFAULT_SAMPLED,
  extensions: ExtensionData = newExtensionData(),
): ModelRunnerOutput {
  const reqIds: RequestId[] = [];
  const sampledTokenIds: number[][] = [];
  for (const reqId of so.numScheduledTokens.keys()) {
    const r = sched.getRequest(reqId);
    reqIds.push(reqId);
    sampledTokenIds.push(r !== undefined && r.numComputedTokens === r.numTokens ? [sample(reqId)] : []);
  }
  return { reqIds, sampledTokenIds, logprobs: reqIds.map(() => null), extensions };
}

/** One engine step: schedule, fake worker, update. */
export function step(
  sched: Scheduler,
  sample?: (reqId: RequestId) => number,
): { so: SchedulerOutput; outs: EngineCoreOutput[] } {
  const so = sched.schedule();
  const outs = sched.updateFromOutput(so, fakeRunnerOutput(sched, so, sample));
  return { so, outs };
}

/** numScheduledTokens as a plain object, for deepEqual. */
export function scheduled(so: SchedulerOutput): Record<string, number> {
  return Object.fromEntries(so.numScheduledTokens);
}

/** New requests of a step as {id: blockIds}. */
export function newReqBlocks(so: SchedulerOutput): Record<string, BlockId[]> {
  return Object.fromEntries(so.scheduledNewReqs.map((r) => [r.reqId, r.blockIds]));
}

/** Cached requests of a step as {id: [resumed, newBlockIds, numComputedTokens]}. */
export function cachedReqs(so: SchedulerOutput): Record<string, [boolean, BlockId[], number]> {
  const c = so.scheduledCachedReqs;
  return Object.fromEntries(
    c.reqIds.map((id, i) => [id, [c.resumedFromPreemption[i]!, c.newBlockIds[i]!, c.numComputedTokens[i]!]]),
  );
}
