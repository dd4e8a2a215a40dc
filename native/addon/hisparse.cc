// N-API functions over the HiSparse launchers (native/kernels/hisparse.h) and the per-head decode
// attention (hsSparseDecodeAttention, attention.h), stream first. questSelect, resolve and
// sparseDecodeAttention take their C struct's fields as one named object, read by the generated
// readParams (params.gen.h, from the field list of src/backends/cuda/addon_params.ts); the others
// numbers in the C launcher's order. src/backends/cuda/addon.ts types them. Every launch is
// checked (common.h checkLaunch).
#include "../kernels/attention.h"
#include "../kernels/hisparse.h"
#include "common.h"
#include "params.gen.h"

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
 *  numHeads, numKvHeads, headDim, blockSize, digestTokens, numBlocks, numHostBlocks, digestDtype). */
Napi::Value ReshapeAndCacheDigest(const Napi::CallbackInfo& info) {
  Args a(info, 16, "reshapeAndCacheDigest");
  HS_LAUNCH(hsReshapeAndCacheDigest, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int32_t>(3), a.ptr(4),
            a.as<const int32_t>(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12),
            a.i32(13), a.i32(14), a.i32(15));
  return info.Env().Undefined();
}

/** questSelectScratchBytes(numReqs, numKvHeads, tableStride). */
Napi::Value QuestSelectScratchBytes(const Napi::CallbackInfo& info) {
  Args a(info, 3, "questSelectScratchBytes");
  return Napi::Number::New(info.Env(), static_cast<double>(hsQuestSelectScratchBytes(a.i32(0), a.i32(1), a.i32(2))));
}

/** questSelect(stream, params: the fields of HsQuestSelectParams by name). */
Napi::Value QuestSelect(const Napi::CallbackInfo& info) {
  Args a(info, 2, "questSelect");
  HsQuestSelectParams p{};
  readParams(ParamObject(info, 1, "questSelect"), p);
  checkLaunch(hsQuestSelect(&p, a.stream(0)), "hsQuestSelect", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** resolve(stream, params: the fields of HsResolveParams by name). */
Napi::Value Resolve(const Napi::CallbackInfo& info) {
  Args a(info, 2, "resolve");
  HsResolveParams p{};
  readParams(ParamObject(info, 1, "resolve"), p);
  checkLaunch(hsResolve(&p, a.stream(0)), "hsResolve", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** rowResolve(stream, params: the fields of HsRowResolveParams by name): DSA hot rows. */
Napi::Value RowResolve(const Napi::CallbackInfo& info) {
  Args a(info, 2, "rowResolve");
  HsRowResolveParams p{};
  readParams(ParamObject(info, 1, "rowResolve"), p);
  checkLaunch(hsRowResolve(&p, a.stream(0)), "hsRowResolve", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** rowViewMerge(stream, params: the fields of HsRowViewMergeParams by name): a partly resolved step's MLA metadata. */
Napi::Value RowViewMerge(const Napi::CallbackInfo& info) {
  Args a(info, 2, "rowViewMerge");
  HsRowViewMergeParams p{};
  readParams(ParamObject(info, 1, "rowViewMerge"), p);
  checkLaunch(hsRowViewMerge(&p, a.stream(0)), "hsRowViewMerge", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** rowSelectionOverlap(stream, params: the fields of HsRowSelectionOverlapParams by name): benchmarks only. */
Napi::Value RowSelectionOverlap(const Napi::CallbackInfo& info) {
  Args a(info, 2, "rowSelectionOverlap");
  HsRowSelectionOverlapParams p{};
  readParams(ParamObject(info, 1, "rowSelectionOverlap"), p);
  checkLaunch(hsRowSelectionOverlap(&p, a.stream(0)), "hsRowSelectionOverlap", a.stream(0), __FILE__, __LINE__);
  return info.Env().Undefined();
}

/** rowCopy(stream, cache, hostRows, missSrc, missDst, missCount, rowFlags, numReqs, K, rowBytes, numDeviceSlots,
 *  numHostSlots): one layer's copy pass of an hsRowResolve plan. */
Napi::Value RowCopy(const Napi::CallbackInfo& info) {
  Args a(info, 12, "rowCopy");
  HS_LAUNCH(hsRowCopy, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int32_t>(3), a.as<const int32_t>(4),
            a.as<const int32_t>(5), a.as<const int32_t>(6), a.i32(7), a.i32(8), a.size(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

/** mirrorPages(stream, kvCaches, hostTiers, blockIds, hostBlockIds, count, numLayers, numKvHeads, headDim,
 *  blockSize, numBlocks, numHostBlocks, hostKvDtype, kScale, vScale). */
Napi::Value MirrorPages(const Napi::CallbackInfo& info) {
  Args a(info, 15, "mirrorPages");
  HS_LAUNCH(hsMirrorPages, a.stream(0), a.as<const uint64_t>(1), a.as<const uint64_t>(2), a.as<const int32_t>(3),
            a.as<const int32_t>(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12),
            a.f32(13), a.f32(14));
  return info.Env().Undefined();
}

/** loadPages(stream, ...): hsLoadPages, the arguments of mirrorPages. */
Napi::Value LoadPages(const Napi::CallbackInfo& info) {
  Args a(info, 15, "loadPages");
  HS_LAUNCH(hsLoadPages, a.stream(0), a.as<const uint64_t>(1), a.as<const uint64_t>(2), a.as<const int32_t>(3),
            a.as<const int32_t>(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12),
            a.f32(13), a.f32(14));
  return info.Env().Undefined();
}

/** sparseDecodeAttention(stream, params: the fields of HsSparseDecodeParams, base included, by name). */
Napi::Value SparseDecodeAttention(const Napi::CallbackInfo& info) {
  Args a(info, 2, "sparseDecodeAttention");
  HsSparseDecodeParams p{};
  readParams(ParamObject(info, 1, "sparseDecodeAttention"), p);
  checkLaunch(hsSparseDecodeAttention(&p, a.stream(0)), "hsSparseDecodeAttention", a.stream(0), __FILE__, __LINE__);
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
  exports.Set("rowResolve", Napi::Function::New(env, RowResolve, "rowResolve"));
  exports.Set("rowCopy", Napi::Function::New(env, RowCopy, "rowCopy"));
  exports.Set("rowViewMerge", Napi::Function::New(env, RowViewMerge, "rowViewMerge"));
  exports.Set("rowSelectionOverlap", Napi::Function::New(env, RowSelectionOverlap, "rowSelectionOverlap"));
  exports.Set("loadPages", Napi::Function::New(env, LoadPages, "loadPages"));
  exports.Set("sparseDecodeAttention", Napi::Function::New(env, SparseDecodeAttention, "sparseDecodeAttention"));
}

}  // namespace hs
