import type { BlockId, HostBlockId, RequestId } from "../ids.js";
import type { Request } from "../request.js";
import type { SchedulerExtension, SchedulerView } from "../sched/extensions.js";
import type { ModelRunnerOutput, SchedulerOutput } from "../sched/output.js";
import type { HybridKVCacheManager } from "./hybrid_kv_cache_manager.js";
import type { HybridPolicy } from "./hybrid_policy.js";
import { HISPARSE, HISPARSE_PLAN, HISPARSE_RESULT, type HiSparseStats } from "./plan.js";

/**
 * The "hisparse" scheduler extension: turns each scheduled step into a {@link HiSparseStepPlan}
 * for the worker and folds the worker's {@link HiSparseStepResult} back into the totals.
 *
 * onScheduled, in order, for the requests of the step (the batch is fixed; numComputedTokens
 * still has its start-of-step value):
 * 1. pin the pages of whitelisted tokens among the tokens the step computes;
 * 2. `on` mode, residency `host`: long decoding requests go host-resident
 *    (HybridPolicy.offloadLongRequest);
 * 3. pages the step fills are recorded as mirrored in this step (the worker copies them after
 *    the forward; they become spillable once this step's output came back);
 * 4. the plan (under HISPARSE_PLAN): the page-table deltas, the mirror copies, and the requests
 *    that decode sparsely (HybridPolicy.decodesSparsely: those holding an INACTIVE page, which
 *    have their hot buffer, and in `on` mode with residency `hybrid` every long decoding request;
 *    each computes one token).
 */
export class HiSparseExtension implements SchedulerExtension {
  readonly name = HISPARSE;
  private step = 0;
  private readonly totals = {
    hits: 0,
    misses: 0,
    hostToDeviceBytes: 0,
    deviceToHostBytes: 0,
    mirroredPages: 0,
    loadedPages: 0,
    sparseDecodes: 0,
  };
  private numSparsePages = 0;

  constructor(
    private readonly kv: HybridKVCacheManager,
    private readonly policy: HybridPolicy,
  ) {}

  /** @throws Error when a request with INACTIVE pages lacks its hot buffer or computes more than one token (an internal bug). */
  onScheduled(output: SchedulerOutput, scheduler: SchedulerView): void {
    this.step++;
    const scheduled: Array<[Request, number]> = [];
    for (const [reqId, n] of output.numScheduledTokens) scheduled.push([scheduler.getRequest(reqId)!, n]);
    for (const [r, n] of scheduled) this.kv.scanPinned(r, r.numComputedTokens + n);
    for (const [r] of scheduled) this.policy.offloadLongRequest(r);
    const mirror = { blockIds: [] as BlockId[], hostBlockIds: [] as HostBlockId[] };
    for (const [r, n] of scheduled) {
      for (const c of this.kv.markMirrors(r, r.numComputedTokens + n, this.step)) {
        mirror.blockIds.push(c.blockId);
        mirror.hostBlockIds.push(c.hostBlockId);
      }
    }
    this.totals.mirroredPages += mirror.blockIds.length;
    const load = { blockIds: [] as BlockId[], hostBlockIds: [] as HostBlockId[] };
    for (const c of this.kv.takeLoads()) {
      load.blockIds.push(c.blockId);
      load.hostBlockIds.push(c.hostBlockId);
    }
    this.totals.loadedPages += load.blockIds.length;
    const sparseReqIds: RequestId[] = [];
    for (const [r, n] of scheduled) {
      if (!this.policy.decodesSparsely(r, n)) continue;
      if (this.kv.numHotBlocksNeeded(r.requestId) > 0 || n !== 1)
        throw new Error(`request ${r.requestId} decodes sparsely without a hot buffer or with ${n} tokens`);
      sparseReqIds.push(r.requestId);
    }
    this.totals.sparseDecodes += sparseReqIds.length;
    output.extensions.set(HISPARSE_PLAN, {
      step: this.step,
      pageTableDeltas: this.kv.takePageTableDeltas(),
      mirror,
      load,
      sparseReqIds,
    });
  }

  /** Marks the step's mirrors complete and adds its counters (a step without an answer changes nothing). */
  onModelRunnerOutput(modelRunnerOutput: ModelRunnerOutput): void {
    const d = modelRunnerOutput.extensions.get(HISPARSE_RESULT);
    if (d === undefined) return;
    this.kv.completedStep = Math.max(this.kv.completedStep, d.step);
    this.totals.hits += d.hits;
    this.totals.misses += d.misses;
    this.totals.hostToDeviceBytes += d.hostToDeviceBytes;
    this.totals.deviceToHostBytes += d.deviceToHostBytes;
    this.numSparsePages = d.numSparsePages;
  }

  /** Counters since start and current gauges. */
  stats(): HiSparseStats {
    const { numActive, numInactive, numSparseRequests } = this.kv.countPages();
    const numSparse = Math.min(this.numSparsePages, numInactive);
    const host = this.kv.hostBlockPool;
    return {
      numActivePages: numActive,
      numSparsePages: numSparse,
      numInactivePages: numInactive - numSparse,
      numSparseRequests,
      hostPoolUsedBlocks: host.numUsedBlocks,
      hostPoolTotalBlocks: host.numHostBlocks,
      hitsTotal: this.totals.hits,
      missesTotal: this.totals.misses,
      hostToDeviceBytesTotal: this.totals.hostToDeviceBytes,
      deviceToHostBytesTotal: this.totals.deviceToHostBytes,
      spilledPagesTotal: this.policy.spilledPagesTotal,
      mirroredPagesTotal: this.totals.mirroredPages,
      loadedPagesTotal: this.totals.loadedPages,
      sparseDecodesTotal: this.totals.sparseDecodes,
    };
  }
}
