// Implementation of the helpers declared in common.h.
#include "common.h"

#include <cmath>
#include <cstring>

namespace hs {
namespace {

const char* baseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

// The value checks of Args and ParamObject (one rule per kind of argument).
constexpr double kTwoPow53 = 9007199254740992.0;
constexpr const char* kExpectAddress = "an address (a non-negative integer)";
constexpr const char* kExpectI32 = "an int32 integer";
constexpr const char* kExpectSize = "a non-negative integer";

bool isAddress(double d) {
  return d >= 0 && d < kTwoPow53 && std::floor(d) == d;
}
bool isI32(double d) {
  return d >= -2147483648.0 && d <= 2147483647.0 && std::floor(d) == d;
}

}  // namespace

std::string cudaErrorText(cudaError_t err) {
  return std::string(cudaGetErrorString(err)) + " (" + cudaGetErrorName(err) + ")";
}

void throwCuda(cudaError_t err, const char* call, const char* file, int line) {
  // Clear a non-sticky error so that later calls do not report it again.
  (void)cudaGetLastError();
  throw std::runtime_error(std::string(call) + " failed at " + baseName(file) + ":" + std::to_string(line) + ": " +
                           cudaErrorText(err));
}

bool isCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) return false;
  return status != cudaStreamCaptureStatusNone;
}

void checkLaunch(cudaError_t err, const char* launcher, cudaStream_t stream, const char* file, int line) {
  if (err != cudaSuccess) throwCuda(err, launcher, file, line);
#ifdef HS_DEBUG_SYNC
  if (!isCapturing(stream)) {
    const cudaError_t done = cudaStreamSynchronize(stream);
    if (done != cudaSuccess) throwCuda(done, launcher, file, line);
  }
#else
  (void)stream;
#endif
}

Args::Args(const Napi::CallbackInfo& info, size_t count, const char* fn) : info_(info), fn_(fn) {
  if (info.Length() < count) {
    throw Napi::TypeError::New(info.Env(), std::string(fn) + " expects " + std::to_string(count) + " arguments, got " +
                                               std::to_string(info.Length()));
  }
}

void Args::fail(size_t i, const char* expected) const {
  throw Napi::TypeError::New(info_.Env(),
                             std::string("argument ") + std::to_string(i) + " of " + fn_ + " must be " + expected);
}

double Args::number(size_t i) const {
  const Napi::Value v = info_[i];
  if (!v.IsNumber()) fail(i, "a number");
  return v.As<Napi::Number>().DoubleValue();
}

void* Args::ptr(size_t i) const {
  const double d = number(i);
  if (!isAddress(d)) fail(i, kExpectAddress);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(d));
}

int Args::i32(size_t i) const {
  const double d = number(i);
  if (!isI32(d)) fail(i, kExpectI32);
  return static_cast<int>(d);
}

size_t Args::size(size_t i) const {
  const double d = number(i);
  if (!isAddress(d)) fail(i, kExpectSize);
  return static_cast<size_t>(d);
}

double Args::f64(size_t i) const {
  return number(i);
}

bool Args::flag(size_t i) const {
  const Napi::Value v = info_[i];
  if (!v.IsBoolean()) fail(i, "a boolean");
  return v.As<Napi::Boolean>().Value();
}

ParamObject::ParamObject(const Napi::CallbackInfo& info, size_t index, const char* fn) : env_(info.Env()), fn_(fn) {
  if (info.Length() <= index || !info[index].IsObject()) {
    throw Napi::TypeError::New(env_, std::string("argument ") + std::to_string(index) + " of " + fn +
                                         " must be its parameter object");
  }
  obj_ = info[index].As<Napi::Object>();
}

void ParamObject::fail(const char* key, const char* expected) const {
  throw Napi::TypeError::New(env_, std::string(fn_) + ": params." + key + " must be " + expected);
}

double ParamObject::number(const char* key) const {
  const Napi::Value v = obj_.Get(key);
  if (!v.IsNumber()) fail(key, "a number");
  return v.As<Napi::Number>().DoubleValue();
}

AnyPtr ParamObject::ptr(const char* key) const {
  const double d = number(key);
  if (!isAddress(d)) fail(key, kExpectAddress);
  return AnyPtr(reinterpret_cast<void*>(static_cast<uintptr_t>(d)));
}

int ParamObject::i32(const char* key) const {
  const double d = number(key);
  if (!isI32(d)) fail(key, kExpectI32);
  return static_cast<int>(d);
}

size_t ParamObject::size(const char* key) const {
  const double d = number(key);
  if (!isAddress(d)) fail(key, kExpectSize);
  return static_cast<size_t>(d);
}

float ParamObject::f32(const char* key) const {
  return static_cast<float>(number(key));
}

double optNumber(const Napi::Object& opts, const char* key, double fallback) {
  const Napi::Value v = opts.Get(key);
  if (v.IsUndefined()) return fallback;
  if (!v.IsNumber()) throw Napi::TypeError::New(opts.Env(), std::string("option ") + key + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

bool optBool(const Napi::Object& opts, const char* key, bool fallback) {
  const Napi::Value v = opts.Get(key);
  if (v.IsUndefined()) return fallback;
  if (!v.IsBoolean()) throw Napi::TypeError::New(opts.Env(), std::string("option ") + key + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

std::string optString(const Napi::Object& opts, const char* key, const std::string& fallback) {
  const Napi::Value v = opts.Get(key);
  if (v.IsUndefined()) return fallback;
  if (!v.IsString()) throw Napi::TypeError::New(opts.Env(), std::string("option ") + key + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

}  // namespace hs
