// Flat N-API functions, one per kernel launcher of native/kernels/kernels.h. Arguments are
// numbers (addresses, sizes, dtype codes) in the order of the C launcher, with the stream first;
// src/backends/cuda/addon.ts types them. Every launch is checked (common.h checkLaunch).
#include "../kernels/gemv.h"
#include "../kernels/kernels.h"
#include "common.h"

namespace hs {
namespace {

Napi::Value GatherRows(const Napi::CallbackInfo& info) {
  Args a(info, 8, "gatherRows");
  HS_LAUNCH(hsGatherRows, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int32_t>(3), a.i32(4), a.i32(5), a.size(6),
            a.i32(7));
  return info.Env().Undefined();
}

Napi::Value RmsNorm(const Napi::CallbackInfo& info) {
  Args a(info, 9, "rmsNorm");
  HS_LAUNCH(hsRmsNorm, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.i32(4), a.i32(5), a.f32(6), a.i32(7), a.i32(8));
  return info.Env().Undefined();
}

Napi::Value FusedAddRmsNorm(const Napi::CallbackInfo& info) {
  Args a(info, 9, "fusedAddRmsNorm");
  HS_LAUNCH(hsFusedAddRmsNorm, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.i32(4), a.i32(5), a.f32(6), a.i32(7),
            a.i32(8));
  return info.Env().Undefined();
}

Napi::Value QkNorm(const Napi::CallbackInfo& info) {
  Args a(info, 12, "qkNorm");
  HS_LAUNCH(hsQkNorm, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.i32(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8),
            a.f32(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

Napi::Value QkNormRotaryEmbedding(const Napi::CallbackInfo& info) {
  Args a(info, 16, "qkNormRotaryEmbedding");
  HS_LAUNCH(hsQkNormRotaryEmbedding, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.as<const int32_t>(4),
            a.as<const float>(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12), a.f32(13),
            a.i32(14), a.i32(15));
  return info.Env().Undefined();
}

Napi::Value RotaryEmbedding(const Napi::CallbackInfo& info) {
  Args a(info, 11, "rotaryEmbedding");
  HS_LAUNCH(hsRotaryEmbedding, a.stream(0), a.ptr(1), a.as<const int32_t>(2), a.as<const float>(3), a.i32(4),
            a.i32(5), a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10));
  return info.Env().Undefined();
}

Napi::Value SiluAndMul(const Napi::CallbackInfo& info) {
  Args a(info, 6, "siluAndMul");
  HS_LAUNCH(hsSiluAndMul, a.stream(0), a.ptr(1), a.ptr(2), a.i32(3), a.i32(4), a.i32(5));
  return info.Env().Undefined();
}

Napi::Value ReshapeAndCache(const Napi::CallbackInfo& info) {
  Args a(info, 12, "reshapeAndCache");
  HS_LAUNCH(hsReshapeAndCache, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int32_t>(3), a.i32(4), a.i32(5),
            a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

Napi::Value ReshapeAndCacheFp8(const Napi::CallbackInfo& info) {
  Args a(info, 13, "reshapeAndCacheFp8");
  HS_LAUNCH(hsReshapeAndCacheFp8, a.stream(0), a.ptr(1), a.ptr(2), a.as<const int32_t>(3), a.i32(4), a.i32(5),
            a.i32(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.f32(11), a.f32(12));
  return info.Env().Undefined();
}

Napi::Value KvAmax(const Napi::CallbackInfo& info) {
  Args a(info, 9, "kvAmax");
  HS_LAUNCH(hsKvAmax, a.stream(0), a.ptr(1), a.as<const int32_t>(2), a.i32(3), a.i32(4), a.i32(5), a.i32(6),
            a.i32(7), a.ptr(8));
  return info.Env().Undefined();
}

Napi::Value BiasAdd(const Napi::CallbackInfo& info) {
  Args a(info, 7, "biasAdd");
  HS_LAUNCH(hsBiasAdd, a.stream(0), a.ptr(1), a.ptr(2), a.i32(3), a.i32(4), a.i32(5), a.i32(6));
  return info.Env().Undefined();
}

Napi::Value Cast(const Napi::CallbackInfo& info) {
  Args a(info, 6, "cast");
  HS_LAUNCH(hsCast, a.stream(0), a.ptr(1), a.i32(2), a.ptr(3), a.i32(4), a.size(5));
  return info.Env().Undefined();
}

Napi::Value DenseGemv(const Napi::CallbackInfo& info) {
  Args a(info, 12, "denseGemv");
  HS_LAUNCH(hsDenseGemv, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.ptr(4), a.i32(5), a.i32(6), a.i32(7), a.i32(8),
            a.i32(9), a.i32(10), a.i32(11));
  return info.Env().Undefined();
}

Napi::Value DenseGemvRope(const Napi::CallbackInfo& info) {
  Args a(info, 15, "denseGemvRope");
  HS_LAUNCH(hsDenseGemvRope, a.stream(0), a.ptr(1), a.ptr(2), a.ptr(3), a.ptr(4), a.as<const int32_t>(5),
            a.as<const float>(6), a.i32(7), a.i32(8), a.i32(9), a.i32(10), a.i32(11), a.i32(12), a.i32(13),
            a.i32(14));
  return info.Env().Undefined();
}

/** setKernelLaunchOptions(options) -> previous (hsSetKernelLaunchOptions; options < 0 reads). */
Napi::Value SetKernelLaunchOptions(const Napi::CallbackInfo& info) {
  Args a(info, 1, "setKernelLaunchOptions");
  return Napi::Number::New(info.Env(), hsSetKernelLaunchOptions(a.i32(0)));
}

}  // namespace

void initLaunchers(Napi::Env env, Napi::Object exports) {
  exports.Set("gatherRows", Napi::Function::New(env, GatherRows, "gatherRows"));
  exports.Set("rmsNorm", Napi::Function::New(env, RmsNorm, "rmsNorm"));
  exports.Set("fusedAddRmsNorm", Napi::Function::New(env, FusedAddRmsNorm, "fusedAddRmsNorm"));
  exports.Set("qkNorm", Napi::Function::New(env, QkNorm, "qkNorm"));
  exports.Set("qkNormRotaryEmbedding", Napi::Function::New(env, QkNormRotaryEmbedding, "qkNormRotaryEmbedding"));
  exports.Set("rotaryEmbedding", Napi::Function::New(env, RotaryEmbedding, "rotaryEmbedding"));
  exports.Set("siluAndMul", Napi::Function::New(env, SiluAndMul, "siluAndMul"));
  exports.Set("reshapeAndCache", Napi::Function::New(env, ReshapeAndCache, "reshapeAndCache"));
  exports.Set("reshapeAndCacheFp8", Napi::Function::New(env, ReshapeAndCacheFp8, "reshapeAndCacheFp8"));
  exports.Set("kvAmax", Napi::Function::New(env, KvAmax, "kvAmax"));
  exports.Set("biasAdd", Napi::Function::New(env, BiasAdd, "biasAdd"));
  exports.Set("cast", Napi::Function::New(env, Cast, "cast"));
  exports.Set("denseGemv", Napi::Function::New(env, DenseGemv, "denseGemv"));
  exports.Set("denseGemvRope", Napi::Function::New(env, DenseGemvRope, "denseGemvRope"));
  exports.Set("setKernelLaunchOptions", Napi::Function::New(env, SetKernelLaunchOptions, "setKernelLaunchOptions"));
}

}  // namespace hs
