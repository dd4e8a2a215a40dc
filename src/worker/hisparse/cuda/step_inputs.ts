import type { RequestId } from "../../../core/ids.js";
import { PAD_SLOT_ID } from "../../../core/ids.js";
import type { PreparedInputs } from "../../input_batch.js";

/** Host arrays of one step's HiSparse rows (see DeviceHiSparseStepMeta). */
export interface HiSparseStepArrays {
  /** [R] request slot of each row (-1: padding). */
  reqSlot: Int32Array;
  /** [R] 1 for rows decoding sparsely. */
  rowFlags: Int32Array;
  /** [T] host slot of each token (-1: padding). */
  hostSlotMapping: Int32Array;
  /** [R] qkv row of each row's last token. */
  tokenRow: Int32Array;
  /** [R] seqLens with the sparse rows at 0. */
  maskedSeqLens: Int32Array;
  numSparse: number;
}

/**
 * Builds the step's HiSparse host arrays from the prepared inputs, padded to `numRows` rows and
 * `numTokens` tokens (a graph bucket; pass the step's own sizes when eager).
 * @param slotOf request slot of a request (undefined when it holds none)
 * @param hostRow host copy of a slot's host-block row
 * @throws Error when a scheduled request has no slot, or a sparse request schedules more than one token.
 */
export function buildStepArrays(
  inputs: PreparedInputs,
  sparseReqIds: readonly RequestId[],
  blockSize: number,
  slotOf: (id: RequestId) => number | undefined,
  hostRow: (slot: number) => Int32Array,
  numRows: number,
  numTokens: number,
): HiSparseStepArrays {
  const R = inputs.reqIds.length;
  const sparse = new Set(sparseReqIds);
  const reqSlot = new Int32Array(numRows).fill(-1);
  const rowFlags = new Int32Array(numRows);
  const tokenRow = new Int32Array(numRows).fill(-1);
  const maskedSeqLens = new Int32Array(numRows);
  const hostSlotMapping = new Int32Array(numTokens).fill(PAD_SLOT_ID);
  let numSparse = 0;
  for (let r = 0; r < R; r++) {
    const id = inputs.reqIds[r]!;
    const slot = slotOf(id);
    if (slot === undefined) throw new Error(`request ${id} has no hisparse page table`);
    reqSlot[r] = slot;
    const [t0, t1] = [inputs.queryStartLoc[r]!, inputs.queryStartLoc[r + 1]!];
    tokenRow[r] = t1 - 1;
    if (sparse.has(id)) {
      if (t1 - t0 !== 1) throw new Error(`sparse request ${id} schedules ${t1 - t0} tokens, not 1`);
      rowFlags[r] = 1;
      numSparse++;
    } else maskedSeqLens[r] = inputs.seqLens[r]!;
    const row = hostRow(slot);
    for (let t = t0; t < t1; t++) {
      const pos = inputs.positions[t]!;
      hostSlotMapping[t] = row[Math.floor(pos / blockSize)]! * blockSize + (pos % blockSize);
    }
  }
  if (numSparse !== sparse.size) throw new Error("a sparse request of the plan is not in the step");
  return { reqSlot, rowFlags, hostSlotMapping, tokenRow, maskedSeqLens, numSparse };
}

/**
 * The dense layers' block tables of a step: row r = the host blocks of request r's pages
 * ([R, width], zero-padded), from the slots' host copies.
 */
export function denseHostTables(
  reqSlot: Int32Array,
  numRows: number,
  width: number,
  numPages: (r: number) => number,
  hostRow: (slot: number) => Int32Array,
): Int32Array {
  const out = new Int32Array(numRows * width);
  for (let r = 0; r < numRows; r++) {
    const slot = reqSlot[r]!;
    if (slot < 0) continue;
    out.set(hostRow(slot).subarray(0, Math.min(numPages(r), width)), r * width);
  }
  return out;
}
