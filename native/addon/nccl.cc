// NCCL at run time (nccl_dl.h): the library's version, unique ids, one communicator per rank,
// and the two collectives tensor parallelism needs, enqueued on the caller's stream (so a decode
// step that calls them is captured into its CUDA graph with them). Every JS-visible function is
// typed in src/backends/cuda/addon_nccl.ts.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "common.h"
#include "nccl_dl.h"

namespace hs {
namespace nccl {
namespace {

/**
 * Looks `symbol` up in `lib` into `out`. @throws runtime_error naming `name` and the symbol.
 * Not called `bind`: with a std::string argument, ADL finds std::bind, which wins overload
 * resolution and silently discards the lookup (every entry point stayed null: SIGSEGV at pc 0 on
 * the first NCCL call).
 */
template <typename F>
void bindSymbol(void* lib, const std::string& name, const char* symbol, F& out) {
  dlerror();
  void* s = dlsym(lib, symbol);
  if (s == nullptr) throw std::runtime_error(name + " has no symbol " + symbol);
  out = reinterpret_cast<F>(s);
}

Api loadOnce() {
  // NVLink multicast must stay off (it needs cuMulticastCreate, which these machines refuse).
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  Api api;
  std::string errors;
  void* lib = nullptr;
  for (const char* c : {"libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "libnccl.so"}) {
    lib = dlopen(c, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      api.path = c;
      break;
    }
    const char* e = dlerror();
    errors += std::string("; ") + (e ? e : c);
  }
  if (lib == nullptr)
    throw std::runtime_error("NCCL (libnccl.so.2) could not be loaded; install it or add its folder to "
                             "LD_LIBRARY_PATH (tried" + errors + ")");
  bindSymbol(lib, api.path, "ncclGetVersion", api.getVersion);
  bindSymbol(lib, api.path, "ncclGetUniqueId", api.getUniqueId);
  bindSymbol(lib, api.path, "ncclCommInitRank", api.commInitRank);
  bindSymbol(lib, api.path, "ncclCommDestroy", api.commDestroy);
  bindSymbol(lib, api.path, "ncclAllReduce", api.allReduce);
  bindSymbol(lib, api.path, "ncclAllGather", api.allGather);
  bindSymbol(lib, api.path, "ncclGetErrorString", api.getErrorString);
  if (api.getVersion(&api.version) != ncclSuccess) api.version = 0;
  return api;
}

/** Throws an Error naming the NCCL call and NCCL's message. */
void check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return;
  const Api& api = loadNccl();
  throw std::runtime_error(std::string(call) + " failed: " + api.getErrorString(r) + " (ncclResult " +
                           std::to_string(static_cast<int>(r)) + ")");
}

/** Our dtype codes (kernels.h HsDtype: f32 0, bf16 1, f16 2, i32 3) as NCCL's. */
ncclDataType_t ncclType(int dtype) {
  switch (dtype) {
    case 0: return ncclFloat32;
    case 1: return ncclBfloat16;
    case 2: return ncclFloat16;
    case 3: return ncclInt32;
    default: throw std::invalid_argument("nccl: unknown dtype code " + std::to_string(dtype));
  }
}

ncclComm_t commArg(const Args& a, size_t i) { return static_cast<ncclComm_t>(a.ptr(i)); }

/** ncclInfo(): { version, path }. @throws Error when NCCL cannot be loaded. */
Napi::Value Info(const Napi::CallbackInfo& info) {
  const Api& api = loadNccl();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("version", Napi::Number::New(info.Env(), api.version));
  o.Set("path", Napi::String::New(info.Env(), api.path));
  return o;
}

/** ncclGetUniqueId(): a Buffer of kUniqueIdBytes. */
Napi::Value GetUniqueId(const Napi::CallbackInfo& info) {
  ncclUniqueId id;
  check(loadNccl().getUniqueId(&id), "ncclGetUniqueId");
  return Napi::Buffer<uint8_t>::Copy(info.Env(), reinterpret_cast<const uint8_t*>(id.internal), kUniqueIdBytes);
}

/**
 * ncclCommInitRank(uniqueId: Uint8Array, worldSize, rank): the communicator handle, on the
 * current device. Blocks until every rank has joined.
 */
Napi::Value CommInitRank(const Napi::CallbackInfo& info) {
  if (info.Length() < 3 || !info[0].IsTypedArray())
    throw Napi::TypeError::New(info.Env(), "ncclCommInitRank(uniqueId: Uint8Array, worldSize, rank)");
  Napi::Uint8Array bytes = info[0].As<Napi::Uint8Array>();
  if (bytes.ByteLength() != kUniqueIdBytes)
    throw Napi::RangeError::New(info.Env(), "ncclCommInitRank: a unique id has 128 bytes");
  Args a(info, 3, "ncclCommInitRank");
  ncclUniqueId id;
  std::memcpy(id.internal, bytes.Data(), kUniqueIdBytes);
  ncclComm_t comm = nullptr;
  check(loadNccl().commInitRank(&comm, a.i32(1), id, a.i32(2)), "ncclCommInitRank");
  return ptrValue(info.Env(), comm);
}

/** ncclCommDestroy(comm). */
Napi::Value CommDestroy(const Napi::CallbackInfo& info) {
  Args a(info, 1, "ncclCommDestroy");
  check(loadNccl().commDestroy(commArg(a, 0)), "ncclCommDestroy");
  return info.Env().Undefined();
}

/** ncclAllReduce(stream, comm, send, recv, count, dtype): sum; send == recv is in place. */
Napi::Value AllReduce(const Napi::CallbackInfo& info) {
  Args a(info, 6, "ncclAllReduce");
  check(loadNccl().allReduce(a.ptr(2), a.ptr(3), a.size(4), ncclType(a.i32(5)), ncclSum, commArg(a, 1),
                             a.stream(0)),
        "ncclAllReduce");
  return info.Env().Undefined();
}

/** ncclAllGather(stream, comm, send, recv, sendCount, dtype): recv [worldSize * sendCount], rank-major. */
Napi::Value AllGather(const Napi::CallbackInfo& info) {
  Args a(info, 6, "ncclAllGather");
  check(loadNccl().allGather(a.ptr(2), a.ptr(3), a.size(4), ncclType(a.i32(5)), commArg(a, 1), a.stream(0)),
        "ncclAllGather");
  return info.Env().Undefined();
}

}  // namespace

const Api& loadNccl() {
  static std::once_flag once;
  static Api api;
  static std::string error;
  std::call_once(once, [] {
    try {
      api = loadOnce();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw std::runtime_error(error);
  return api;
}

}  // namespace nccl

void initNccl(Napi::Env env, Napi::Object exports) {
  exports.Set("ncclInfo", Napi::Function::New(env, nccl::Info, "ncclInfo"));
  exports.Set("ncclGetUniqueId", Napi::Function::New(env, nccl::GetUniqueId, "ncclGetUniqueId"));
  exports.Set("ncclCommInitRank", Napi::Function::New(env, nccl::CommInitRank, "ncclCommInitRank"));
  exports.Set("ncclCommDestroy", Napi::Function::New(env, nccl::CommDestroy, "ncclCommDestroy"));
  exports.Set("ncclAllReduce", Napi::Function::New(env, nccl::AllReduce, "ncclAllReduce"));
  exports.Set("ncclAllGather", Napi::Function::New(env, nccl::AllGather, "ncclAllGather"));
}

}  // namespace hs
