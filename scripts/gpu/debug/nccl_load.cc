// The addon's NCCL loading sequence (native/addon/nccl.cc loadOnce) as a plain program, for
// scripts/gpu/nccl_diag.sh: setenv, dlopen, dlsym, ncclGetVersion, ncclGetUniqueId, each step
// traced on stderr. Built both as an ordinary program and like the Node.js binary (libstdc++
// linked statically and its symbols exported with -rdynamic), and run on the main thread or on a
// thread with a small stack (argv[1] = stack KiB), optionally after loading the addon itself
// (NCCL_PRELOAD_ADDON=path), to tell which difference makes NCCL crash.
#include <dlfcn.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

static int flags() {
  const char* f = std::getenv("NCCL_DLOPEN_FLAGS");
  int fl = RTLD_NOW | RTLD_LOCAL;
  if (f != nullptr && std::string(f) == "deepbind") fl |= RTLD_DEEPBIND;
  if (f != nullptr && std::string(f) == "global") fl = RTLD_NOW | RTLD_GLOBAL;
  return fl;
}

static void* load(void*) {
  if (const char* addon = std::getenv("NCCL_PRELOAD_ADDON")) {
    // The addon without Node.js: its N-API imports stay unresolved (lazy binding), its static
    // initialisers (the CUDA runtime's fat-binary registration) run.
    std::fprintf(stderr, "step dlopen %s\n", addon);
    if (dlopen(addon, RTLD_LAZY | RTLD_LOCAL) == nullptr) std::fprintf(stderr, "addon: %s\n", dlerror());
  }
  std::fprintf(stderr, "step setenv\n");
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  std::fprintf(stderr, "step dlopen\n");
  void* lib = dlopen("libnccl.so.2", flags());
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen failed: %s\n", dlerror());
    return nullptr;
  }
  std::fprintf(stderr, "step dlsym\n");
  auto getVersion = reinterpret_cast<int (*)(int*)>(dlsym(lib, "ncclGetVersion"));
  auto getUniqueId = reinterpret_cast<int (*)(char*)>(dlsym(lib, "ncclGetUniqueId"));
  int v = 0;
  std::fprintf(stderr, "step ncclGetVersion\n");
  int r = getVersion(&v);
  std::fprintf(stderr, "ncclGetVersion -> %d, version %d\n", r, v);
  char id[128];
  std::fprintf(stderr, "step ncclGetUniqueId\n");
  r = getUniqueId(id);
  std::fprintf(stderr, "ncclGetUniqueId -> %d\n", r);
  return nullptr;
}

int main(int argc, char** argv) {
  static std::once_flag once;  // the program itself uses call_once, as node's libstdc++ users do
  std::call_once(once, [] { std::fprintf(stderr, "own call_once ran\n"); });
  if (argc < 2) {
    load(nullptr);
    return 0;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, static_cast<size_t>(std::atoi(argv[1])) * 1024);
  pthread_t t;
  pthread_create(&t, &attr, load, nullptr);
  pthread_join(t, nullptr);
  return 0;
}
