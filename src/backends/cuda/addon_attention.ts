/**
 * Addon typings, attention area: paged attention (native/kernels/attention.h) and the device
 * sampler (sampling.h). Part of the addon's typed surface: import these through addon.ts, the
 * only loader (DESIGN.md §1).
 */
import type { PagedAttentionParams } from "./addon_params.js";
import type { DevicePtr } from "./device_ptr.js";

/** The attention and sampling part of the module object (HisparseNative in addon.ts). */
export interface NativeAttentionApi {
  // ---- attention and sampling (native/kernels/attention.h, sampling.h) --------------------------
  /**
   * Benchmark knob (hsSetDecodeMinSplitTokens): the smallest decode split in tokens for the decode
   * launches that follow in this process (default 256; rounded up to 64-key tiles, at most 4096);
   * tokens <= 0 only reads it. Returns the previous value.
   */
  setDecodeMinSplitTokens(tokens: number): number;
  pagedAttentionWorkspaceBytes(
    maxNumReqs: number,
    maxNumTokens: number,
    numHeads: number,
    headDim: number,
    maxModelLen: number,
    blockSize: number,
  ): number;
  /**
   * Split-KV decode, one query token per request (hsPagedDecodeAttention): the fields of
   * HsPagedAttentionParams (addon_params.ts) by name. qkv bf16 [numTokens, qkvRowStride], kvCache
   * bf16 [numBlocks, 2, blockSize, numKvHeads, headDim], out bf16 [numTokens, numHeads * headDim],
   * queryStartLoc i32 [numReqs + 1], seqLens i32 [numReqs], blockTables i32 [numReqs,
   * maxBlocksPerReq]; maxModelLen in tokens; workspace / workspaceBytes: decode split scratch.
   */
  pagedDecodeAttention(stream: number, params: PagedAttentionParams): void;
  /**
   * Causal prefill / mixed batches (hsPagedPrefillAttention); maxQueryLen in tokens. workspace /
   * workspaceBytes: split-KV scratch of pagedPrefillWorkspaceBytes bytes (less, or none: one pass).
   */
  pagedPrefillAttention(stream: number, params: PagedAttentionParams, maxQueryLen: number): void;
  /**
   * Bytes of split-KV scratch a prefill launch of these sizes uses (hsPagedPrefillWorkspaceBytes;
   * 0: it does not split). maxModelLen: the block-table width in tokens.
   */
  pagedPrefillWorkspaceBytes(
    numReqs: number,
    numTokens: number,
    numHeads: number,
    numKvHeads: number,
    headDim: number,
    maxQueryLen: number,
    maxModelLen: number,
  ): number;
  sampleWorkspaceBytes(B: number, V: number): number;
  sample(
    stream: number,
    logits: DevicePtr,
    B: number,
    V: number,
    temperature: DevicePtr,
    topK: DevicePtr,
    topP: DevicePtr,
    minP: DevicePtr,
    uniform: DevicePtr,
    outIds: DevicePtr,
    workspace: DevicePtr,
    workspaceBytes: number,
  ): void;
}
