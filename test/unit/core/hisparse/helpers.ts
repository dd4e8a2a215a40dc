/**
 * Helpers of the HiSparse core tests: a Scheduler wired with HiSparse scheduling (tiny pools,
 * block size 4), a fake worker that answers each step's plan (echoing its step, so the step's
 * mirrors count as complete) with counters the test chooses, and the plan's page-table deltas
 * in the tests' narration form.
 */

import type { SchedulerConfig } from "../../../../src/config/configs.js";
import { type HiSparseConfig, resolveHiSparseConfig } from "../../../../src/config/hisparse_config.js";
import { newExtensionData } from "../../../../src/core/extension_data.js";
import {
  createHiSparseScheduling,
  type HiSparseGeometry,
  type HiSparseScheduling,
} from "../../../../src/core/hisparse/hisparse_scheduling.js";
import {
  HISPARSE_PLAN,
  HISPARSE_RESULT,
  type HiSparseStepPlan,
  type HiSparseStepResult,
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
 * window 4 (the tail page), mode auto; `sched` overrides the scheduler config (e.g. its token budget),
 * `geo` the worker's capabilities (a streaming prefill: prefillReadsHostTier).
 */
export function hisparseScheduler(
  config: Partial<HiSparseConfig>,
  numGpuBlocks: number,
  numHostBlocks: number,
  sched: Partial<SchedulerConfig> = {},
  geo: Pick<HiSparseGeometry, "prefillReadsHostTier" | "maxNumBatchedTokens"> = {},
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
  const hs = createHiSparseScheduling(cfg, { blockSize: BS, numGpuBlocks, numHostBlocks, ...geo });
  const s = makeScheduler(sched, { blockSize: BS, numGpuBlocks }, hs.schedulerOptions);
  return { s, hs };
}

/** One step: schedule, a fake worker answering the plan with `result`, update. */
export function hsStep(
  s: Scheduler,
  result: Partial<HiSparseStepResult> = {},
): { so: SchedulerOutput; plan: HiSparseStepPlan; outs: EngineCoreOutput[] } {
  const so = s.schedule();
  const plan = so.extensions.get(HISPARSE_PLAN)!;
  const answer: HiSparseStepResult = {
    step: plan.step,
    hits: 0,
    misses: 0,
    hostToDeviceBytes: 0,
    deviceToHostBytes: 0,
    numSparsePages: 0,
    ...result,
  };
  const outs = s.updateFromOutput(
    so,
    fakeRunnerOutput(s, so, undefined, newExtensionData().set(HISPARSE_RESULT, answer)),
  );
  return { so, plan, outs };
}

/**
 * One request's page-table delta as the tests narrate it: the appended pages as [page, host
 * block, device block] (device block -1 = INACTIVE), the earlier pages spilled and pinned, the
 * hot blocks given; changes that did not happen are left out.
 */
export interface NarratedDelta {
  pages?: Array<[number, number, number]>;
  spilled?: number[];
  pinned?: number[];
  hot?: number[];
}

/** The plan's page-table deltas by request id, in narration form. */
export function deltas(plan: HiSparseStepPlan): Record<string, NarratedDelta> {
  return Object.fromEntries(
    plan.pageTableDeltas.map((d) => {
      const n: NarratedDelta = {};
      if (d.newHostBlockIds.length > 0)
        n.pages = d.newHostBlockIds.map((h, i) => [d.firstNewPage + i, h, d.newBlockIds[i]!]);
      if (d.spilledPages.length > 0) n.spilled = d.spilledPages;
      if (d.newPinnedPages.length > 0) n.pinned = d.newPinnedPages;
      if (d.newHotBlockIds.length > 0) n.hot = d.newHotBlockIds;
      return [d.reqId, n];
    }),
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
