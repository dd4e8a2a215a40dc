// Flat N-API functions over the MLA and DSA indexer launchers of native/kernels/mla.h. Same
// conventions as launchers.cc: numbers only, stream first, then the C launcher's arguments in
// order (optional pointers: 0 = null); the attention and indexer launchers take a named parameter
// object (params.gen.h). src/backends/cuda/addon_mla.ts types them.
#include "../kernels/mla.h"
#include "common.h"
#include "params.gen.h"

namespace hs {
namespace {

Napi::Value MlaSliceColumns(const Napi::CallbackInfo& info) {
  Args a(info, 8, "mlaSliceColumns");
  HS_LAUNCH(hsMlaSliceColumns, a.stream(0), a.ptr(1), a.ptr(2), a.i32(3), a.i32(4), a.i32(5), a.i32(6), a.i32(7));
  return info.Env().Undefined();
}

Napi::Value MlaWriteRows(const Napi::CallbackInfo& info) {
  Args a(info, 11, "mlaWriteRows");
  HS_LAUNCH(hsMlaWriteRows, a.stream(0), a.ptr(1), a.i32(2), a.ptr(3), a.i32(4), a.as<const int32_t>(5), a.i32(6),
            a.i32(7), a.i32(8), a.i32(9), a.i32(10));
  return info.Env().Undefined();
}

Napi::Value MlaRotaryStrided(const Napi::CallbackInfo& info) {
  Args a(info, 13, "mlaRotaryStrided");
  HS_LAUNCH(hsMlaRotaryStrided, a.stream(0), a.ptr(1), a.i32(2), a.as<const int32_t>(3), a.as<const float>(4),
            a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.flag(12) ? 1 : 0);
  return info.Env().Undefined();
}

Napi::Value MlaLayerNorm(const Napi::CallbackInfo& info) {
  Args a(info, 10, "mlaLayerNorm");
  HS_LAUNCH(hsMlaLayerNorm, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.ptr(4), a.i32(5), a.i32(6), a.f32(7),
            a.i32(8), a.i32(9));
  return info.Env().Undefined();
}

Napi::Value MlaAbsorbQuery(const Napi::CallbackInfo& info) {
  Args a(info, 11, "mlaAbsorbQuery");
  HS_LAUNCH(hsMlaAbsorbQuery, a.stream(0), a.ptr(1), a.i32(2), a.ptr(3), a.as<float>(4), a.i32(5), a.i32(6),
            a.i32(7), a.i32(8), a.i32(9), a.i32(10));
  return info.Env().Undefined();
}

Napi::Value MlaOutProject(const Napi::CallbackInfo& info) {
  Args a(info, 10, "mlaOutProject");
  HS_LAUNCH(hsMlaOutProject, a.stream(0), a.as<const float>(1), a.ptr(2), a.ptr(3), a.i32(4), a.i32(5), a.i32(6),
            a.i32(7), a.i32(8), a.i32(9));
  return info.Env().Undefined();
}

Napi::Value MlaAttentionWorkspaceBytes(const Napi::CallbackInfo& info) {
  Args a(info, 4, "mlaAttentionWorkspaceBytes");
  return Napi::Number::New(info.Env(),
                           static_cast<double>(hsMlaAttentionWorkspaceBytes(a.i32(0), a.i32(1), a.i32(2), a.i32(3))));
}

Napi::Value MlaAttention(const Napi::CallbackInfo& info) {
  Args a(info, 2, "mlaAttention");
  HsMlaAttentionParams p{};
  readParams(ParamObject(info, 1, "mlaAttention"), p);
  HS_LAUNCH(hsMlaAttention, a.stream(0), &p);
  return info.Env().Undefined();
}

Napi::Value MlaIndexerLogits(const Napi::CallbackInfo& info) {
  Args a(info, 2, "mlaIndexerLogits");
  HsMlaIndexerParams p{};
  readParams(ParamObject(info, 1, "mlaIndexerLogits"), p);
  HS_LAUNCH(hsMlaIndexerLogits, a.stream(0), &p);
  return info.Env().Undefined();
}

Napi::Value MlaTopk(const Napi::CallbackInfo& info) {
  Args a(info, 7, "mlaTopk");
  HS_LAUNCH(hsMlaTopk, a.stream(0), a.as<const float>(1), a.as<const int32_t>(2), a.as<int32_t>(3), a.i32(4),
            a.i32(5), a.i32(6));
  return info.Env().Undefined();
}

Napi::Value MlaGatherLatent(const Napi::CallbackInfo& info) {
  Args a(info, 19, "mlaGatherLatent");
  HS_LAUNCH(hsMlaGatherLatent, a.stream(0), a.ptr(1), a.i32(2), a.as<const int32_t>(3), a.i32(4), a.ptr(5),
            a.as<const int32_t>(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12), a.ptr(13),
            a.ptr(14), a.i32(15), a.i32(16), a.i32(17), a.i32(18));
  return info.Env().Undefined();
}

Napi::Value MlaPrefillSoftmax(const Napi::CallbackInfo& info) {
  Args a(info, 11, "mlaPrefillSoftmax");
  HS_LAUNCH(hsMlaPrefillSoftmax, a.stream(0), a.as<const float>(1), a.ptr(2), a.i32(3), a.i32(4), a.i32(5),
            a.i32(6), a.i32(7), a.i32(8), a.as<const int32_t>(9), a.i32(10));
  return info.Env().Undefined();
}

}  // namespace

void initMla(Napi::Env env, Napi::Object exports) {
  exports.Set("mlaSliceColumns", Napi::Function::New(env, MlaSliceColumns, "mlaSliceColumns"));
  exports.Set("mlaWriteRows", Napi::Function::New(env, MlaWriteRows, "mlaWriteRows"));
  exports.Set("mlaRotaryStrided", Napi::Function::New(env, MlaRotaryStrided, "mlaRotaryStrided"));
  exports.Set("mlaLayerNorm", Napi::Function::New(env, MlaLayerNorm, "mlaLayerNorm"));
  exports.Set("mlaAbsorbQuery", Napi::Function::New(env, MlaAbsorbQuery, "mlaAbsorbQuery"));
  exports.Set("mlaOutProject", Napi::Function::New(env, MlaOutProject, "mlaOutProject"));
  exports.Set("mlaAttentionWorkspaceBytes",
              Napi::Function::New(env, MlaAttentionWorkspaceBytes, "mlaAttentionWorkspaceBytes"));
  exports.Set("mlaAttention", Napi::Function::New(env, MlaAttention, "mlaAttention"));
  exports.Set("mlaIndexerLogits", Napi::Function::New(env, MlaIndexerLogits, "mlaIndexerLogits"));
  exports.Set("mlaTopk", Napi::Function::New(env, MlaTopk, "mlaTopk"));
  exports.Set("mlaGatherLatent", Napi::Function::New(env, MlaGatherLatent, "mlaGatherLatent"));
  exports.Set("mlaPrefillSoftmax", Napi::Function::New(env, MlaPrefillSoftmax, "mlaPrefillSoftmax"));
}

}  // namespace hs
