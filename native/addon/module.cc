// Entry point of hisparse_native.node. An N-API module keeps no per-process JS state, so it loads
// in any number of environments (main thread and worker_threads). Every export is typed in
// src/backends/cuda/addon.ts; bump kAbiVersion when a signature changes.
#include "common.h"

namespace hs {

bool haveAttention();
bool haveSampling();

/** Version of the JS-visible surface; addon.ts refuses a mismatching build. */
constexpr int kAbiVersion = 9;

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("abiVersion", Napi::Number::New(env, kAbiVersion));
  Napi::Object build = Napi::Object::New(env);
  build.Set("cudaRuntimeVersion", Napi::Number::New(env, CUDART_VERSION));
  build.Set("hasAttention", Napi::Boolean::New(env, haveAttention()));
  build.Set("hasSampling", Napi::Boolean::New(env, haveSampling()));
  build.Set("hasHiSparse", Napi::Boolean::New(env, true));
#ifdef HS_DEBUG_SYNC
  build.Set("debugSync", Napi::Boolean::New(env, true));
#else
  build.Set("debugSync", Napi::Boolean::New(env, false));
#endif
#ifdef HS_GENCODE
  build.Set("gencode", Napi::String::New(env, HS_GENCODE));
#else
  build.Set("gencode", Napi::String::New(env, ""));
#endif
  exports.Set("buildInfo", build);
  initDevice(env, exports);
  initAllocator(env, exports);
  initHost(env, exports);
  initStreams(env, exports);
  initWorkspace(env, exports);
  initBlas(env, exports);
  initLaunchers(env, exports);
  initAttention(env, exports);
  initHiSparse(env, exports);
  initLoader(env, exports);
  initMoe(env, exports);
  initNccl(env, exports);
  initMla(env, exports);
  return exports;
}

}  // namespace hs

// NODE_API_MODULE pastes the name into an identifier: it needs an unqualified function.
static Napi::Object InitHisparseNative(Napi::Env env, Napi::Object exports) {
  return hs::Init(env, exports);
}
NODE_API_MODULE(hisparse_native, InitHisparseNative)
