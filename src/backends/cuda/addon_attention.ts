/**
 * Addon typings, attention area: paged attention (native/kernels/attention.h) and the device
 * sampler (sampling.h). Part of the addon's typed surface: import these through addon.ts, the
 * only loader (DESIGN.md §1).
 */

/**
 * The arguments every paged attention launcher starts with: the stream, then the fields of
 * HsPagedAttentionParams (native/kernels/attention.h) in their order. Addresses and byte counts
 * as numbers (0 = NULL); qkv bf16 [numTokens, qkvRowStride], kvCache bf16 [numBlocks, 2,
 * blockSize, numKvHeads, headDim], out bf16 [numTokens, numHeads * headDim], queryStartLoc i32
 * [numReqs + 1], seqLens i32 [numReqs], blockTables i32 [numReqs, maxBlocksPerReq]; maxModelLen
 * in tokens; workspace / workspaceBytes: decode split scratch (unused by prefill).
 */
export type PagedAttentionArgs = [
  stream: number,
  qkv: number,
  qkvRowStride: number,
  kvCache: number,
  out: number,
  queryStartLoc: number,
  seqLens: number,
  blockTables: number,
  maxBlocksPerReq: number,
  numReqs: number,
  numTokens: number,
  numHeads: number,
  numKvHeads: number,
  headDim: number,
  blockSize: number,
  scale: number,
  maxModelLen: number,
  workspace: number,
  workspaceBytes: number,
];

/** The attention and sampling part of the module object (HisparseNative in addon.ts). */
export interface NativeAttentionApi {
  // ---- attention and sampling (native/kernels/attention.h, sampling.h) --------------------------
  pagedAttentionWorkspaceBytes(
    maxNumReqs: number,
    maxNumTokens: number,
    numHeads: number,
    headDim: number,
    maxModelLen: number,
    blockSize: number,
  ): number;
  /** Split-KV decode, one query token per request (hsPagedDecodeAttention). */
  pagedDecodeAttention(...args: PagedAttentionArgs): void;
  /** Causal prefill / mixed batches (hsPagedPrefillAttention); maxQueryLen in tokens. */
  pagedPrefillAttention(...args: [...PagedAttentionArgs, maxQueryLen: number]): void;
  sampleWorkspaceBytes(B: number, V: number): number;
  sample(
    stream: number,
    logits: number,
    B: number,
    V: number,
    temperature: number,
    topK: number,
    topP: number,
    minP: number,
    uniform: number,
    outIds: number,
    workspace: number,
    workspaceBytes: number,
  ): void;
}
