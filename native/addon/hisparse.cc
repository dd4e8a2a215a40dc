// N-API functions over the HiSparse launchers (native/kernels/hisparse.h) and the per-head decode
// attention (hsSparseDecodeAttention, attention.h). Flat functions of numbers, stream first, in
// the order of the C structs' fields; src/backends/cuda/addon.ts types them. Every launch is
// checked (common.h checkLaunch).
#include "../kernels/attention.h"
#include "../kernels/hisparse.h"
#include "common.h"

namespace hs {
namespace {

/** swapInPages(stream, dst, src, srcOffsets, dstOffsets, count, maxCopies, bytesPerCopy). */
Napi::Value SwapInPages(const Napi::CallbackInfo& info) {
  Args a(info, 8, "swapInPages");
  HS_LAUNCH(hsSwapInPages, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int64_t>(3), a.as<const int64_t>(4),
            a.as<const int32_t>(5), a.i32(6), a.size(7));
  return info.Env().Undefined();
}

/** reshapeAndCacheDigest(stream, qkv, kvCache, slotMapping, digests, hostSlotMapping, numTokens, rowStride,
 *  numHeads, numKvHeads, headDim, blockSize, numBlocks, numHostBlocks). */
Napi::Value ReshapeAndCacheDigest(const Napi::CallbackInfo& info) {
  Args a(info, 14, "reshapeAndCacheDigest");
  HS_LAUNCH(hsReshapeAndCacheDigest, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int32_t>(3), a.ptr(4),
            a.as<const int32_t>(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12),
            a.i32(13));
  return info.Env().Undefined();
}

/** questSelectScratchBytes(numReqs, numKvHeads, tableStride). */
Napi::Value QuestSelectScratchBytes(const Napi::CallbackInfo& info) {
  Args a(info, 3, "questSelectScratchBytes");
  return Napi::Number::New(info.Env(), static_cast<double>(hsQuestSelectScratchBytes(a.i32(0), a.i32(1), a.i32(2))));
}

/** questSelect(stream, <the 24 fields of HsQuestSelectParams in order>). */
Napi::Value QuestSelect(const Napi::CallbackInfo& info) {
  Args a(info, 25, "questSelect");
  HsQuestSelectParams p{};
  p.qkv = a.ptr(1);
  p.qkvRowStride = a.i32(2);
  p.tokenRow = a.as<const int32_t>(3);
  p.digests = a.ptr(4);
  p.numHostBlocks = a.i32(5);
  p.seqLens = a.as<const int32_t>(6);
  p.rowFlags = a.as<const int32_t>(7);
  p.reqSlot = a.as<const int32_t>(8);
  p.hostBlockTable = a.as<const int32_t>(9);
  p.pinnedTable = a.as<const int32_t>(10);
  p.tableStride = a.i32(11);
  p.numSlots = a.i32(12);
  p.selPages = a.as<int32_t>(13);
  p.selCount = a.as<int32_t>(14);
  p.scratch = a.ptr(15);
  p.scratchBytes = a.size(16);
  p.numReqs = a.i32(17);
  p.numHeads = a.i32(18);
  p.numKvHeads = a.i32(19);
  p.headDim = a.i32(20);
  p.blockSize = a.i32(21);
  p.budgetPages = a.i32(22);
  p.sinkPages = a.i32(23);
  p.windowPages = a.i32(24);
  checkLaunch(hsQuestSelect(&p, a.stream(0)), "hsQuestSelect", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** resolve(stream, <the 30 fields of HsResolveParams in order>). */
Napi::Value Resolve(const Napi::CallbackInfo& info) {
  Args a(info, 31, "resolve");
  HsResolveParams p{};
  p.selPages = a.as<const int32_t>(1);
  p.selCount = a.as<const int32_t>(2);
  p.selStride = a.i32(3);
  p.rowFlags = a.as<const int32_t>(4);
  p.seqLens = a.as<const int32_t>(5);
  p.reqSlot = a.as<const int32_t>(6);
  p.blockTable = a.as<const int32_t>(7);
  p.hostBlockTable = a.as<const int32_t>(8);
  p.tableStride = a.i32(9);
  p.numSlots = a.i32(10);
  p.hotBlocks = a.as<const int32_t>(11);
  p.numHot = a.i32(12);
  p.lruPage = a.as<int32_t>(13);
  p.lruLastUse = a.as<int32_t>(14);
  p.lruTick = a.as<int32_t>(15);
  p.layer = a.i32(16);
  p.numLayers = a.i32(17);
  p.heldCount = a.as<int32_t>(18);
  p.heldPages = a.as<int32_t>(19);
  p.headBlockTables = a.as<int32_t>(20);
  p.headSeqLens = a.as<int32_t>(21);
  p.counters = a.as<unsigned long long>(22);
  p.kvCache = a.ptr(23);
  p.numBlocks = a.i32(24);
  p.hostKv = a.ptr(25);
  p.numHostBlocks = a.i32(26);
  p.numReqs = a.i32(27);
  p.numKvHeads = a.i32(28);
  p.headDim = a.i32(29);
  p.blockSize = a.i32(30);
  checkLaunch(hsResolve(&p, a.stream(0)), "hsResolve", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** mirrorPages(stream, kvCaches, hostTiers, blockIds, hostBlockIds, count, numLayers, numKvHeads, headDim,
 *  blockSize, numBlocks, numHostBlocks). */
Napi::Value MirrorPages(const Napi::CallbackInfo& info) {
  Args a(info, 12, "mirrorPages");
  HS_LAUNCH(hsMirrorPages, a.stream(0), a.as<const uint64_t>(1), a.as<const uint64_t>(2), a.as<const int32_t>(3),
            a.as<const int32_t>(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

/** sparseDecodeAttention(<the 19 pagedDecodeAttention arguments>, headBlockTables, headSeqLens,
 *  headTableStride, rowFlags, tokenRow, onlyFlaggedRows). */
Napi::Value SparseDecodeAttention(const Napi::CallbackInfo& info) {
  Args a(info, 25, "sparseDecodeAttention");
  HsSparseDecodeParams sp{};
  HsPagedAttentionParams& p = sp.base;
  p.qkv = a.as<const __nv_bfloat16>(1);
  p.qkvRowStride = a.i32(2);
  p.kvCache = a.as<const __nv_bfloat16>(3);
  p.out = a.as<__nv_bfloat16>(4);
  p.queryStartLoc = a.as<const int>(5);
  p.seqLens = a.as<const int>(6);
  p.blockTables = a.as<const int>(7);
  p.maxBlocksPerReq = a.i32(8);
  p.numReqs = a.i32(9);
  p.numTokens = a.i32(10);
  p.numHeads = a.i32(11);
  p.numKvHeads = a.i32(12);
  p.headDim = a.i32(13);
  p.blockSize = a.i32(14);
  p.scale = a.f32(15);
  p.maxModelLen = a.i32(16);
  p.workspace = a.ptr(17);
  p.workspaceBytes = a.size(18);
  sp.headBlockTables = a.as<const int>(19);
  sp.headSeqLens = a.as<const int>(20);
  sp.headTableStride = a.i32(21);
  sp.rowFlags = a.as<const int>(22);
  sp.tokenRow = a.as<const int>(23);
  sp.onlyFlaggedRows = a.i32(24);
  checkLaunch(hsSparseDecodeAttention(&sp, a.stream(0)), "hsSparseDecodeAttention", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

}  // namespace

void initHiSparse(Napi::Env env, Napi::Object exports) {
  exports.Set("swapInPages", Napi::Function::New(env, SwapInPages, "swapInPages"));
  exports.Set("reshapeAndCacheDigest", Napi::Function::New(env, ReshapeAndCacheDigest, "reshapeAndCacheDigest"));
  exports.Set("questSelectScratchBytes", Napi::Function::New(env, QuestSelectScratchBytes, "questSelectScratchBytes"));
  exports.Set("questSelect", Napi::Function::New(env, QuestSelect, "questSelect"));
  exports.Set("resolve", Napi::Function::New(env, Resolve, "resolve"));
  exports.Set("mirrorPages", Napi::Function::New(env, MirrorPages, "mirrorPages"));
  exports.Set("sparseDecodeAttention", Napi::Function::New(env, SparseDecodeAttention, "sparseDecodeAttention"));
}

}  // namespace hs
