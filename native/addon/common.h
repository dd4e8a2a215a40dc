// Shared helpers of the N-API layer: CUDA error checks that throw JS errors, and argument parsing
// for the launcher functions, positional (Args) or one named parameter object (ParamObject), with
// the same checks (device pointers and sizes travel as JS numbers: x86-64 and aarch64 user
// addresses are below 2^48, so a double holds them exactly).
//
// Error policy: every CUDA runtime call is checked; a failure throws a C++ exception that
// node-addon-api (NODE_ADDON_API_CPP_EXCEPTIONS_ALL) turns into a JS Error whose message names the
// call, the source location and the CUDA error, e.g.
//   "cudaMemcpyAsync failed at device.cc:88: an illegal memory access was encountered (cudaErrorIllegalAddress)".
#pragma once

#include <cuda_runtime.h>
#include <napi.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace hs {

/** Throws std::runtime_error describing a failed CUDA call. */
[[noreturn]] void throwCuda(cudaError_t err, const char* call, const char* file, int line);

inline void checkCuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throwCuda(err, call, file, line);
}

/**
 * After a kernel launcher: throws on a launch error. In debug builds (HS_DEBUG_SYNC) it also
 * synchronises the stream, unless the stream is being captured into a graph, so that an
 * asynchronous fault is reported at the launch that caused it.
 */
void checkLaunch(cudaError_t err, const char* launcher, cudaStream_t stream, const char* file, int line);

/** Human-readable "name: description" of a CUDA error. */
std::string cudaErrorText(cudaError_t err);

/** True when the stream is capturing into a CUDA graph. */
bool isCapturing(cudaStream_t stream);

/** Reads the arguments of a flat native function, with type checks that throw TypeError. */
class Args {
 public:
  /** @throws TypeError when fewer than `count` arguments are given. */
  Args(const Napi::CallbackInfo& info, size_t count, const char* fn);

  /** A device or host address (non-negative integer number). */
  void* ptr(size_t i) const;
  template <typename T>
  T* as(size_t i) const {
    return static_cast<T*>(ptr(i));
  }
  /** An integer in int32 range. */
  int i32(size_t i) const;
  /** A non-negative integer below 2^53 (bytes, element counts). */
  size_t size(size_t i) const;
  double f64(size_t i) const;
  float f32(size_t i) const { return static_cast<float>(f64(i)); }
  bool flag(size_t i) const;
  /** A cudaStream_t handle as returned by Stream.handle (0 = the legacy default stream). */
  cudaStream_t stream(size_t i) const { return static_cast<cudaStream_t>(ptr(i)); }
  Napi::Env env() const { return info_.Env(); }

 private:
  double number(size_t i) const;
  [[noreturn]] void fail(size_t i, const char* expected) const;
  const Napi::CallbackInfo& info_;
  const char* fn_;
};

/** A device address read from a parameter object: converts to the pointer type of the C struct field it is assigned to. */
class AnyPtr {
 public:
  explicit AnyPtr(void* p) : p_(p) {}
  template <typename T>
  operator T*() const {  // NOLINT(google-explicit-constructor): assignment to any pointer field
    return static_cast<T*>(p_);
  }

 private:
  void* p_;
};

/**
 * Reads the fields of a launcher's named parameter object (src/backends/cuda/addon_params.ts;
 * params.gen.h reads each C struct through it) with the checks of Args, by field name: a missing
 * or mistyped field throws a TypeError naming the launcher and the field
 * ("questSelect: params.seqLens must be an address (a non-negative integer)").
 */
class ParamObject {
 public:
  /** @throws TypeError when argument `index` of `fn` is not an object. */
  ParamObject(const Napi::CallbackInfo& info, size_t index, const char* fn);

  /** A device or host address (non-negative integer below 2^53; 0 = NULL). */
  AnyPtr ptr(const char* key) const;
  /** An integer in int32 range. */
  int i32(const char* key) const;
  /** A non-negative integer below 2^53 (bytes, element counts). */
  size_t size(const char* key) const;
  float f32(const char* key) const;

 private:
  double number(const char* key) const;
  [[noreturn]] void fail(const char* key, const char* expected) const;
  Napi::Env env_;
  Napi::Object obj_;
  const char* fn_;
};

/** Returns a pointer as a JS number. */
inline Napi::Number ptrValue(Napi::Env env, const void* p) {
  return Napi::Number::New(env, static_cast<double>(reinterpret_cast<uintptr_t>(p)));
}

/** Reads an optional property of an options object; `fallback` when absent or undefined. */
double optNumber(const Napi::Object& opts, const char* key, double fallback);
bool optBool(const Napi::Object& opts, const char* key, bool fallback);
std::string optString(const Napi::Object& opts, const char* key, const std::string& fallback);

// Registration of each part of the addon (module.cc calls them).
void initDevice(Napi::Env env, Napi::Object exports);
void initAllocator(Napi::Env env, Napi::Object exports);
void initHost(Napi::Env env, Napi::Object exports);
void initStreams(Napi::Env env, Napi::Object exports);
void initWorkspace(Napi::Env env, Napi::Object exports);
void initBlas(Napi::Env env, Napi::Object exports);
void initLaunchers(Napi::Env env, Napi::Object exports);
void initAttention(Napi::Env env, Napi::Object exports);
void initHiSparse(Napi::Env env, Napi::Object exports);
void initLoader(Napi::Env env, Napi::Object exports);
void initMoe(Napi::Env env, Napi::Object exports);
void initNccl(Napi::Env env, Napi::Object exports);
void initMla(Napi::Env env, Napi::Object exports);

}  // namespace hs

#define HS_CUDA(call) ::hs::checkCuda((call), #call, __FILE__, __LINE__)
#define HS_LAUNCH(launcher, stream, ...) \
  ::hs::checkLaunch(launcher(__VA_ARGS__, stream), #launcher, stream, __FILE__, __LINE__)
