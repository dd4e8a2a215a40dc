import type { AttentionMetadata, Backend } from "../backends/backend.js";
import type { BlockId, RequestId } from "../core/ids.js";
import type { SamplingParams } from "../core/sampling_params.js";
import type { SchedulerOutput } from "../core/sched/output.js";

/**
 * The worker's copy of one request (vllm/v1/worker/gpu_input_batch.py CachedRequestState): its
 * tokens (the worker appends what it samples), its blocks, and its random generator state.
 */
export interface CachedRequestState {
  reqId: RequestId;
  promptTokenIds: readonly number[];
  /** Tokens this worker sampled for the request, in order. */
  outputTokenIds: number[];
  samplingParams: SamplingParams;
  blockIds: BlockId[];
  /** Tokens with KV in the cache at the start of the current step. */
  numComputedTokens: number;
}

/** Number of known tokens (prompt + sampled) of a request. */
export function numTokensOf(r: CachedRequestState): number {
  return r.promptTokenIds.length + r.outputTokenIds.length;
}

/** Token at index i of prompt ++ output. */
export function tokenAt(r: CachedRequestState, i: number): number {
  const p = r.promptTokenIds.length;
  return i < p ? r.promptTokenIds[i]! : r.outputTokenIds[i - p]!;
}

/**
 * Applies a SchedulerOutput to the worker's request states: drops finished requests, adds new
 * ones, appends new blocks (or replaces the list for resumed requests) and records each
 * request's numComputedTokens.
 * @throws Error when the output names a request the worker never saw (a scheduler bug).
 */
export function updateStates(states: Map<RequestId, CachedRequestState>, so: SchedulerOutput): void {
  for (const id of so.finishedReqIds) states.delete(id);
  for (const n of so.scheduledNewReqs) {
    states.set(n.reqId, {
      reqId: n.reqId,
      promptTokenIds: n.promptTokenIds,
      outputTokenIds: [],
      samplingParams: n.samplingParams,
      blockIds: [...n.blockIds],
      numComputedTokens: n.numComputedTokens,
    });
  }
  const c = so.scheduledCachedReqs;
  for (let i = 0; i < c.reqIds.length; i++) {
    const s = states.get(c.reqIds[i]!);
    if (s === undefined) throw new Error(`worker has no state for request ${c.reqIds[i]}`);
    const blocks = c.newBlockIds[i] ?? [];
    if (c.resumedFromPreemption[i]) s.blockIds = [...blocks];
    else for (const b of blocks) s.blockIds.push(b);
    s.numComputedTokens = c.numComputedTokens[i]!;
  }
}

/** Host arrays describing one step's batch (vLLM's _prepare_inputs). */
export interface PreparedInputs {
  reqIds: RequestId[];
  inputIds: Int32Array; // [T]
  positions: Int32Array; // [T]
  slotMapping: Int32Array; // [T]
  queryStartLoc: Int32Array; // [numReqs + 1]
  seqLens: Int32Array; // [numReqs]
  blockTables: Int32Array; // [numReqs, maxBlocksPerReq]
  maxBlocksPerReq: number;
  maxQueryLen: number;
  maxSeqLen: number;
  /** Rows of T whose logits are sampled: the last scheduled token of each request whose
   * known tokens are all computed after this step. */
  logitsIndices: Int32Array; // [B]
  /** Index into reqIds of each logits row. */
  logitsReqIdx: Int32Array; // [B]
}

/**
 * Builds the flat step inputs from request states, in the order of `numScheduledTokens`.
 * Slot of position p: blockIds[floor(p / blockSize)] * blockSize + p % blockSize.
 * @param minBlocksPerReq pad block-table rows to at least this width (CUDA graphs use a static width)
 * @throws Error when a request lacks the blocks for its scheduled positions (a scheduler bug).
 */
export function prepareInputs(
  states: Map<RequestId, CachedRequestState>,
  so: SchedulerOutput,
  blockSize: number,
  minBlocksPerReq = 0,
): PreparedInputs {
  const reqIds = [...so.numScheduledTokens.keys()];
  const T = so.totalNumScheduledTokens;
  const numReqs = reqIds.length;
  const inputIds = new Int32Array(T);
  const positions = new Int32Array(T);
  const slotMapping = new Int32Array(T);
  const queryStartLoc = new Int32Array(numReqs + 1);
  const seqLens = new Int32Array(numReqs);
  let maxBlocksPerReq = minBlocksPerReq;
  const rows: CachedRequestState[] = reqIds.map((id) => {
    const s = states.get(id);
    if (s === undefined) throw new Error(`scheduled request ${id} has no worker state`);
    maxBlocksPerReq = Math.max(maxBlocksPerReq, s.blockIds.length);
    return s;
  });
  const blockTables = new Int32Array(numReqs * maxBlocksPerReq);
  const logitsIndices: number[] = [];
  const logitsReqIdx: number[] = [];
  let t = 0;
  let maxQueryLen = 0;
  let maxSeqLen = 0;
  for (let r = 0; r < numReqs; r++) {
    const s = rows[r]!;
    const n = so.numScheduledTokens.get(s.reqId)!;
    const start = s.numComputedTokens;
    const end = start + n;
    if (Math.ceil(end / blockSize) > s.blockIds.length) {
      throw new Error(`request ${s.reqId} has ${s.blockIds.length} blocks for ${end} tokens`);
    }
    queryStartLoc[r] = t;
    for (let p = start; p < end; p++, t++) {
      inputIds[t] = tokenAt(s, p);
      positions[t] = p;
      slotMapping[t] = s.blockIds[Math.floor(p / blockSize)]! * blockSize + (p % blockSize);
    }
    seqLens[r] = end;
    blockTables.set(s.blockIds, r * maxBlocksPerReq);
    maxQueryLen = Math.max(maxQueryLen, n);
    maxSeqLen = Math.max(maxSeqLen, end);
    if (end >= numTokensOf(s)) {
      logitsIndices.push(t - 1);
      logitsReqIdx.push(r);
    }
  }
  queryStartLoc[numReqs] = t;
  return {
    reqIds,
    inputIds,
    positions,
    slotMapping,
    queryStartLoc,
    seqLens,
    blockTables,
    maxBlocksPerReq,
    maxQueryLen,
    maxSeqLen,
    logitsIndices: Int32Array.from(logitsIndices),
    logitsReqIdx: Int32Array.from(logitsReqIdx),
  };
}

/**
 * The part of a batch's host arrays that {@link stageAttentionMetadata} reads (PreparedInputs
 * has them all; tests and benchmarks that lay out a batch by hand pass just these).
 */
export type AttentionInputs = Pick<
  PreparedInputs,
  | "queryStartLoc"
  | "seqLens"
  | "blockTables"
  | "maxBlocksPerReq"
  | "slotMapping"
  | "positions"
  | "maxQueryLen"
  | "maxSeqLen"
>;

/**
 * Stages a step's prepared inputs as AttentionMetadata: the four i32 tensors in the backend's
 * workspace (valid until its next resetWorkspace()), the host arrays kept beside them. The batch
 * has seqLens.length requests and slotMapping.length tokens.
 */
export function stageAttentionMetadata(backend: Backend, inputs: AttentionInputs): AttentionMetadata {
  const T = inputs.slotMapping.length;
  const numReqs = inputs.seqLens.length;
  return {
    numReqs,
    numTokens: T,
    queryStartLoc: backend.stage(inputs.queryStartLoc, [numReqs + 1], "i32"),
    seqLens: backend.stage(inputs.seqLens, [numReqs], "i32"),
    blockTables: backend.stage(inputs.blockTables, [numReqs, inputs.maxBlocksPerReq], "i32"),
    slotMapping: backend.stage(inputs.slotMapping, [T], "i32"),
    maxQueryLen: inputs.maxQueryLen,
    maxSeqLen: inputs.maxSeqLen,
    host: {
      queryStartLoc: inputs.queryStartLoc,
      seqLens: inputs.seqLens,
      blockTables: inputs.blockTables,
      maxBlocksPerReq: inputs.maxBlocksPerReq,
      slotMapping: inputs.slotMapping,
      positions: inputs.positions,
    },
  };
}
