// Device discovery and selection, memory info, and raw async copies/memsets.
#include "common.h"

namespace hs {
namespace {

/** probe() -> {ok, deviceCount, driverVersion, runtimeVersion, error}. Never throws. */
Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  int driver = 0;
  int runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  out.Set("ok", Napi::Boolean::New(env, err == cudaSuccess && count > 0));
  out.Set("deviceCount", Napi::Number::New(env, count));
  out.Set("driverVersion", Napi::Number::New(env, driver));
  out.Set("runtimeVersion", Napi::Number::New(env, runtime));
  out.Set("error", Napi::String::New(env, err == cudaSuccess ? "" : cudaErrorText(err)));
  return out;
}

/** deviceProperties(device) -> the fields of cudaDeviceProp the engine uses. */
Napi::Value DeviceProperties(const Napi::CallbackInfo& info) {
  Args a(info, 1, "deviceProperties");
  cudaDeviceProp p{};
  HS_CUDA(cudaGetDeviceProperties(&p, a.i32(0)));
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", Napi::String::New(env, p.name));
  o.Set("major", Napi::Number::New(env, p.major));
  o.Set("minor", Napi::Number::New(env, p.minor));
  o.Set("totalGlobalMem", Napi::Number::New(env, static_cast<double>(p.totalGlobalMem)));
  o.Set("multiProcessorCount", Napi::Number::New(env, p.multiProcessorCount));
  o.Set("l2CacheSize", Napi::Number::New(env, p.l2CacheSize));
  o.Set("sharedMemPerBlockOptin", Napi::Number::New(env, static_cast<double>(p.sharedMemPerBlockOptin)));
  o.Set("sharedMemPerMultiprocessor", Napi::Number::New(env, static_cast<double>(p.sharedMemPerMultiprocessor)));
  o.Set("memoryBusWidth", Napi::Number::New(env, p.memoryBusWidth));
  o.Set("pciBusId", Napi::Number::New(env, p.pciBusID));
  o.Set("canMapHostMemory", Napi::Boolean::New(env, p.canMapHostMemory != 0));
  o.Set("unifiedAddressing", Napi::Boolean::New(env, p.unifiedAddressing != 0));
  return o;
}

Napi::Value SetDevice(const Napi::CallbackInfo& info) {
  Args a(info, 1, "setDevice");
  HS_CUDA(cudaSetDevice(a.i32(0)));
  return info.Env().Undefined();
}

Napi::Value GetDevice(const Napi::CallbackInfo& info) {
  int d = 0;
  HS_CUDA(cudaGetDevice(&d));
  return Napi::Number::New(info.Env(), d);
}

/** memGetInfo() -> {free, total} bytes of the current device. */
Napi::Value MemGetInfo(const Napi::CallbackInfo& info) {
  size_t freeBytes = 0;
  size_t totalBytes = 0;
  HS_CUDA(cudaMemGetInfo(&freeBytes, &totalBytes));
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("free", Napi::Number::New(info.Env(), static_cast<double>(freeBytes)));
  o.Set("total", Napi::Number::New(info.Env(), static_cast<double>(totalBytes)));
  return o;
}

Napi::Value DeviceSynchronize(const Napi::CallbackInfo& info) {
  HS_CUDA(cudaDeviceSynchronize());
  return info.Env().Undefined();
}

/** memcpyAsync(dst, src, bytes, stream): any direction (cudaMemcpyDefault, UVA). */
Napi::Value MemcpyAsync(const Napi::CallbackInfo& info) {
  Args a(info, 4, "memcpyAsync");
  const size_t bytes = a.size(2);
  if (bytes > 0) HS_CUDA(cudaMemcpyAsync(a.ptr(0), a.ptr(1), bytes, cudaMemcpyDefault, a.stream(3)));
  return info.Env().Undefined();
}

/** memsetAsync(dst, byteValue, bytes, stream). */
Napi::Value MemsetAsync(const Napi::CallbackInfo& info) {
  Args a(info, 4, "memsetAsync");
  const size_t bytes = a.size(2);
  if (bytes > 0) HS_CUDA(cudaMemsetAsync(a.ptr(0), a.i32(1) & 0xff, bytes, a.stream(3)));
  return info.Env().Undefined();
}

}  // namespace

void initDevice(Napi::Env env, Napi::Object exports) {
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("deviceProperties", Napi::Function::New(env, DeviceProperties, "deviceProperties"));
  exports.Set("setDevice", Napi::Function::New(env, SetDevice, "setDevice"));
  exports.Set("getDevice", Napi::Function::New(env, GetDevice, "getDevice"));
  exports.Set("memGetInfo", Napi::Function::New(env, MemGetInfo, "memGetInfo"));
  exports.Set("deviceSynchronize", Napi::Function::New(env, DeviceSynchronize, "deviceSynchronize"));
  exports.Set("memcpyAsync", Napi::Function::New(env, MemcpyAsync, "memcpyAsync"));
  exports.Set("memsetAsync", Napi::Function::New(env, MemsetAsync, "memsetAsync"));
}

}  // namespace hs
