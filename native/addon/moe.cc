// Flat N-API functions over the mixture-of-experts launchers of native/kernels/moe.h (routing,
// permutation, grouped GEMM, un-permute) and moe_decode.h (the small-batch path). Same conventions
// as launchers.cc: numbers only, stream first, then the C launcher's arguments in order (optional
// pointers: 0 = null); flags are booleans; src/backends/cuda/addon_moe.ts types them.
#include "../kernels/moe.h"
#include "../kernels/moe_decode.h"
#include "common.h"

namespace hs {
namespace {

Napi::Value MoeRoute(const Napi::CallbackInfo& info) {
  Args a(info, 13, "moeRoute");
  HS_LAUNCH(hsMoeRoute, a.stream(0), a.as<const float>(1), a.as<const float>(2), a.as<int32_t>(3),
            a.as<float>(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.flag(9) ? 1 : 0, a.i32(10), a.i32(11),
            a.f64(12));
  return info.Env().Undefined();
}

Napi::Value MoePermuteScratchBytes(const Napi::CallbackInfo& info) {
  Args a(info, 3, "moePermuteScratchBytes");
  return Napi::Number::New(info.Env(), static_cast<double>(hsMoePermuteScratchBytes(a.i32(0), a.i32(1), a.i32(2))));
}

Napi::Value MoePermute(const Napi::CallbackInfo& info) {
  Args a(info, 12, "moePermute");
  HS_LAUNCH(hsMoePermute, a.stream(0), a.ptr(1), a.as<const int32_t>(2), a.ptr(3), a.as<int32_t>(4),
            a.as<int32_t>(5), a.ptr(6), a.size(7), a.i32(8), a.size(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

Napi::Value MoeGroupedGemm(const Napi::CallbackInfo& info) {
  Args a(info, 10, "moeGroupedGemm");
  HS_LAUNCH(hsMoeGroupedGemm, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.as<const int32_t>(4), a.i32(5), a.i32(6),
            a.i32(7), a.i32(8), a.flag(9) ? 1 : 0);
  return info.Env().Undefined();
}

Napi::Value MoeUnpermute(const Napi::CallbackInfo& info) {
  Args a(info, 11, "moeUnpermute");
  HS_LAUNCH(hsMoeUnpermute, a.stream(0), a.ptr(1), a.as<const int32_t>(2), a.as<const float>(3),
            a.ptr(4), a.ptr(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10));
  return info.Env().Undefined();
}

Napi::Value MoeDecodeSyncInts(const Napi::CallbackInfo& info) {
  Args a(info, 1, "moeDecodeSyncInts");
  return Napi::Number::New(info.Env(), static_cast<double>(hsMoeDecodeSyncInts(a.i32(0))));
}

Napi::Value MoeDecodePlanInts(const Napi::CallbackInfo& info) {
  Args a(info, 3, "moeDecodePlanInts");
  return Napi::Number::New(info.Env(), hsMoeDecodePlanInts(a.i32(0), a.i32(1), a.i32(2)));
}

Napi::Value MoeDecodeRoute(const Napi::CallbackInfo& info) {
  Args a(info, 18, "moeDecodeRoute");
  HS_LAUNCH(hsMoeDecodeRoute, a.stream(0), a.ptr(1), a.ptr(2), a.as<const float>(3), a.as<float>(4),
            a.as<int32_t>(5), a.as<float>(6), a.as<int32_t>(7), a.as<int32_t>(8), a.i32(9), a.i32(10), a.i32(11),
            a.i32(12), a.i32(13), a.flag(14) ? 1 : 0, a.i32(15), a.i32(16), a.f64(17));
  return info.Env().Undefined();
}

Napi::Value MoeDecodeGateUp(const Napi::CallbackInfo& info) {
  Args a(info, 12, "moeDecodeGateUp");
  HS_LAUNCH(hsMoeDecodeGateUp, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.as<const int32_t>(4), a.ptr(5), a.i32(6),
            a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

Napi::Value MoeDecodeDown(const Napi::CallbackInfo& info) {
  Args a(info, 13, "moeDecodeDown");
  HS_LAUNCH(hsMoeDecodeDown, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.as<const int32_t>(4),
            a.as<const float>(5), a.ptr(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12));
  return info.Env().Undefined();
}

}  // namespace

void initMoe(Napi::Env env, Napi::Object exports) {
  exports.Set("moeRoute", Napi::Function::New(env, MoeRoute, "moeRoute"));
  exports.Set("moePermuteScratchBytes", Napi::Function::New(env, MoePermuteScratchBytes, "moePermuteScratchBytes"));
  exports.Set("moePermute", Napi::Function::New(env, MoePermute, "moePermute"));
  exports.Set("moeGroupedGemm", Napi::Function::New(env, MoeGroupedGemm, "moeGroupedGemm"));
  exports.Set("moeUnpermute", Napi::Function::New(env, MoeUnpermute, "moeUnpermute"));
  exports.Set("moeDecodeSyncInts", Napi::Function::New(env, MoeDecodeSyncInts, "moeDecodeSyncInts"));
  exports.Set("moeDecodePlanInts", Napi::Function::New(env, MoeDecodePlanInts, "moeDecodePlanInts"));
  exports.Set("moeDecodeRoute", Napi::Function::New(env, MoeDecodeRoute, "moeDecodeRoute"));
  exports.Set("moeDecodeGateUp", Napi::Function::New(env, MoeDecodeGateUp, "moeDecodeGateUp"));
  exports.Set("moeDecodeDown", Napi::Function::New(env, MoeDecodeDown, "moeDecodeDown"));
}

}  // namespace hs
