/**
 * The scheduler's call into its {@link KVPressureHandler} (extensions.ts), with the guard that
 * keeps a faulty handler from looping `schedule()`.
 */
import type { KVCacheBlock } from "../kv/kv_cache_block.js";
import type { KVCacheManager } from "../kv/kv_cache_manager.js";
import type { Request } from "../request.js";
import type { KVPressureHandler, KVPressurePhase, SchedulerView } from "./extensions.js";
import type { StepState } from "./step.js";

/** The step-side arguments of {@link relieveKVPressure}: phase, request, new tokens, hits, step state. */
export type PressureStepArgs = [
  phase: KVPressurePhase,
  request: Request,
  numNewTokens: number,
  hits: readonly KVCacheBlock[],
  st: StepState,
];

/**
 * Asks the pressure handler for room. True only when it says it freed blocks and the free
 * count indeed grew (guards against a handler that would loop the scheduler). False without a
 * handler.
 * @param hits prefix-cache hits the allocation would reuse (those in the free queue count as
 *   needed blocks)
 * @param st the step so far (its scheduled requests are passed on as `scheduledReqIds`)
 */
export function relieveKVPressure(
  handler: KVPressureHandler | null,
  kv: KVCacheManager,
  scheduler: SchedulerView,
  ...[phase, request, numNewTokens, hits, st]: PressureStepArgs
): boolean {
  if (handler === null) return false;
  const numFreeBefore = kv.numFreeBlocks;
  const numEvictableHits = hits.filter((b) => b.refCnt === 0).length;
  const relieved = handler.relieveKVPressure({
    phase,
    request,
    numNewTokens,
    numBlocksNeeded: kv.numBlocksToAllocate(request, numNewTokens, hits) + numEvictableHits,
    numFreeBlocks: numFreeBefore,
    scheduledReqIds: new Set(st.numScheduledTokens.keys()),
    scheduler,
  });
  return relieved && kv.numFreeBlocks > numFreeBefore;
}
