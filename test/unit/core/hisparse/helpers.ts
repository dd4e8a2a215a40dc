/**
 * Helpers of the HiSparse core tests: a Scheduler wired with HiSparse scheduling (tiny pools,
 * block size 4) and a fake worker that answers each step's plan (echoing its step, so the
 * step's mirrors count as complete) with counters the test chooses.
 */

import type { SchedulerConfig } from "../../../../src/config/configs.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import {
  createHiSparseScheduling,
  type HiSparseScheduling,
} from "../../../../src/core/hisparse/hisparse_scheduling.js";
import {
  HISPARSE,
  type HiSparseStepPlan,
  type HiSparseStepResult,
  type PageTableRow,
} from "../../../../src/core/hisparse/plan.js";
import { PageState } from "../../../../src/core/hisparse/residency.js";
import { asRequestId } from "../../../../src/core/ids.js";
import type { EngineCoreOutput, SchedulerOutput } from "../../../../src/core/sched/output.js";
import type { Scheduler } from "../../../../src/core/sched/scheduler.js";
import { fakeRunnerOutput, makeScheduler } from "../helpers.js";

/** Block size of every HiSparse core test. */
export const BS = 4;

/**
 * A scheduler with HiSparse: device pool `numGpuBlocks`, host pool `numHostBlocks`; config
 * defaults for tiny tests: topk 8 (2 pages), hot buffer 8 (2 blocks), sink 4 (page 0),
 * window 4 (the tail page), mode auto; `sched` overrides the scheduler config (e.g. its token budget).
 */
export function hisparseScheduler(
  config: Partial<HiSparseConfig>,
  numGpuBlocks: number,
  numHostBlocks: number,
  sched: Partial<SchedulerConfig> = {},
): { s: Scheduler; hs: HiSparseScheduling } {
  const cfg = resolveHiSparseConfig({
    mode: "auto",
    topk: 8,
    deviceBufferTokens: 8,
    sinkTokens: 4,
    windowTokens: 4,
    minSparseTokens: 16,
    ...config,
  });
  const hs = createHiSparseScheduling(cfg, { blockSize: BS, numGpuBlocks, numHostBlocks });
  const s = makeScheduler(sched, { blockSize: BS, numGpuBlocks }, hs.schedulerOptions);
  return { s, hs };
}

/** One step: schedule, a fake worker answering the plan with `result`, update. */
export function hsStep(
  s: Scheduler,
  result: Partial<HiSparseStepResult> = {},
): { so: SchedulerOutput; plan: HiSparseStepPlan; outs: EngineCoreOutput[] } {
  const so = s.schedule();
  const plan = so.extensions.get(HISPARSE) as HiSparseStepPlan;
  const answer: HiSparseStepResult = {
    step: plan.step,
    hits: 0,
    misses: 0,
    hostToDeviceBytes: 0,
    deviceToHostBytes: 0,
    numSparsePages: 0,
    ...result,
  };
  const outs = s.updateFromOutput(so, fakeRunnerOutput(s, so, undefined, new Map([[HISPARSE, answer]])));
  return { so, plan, outs };
}

/** Page tables of a plan as {reqId: [hostBlockIds, blockIds, pinnedPages, hotBlockIds]}. */
export function rows(plan: HiSparseStepPlan): Record<string, [number[], number[], number[], number[]]> {
  return Object.fromEntries(
    plan.pageTables.map((r: PageTableRow) => [
      r.reqId,
      [r.hostBlockIds, r.blockIds, r.pinnedPages, r.hotBlockIds],
    ]),
  );
}

/** Core's view of a request's pages: ACTIVE (device block) or INACTIVE (host tier only). */
export function pageStates(hs: HiSparseScheduling, reqId: string): PageState[] {
  const id = asRequestId(reqId);
  const n = hs.kvCacheManager.pagesOf(id)?.numPages ?? 0;
  return Array.from({ length: n }, (_, p) =>
    hs.kvCacheManager.isResident(id, p) ? PageState.ACTIVE : PageState.INACTIVE,
  );
}

/** A plan's mirror copies as [blockId, hostBlockId] pairs. */
export function mirrors(plan: HiSparseStepPlan): Array<[number, number]> {
  return plan.mirror.blockIds.map((b, i) => [b, plan.mirror.hostBlockIds[i]!]);
}
