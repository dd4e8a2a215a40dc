/**
 * Addon typings, parameter structs: the one field list of each launcher that takes a named
 * parameter object (paged and sparse decode attention, Quest selection, the resolver, absorbed
 * MLA attention, the DSA indexer's logits) instead of positional numbers. The list is the single
 * source of both sides of the ABI:
 * - TS: the object types below are derived from it (`ParamsOf`), so a call site cannot omit,
 *   misname or mistype a field (device addresses are `DevicePtr`);
 * - C++: `native/addon/params.gen.h`, which reads each field of the object by name into the C
 *   struct, is generated from it by `scripts/gen_native_params.ts` (committed).
 * test/unit/backends/cuda/addon_params.test.ts fails when the generated header is stale or when
 * a C struct (`header`) no longer declares exactly these fields in this order. Part of the
 * addon's typed surface: import these through addon.ts, the only loader (DESIGN.md §1).
 */
import type { DevicePtr } from "./device_ptr.js";

/**
 * How a field travels: `ptr` a device address (DevicePtr, NULL_PTR where the C struct allows
 * NULL; C: a pointer), `i32` an integer in int32 range (C: int), `size` a non-negative integer
 * below 2^53 (C: size_t), `f32` a number (C: float).
 */
export type ParamKind = "ptr" | "i32" | "size" | "f32";

/** A C parameter struct: its name, its header, an optional first member `base`, its fields in order. */
export interface ParamStruct {
  readonly struct: string;
  readonly header: string;
  /** A first member `base` of this struct type (its fields sit flat in the JS object). */
  readonly base?: ParamStruct;
  readonly fields: readonly (readonly [name: string, kind: ParamKind])[];
}

/** The JS value of each kind. */
interface KindValue {
  ptr: DevicePtr;
  i32: number;
  size: number;
  f32: number;
}

type OwnParams<S extends ParamStruct> = { [F in S["fields"][number] as F[0]]: KindValue[F[1]] };

/** The parameter object of a struct: one property per field, the base struct's fields included. */
export type ParamsOf<S extends ParamStruct> = OwnParams<S> &
  (S extends { readonly base: infer B extends ParamStruct } ? ParamsOf<B> : unknown);

/** HsPagedAttentionParams: every paged attention launcher (decode, prefill, sparse decode). */
export const PAGED_ATTENTION_PARAMS = {
  struct: "HsPagedAttentionParams",
  header: "native/kernels/attention.h",
  fields: [
    ["qkv", "ptr"],
    ["qkvRowStride", "i32"],
    ["kvCache", "ptr"],
    ["out", "ptr"],
    ["queryStartLoc", "ptr"],
    ["seqLens", "ptr"],
    ["blockTables", "ptr"],
    ["maxBlocksPerReq", "i32"],
    ["numReqs", "i32"],
    ["numTokens", "i32"],
    ["numHeads", "i32"],
    ["numKvHeads", "i32"],
    ["headDim", "i32"],
    ["blockSize", "i32"],
    ["scale", "f32"],
    ["maxModelLen", "i32"],
    ["workspace", "ptr"],
    ["workspaceBytes", "size"],
    ["kvCacheFp8", "i32"],
    ["kScale", "f32"],
    ["vScale", "f32"],
  ],
} as const satisfies ParamStruct;

/** HsSparseDecodeParams: the paged attention fields, then the per-(request, kv head) tables. */
export const SPARSE_DECODE_PARAMS = {
  struct: "HsSparseDecodeParams",
  header: "native/kernels/attention.h",
  base: PAGED_ATTENTION_PARAMS,
  fields: [
    ["headBlockTables", "ptr"],
    ["headSeqLens", "ptr"],
    ["headTableStride", "i32"],
    ["rowFlags", "ptr"],
    ["tokenRow", "ptr"],
    ["onlyFlaggedRows", "i32"],
  ],
} as const satisfies ParamStruct;

/** HsQuestSelectParams (hsQuestSelect). */
export const QUEST_SELECT_PARAMS = {
  struct: "HsQuestSelectParams",
  header: "native/kernels/hisparse.h",
  fields: [
    ["qkv", "ptr"],
    ["qkvRowStride", "i32"],
    ["tokenRow", "ptr"],
    ["digests", "ptr"],
    ["digestDtype", "i32"],
    ["numHostBlocks", "i32"],
    ["seqLens", "ptr"],
    ["rowFlags", "ptr"],
    ["reqSlot", "ptr"],
    ["hostBlockTable", "ptr"],
    ["pinnedTable", "ptr"],
    ["tableStride", "i32"],
    ["numSlots", "i32"],
    ["selPages", "ptr"],
    ["selCount", "ptr"],
    ["scratch", "ptr"],
    ["scratchBytes", "size"],
    ["numReqs", "i32"],
    ["numHeads", "i32"],
    ["numKvHeads", "i32"],
    ["headDim", "i32"],
    ["blockSize", "i32"],
    ["budgetPages", "i32"],
    ["sinkPages", "i32"],
    ["windowPages", "i32"],
    ["digestsPerPage", "i32"],
    ["prevSelected", "ptr"],
    ["overlapP", "f32"],
  ],
} as const satisfies ParamStruct;

/** HsResolveParams (hsResolve). */
export const RESOLVE_PARAMS = {
  struct: "HsResolveParams",
  header: "native/kernels/hisparse.h",
  fields: [
    ["selPages", "ptr"],
    ["selCount", "ptr"],
    ["selStride", "i32"],
    ["rowFlags", "ptr"],
    ["seqLens", "ptr"],
    ["reqSlot", "ptr"],
    ["blockTable", "ptr"],
    ["hostBlockTable", "ptr"],
    ["tableStride", "i32"],
    ["numSlots", "i32"],
    ["hotBlocks", "ptr"],
    ["numHot", "i32"],
    ["lruPage", "ptr"],
    ["lruLastUse", "ptr"],
    ["lruTick", "ptr"],
    ["layer", "i32"],
    ["numLayers", "i32"],
    ["heldCount", "ptr"],
    ["heldPages", "ptr"],
    ["headBlockTables", "ptr"],
    ["headSeqLens", "ptr"],
    ["counters", "ptr"],
    ["kvCache", "ptr"],
    ["numBlocks", "i32"],
    ["hostKv", "ptr"],
    ["numHostBlocks", "i32"],
    ["numReqs", "i32"],
    ["numKvHeads", "i32"],
    ["headDim", "i32"],
    ["blockSize", "i32"],
    ["missSrc", "ptr"],
    ["missDst", "ptr"],
    ["missCount", "ptr"],
    ["hostKvDtype", "i32"],
    ["kScale", "f32"],
    ["vScale", "f32"],
  ],
} as const satisfies ParamStruct;

/** HsRowResolveParams (hsRowResolve: DSA hot rows). */
export const ROW_RESOLVE_PARAMS = {
  struct: "HsRowResolveParams",
  header: "native/kernels/hisparse.h",
  fields: [
    ["topk", "ptr"],
    ["K", "i32"],
    ["tokenRow", "ptr"],
    ["rowFlags", "ptr"],
    ["reqSlot", "ptr"],
    ["seqLens", "ptr"],
    ["blockTable", "ptr"],
    ["hostBlockTable", "ptr"],
    ["tableStride", "i32"],
    ["numSlots", "i32"],
    ["hotBlocks", "ptr"],
    ["numHotBlocks", "i32"],
    ["lruPos", "ptr"],
    ["lruLastUse", "ptr"],
    ["lruTick", "ptr"],
    ["source", "i32"],
    ["numSources", "i32"],
    ["heldCount", "ptr"],
    ["heldPages", "ptr"],
    ["viewTopk", "ptr"],
    ["viewTable", "ptr"],
    ["viewSeqLens", "ptr"],
    ["missSrc", "ptr"],
    ["missDst", "ptr"],
    ["missCount", "ptr"],
    ["counters", "ptr"],
    ["numReqs", "i32"],
    ["blockSize", "i32"],
    ["numBlocks", "i32"],
    ["numHostBlocks", "i32"],
  ],
} as const satisfies ParamStruct;

/** HsRowViewMergeParams (hsRowViewMerge: the attention metadata of a step partly resolved by hsRowResolve). */
export const ROW_VIEW_MERGE_PARAMS = {
  struct: "HsRowViewMergeParams",
  header: "native/kernels/hisparse.h",
  fields: [
    ["topk", "ptr"],
    ["blockTables", "ptr"],
    ["seqLens", "ptr"],
    ["rowFlags", "ptr"],
    ["reqSlot", "ptr"],
    ["tokenRow", "ptr"],
    ["viewTopk", "ptr"],
    ["viewTable", "ptr"],
    ["viewSeqLens", "ptr"],
    ["outTopk", "ptr"],
    ["outTables", "ptr"],
    ["outSeqLens", "ptr"],
    ["numReqs", "i32"],
    ["numTokens", "i32"],
    ["K", "i32"],
    ["tableStride", "i32"],
    ["outStride", "i32"],
    ["numSlots", "i32"],
  ],
} as const satisfies ParamStruct;

/** HsRowSelectionOverlapParams (hsRowSelectionOverlap: the benchmark-only DSA selection overlap). */
export const ROW_SELECTION_OVERLAP_PARAMS = {
  struct: "HsRowSelectionOverlapParams",
  header: "native/kernels/hisparse.h",
  fields: [
    ["topk", "ptr"],
    ["out", "ptr"],
    ["K", "i32"],
    ["rowFlags", "ptr"],
    ["reqSlot", "ptr"],
    ["tokenRow", "ptr"],
    ["seqLens", "ptr"],
    ["prevSelection", "ptr"],
    ["prevSeqLen", "ptr"],
    ["source", "i32"],
    ["numSources", "i32"],
    ["numSlots", "i32"],
    ["numReqs", "i32"],
    ["numTokens", "i32"],
    ["p", "f32"],
  ],
} as const satisfies ParamStruct;

/** HsMlaAttentionParams (hsMlaAttention, absorbed MLA attention). */
export const MLA_ATTENTION_PARAMS = {
  struct: "HsMlaAttentionParams",
  header: "native/kernels/mla.h",
  fields: [
    ["qAbs", "ptr"],
    ["latentCache", "ptr"],
    ["cacheDtype", "i32"],
    ["oLat", "ptr"],
    ["queryStartLoc", "ptr"],
    ["seqLens", "ptr"],
    ["blockTables", "ptr"],
    ["maxBlocksPerReq", "i32"],
    ["numReqs", "i32"],
    ["numTokens", "i32"],
    ["numHeads", "i32"],
    ["rank", "i32"],
    ["ropeDim", "i32"],
    ["blockSize", "i32"],
    ["scale", "f32"],
    ["topkIndices", "ptr"],
    ["topkStride", "i32"],
    ["maxContext", "i32"],
    ["workspace", "ptr"],
    ["workspaceBytes", "size"],
  ],
} as const satisfies ParamStruct;

/** HsMlaIndexerParams (hsMlaIndexerLogits, the DSA lightning indexer's logits). */
export const MLA_INDEXER_PARAMS = {
  struct: "HsMlaIndexerParams",
  header: "native/kernels/mla.h",
  fields: [
    ["q", "ptr"],
    ["headWeights", "ptr"],
    ["qDtype", "i32"],
    ["indexKeys", "ptr"],
    ["keyDtype", "i32"],
    ["logits", "ptr"],
    ["queryStartLoc", "ptr"],
    ["seqLens", "ptr"],
    ["blockTables", "ptr"],
    ["maxBlocksPerReq", "i32"],
    ["numReqs", "i32"],
    ["numTokens", "i32"],
    ["numHeads", "i32"],
    ["headDim", "i32"],
    ["blockSize", "i32"],
    ["softmaxScale", "f32"],
    ["headWeightScale", "f32"],
    ["width", "i32"],
  ],
} as const satisfies ParamStruct;

/** Every parameter struct, in the order params.gen.h declares their readers. */
export const NATIVE_PARAM_STRUCTS: readonly ParamStruct[] = [
  PAGED_ATTENTION_PARAMS,
  SPARSE_DECODE_PARAMS,
  QUEST_SELECT_PARAMS,
  RESOLVE_PARAMS,
  ROW_RESOLVE_PARAMS,
  ROW_VIEW_MERGE_PARAMS,
  ROW_SELECTION_OVERLAP_PARAMS,
  MLA_ATTENTION_PARAMS,
  MLA_INDEXER_PARAMS,
];

export type PagedAttentionParams = ParamsOf<typeof PAGED_ATTENTION_PARAMS>;
export type SparseDecodeParams = ParamsOf<typeof SPARSE_DECODE_PARAMS>;
export type QuestSelectParams = ParamsOf<typeof QUEST_SELECT_PARAMS>;
export type ResolveParams = ParamsOf<typeof RESOLVE_PARAMS>;
export type RowResolveParams = ParamsOf<typeof ROW_RESOLVE_PARAMS>;
export type RowViewMergeParams = ParamsOf<typeof ROW_VIEW_MERGE_PARAMS>;
export type RowSelectionOverlapParams = ParamsOf<typeof ROW_SELECTION_OVERLAP_PARAMS>;
export type MlaAttentionParams = ParamsOf<typeof MLA_ATTENTION_PARAMS>;
export type MlaIndexerParams = ParamsOf<typeof MLA_INDEXER_PARAMS>;
