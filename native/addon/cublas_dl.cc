// Run-time loading of cuBLAS / cuBLASLt (see cublas_dl.h).
#include "cublas_dl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace hs {
namespace blas {
namespace {

/** dlopen's the first candidate that loads; on failure throws with every dlerror() seen. */
void* openLibrary(const char* stem, std::string& pathOut) {
  std::vector<std::string> candidates;
  for (const char* ver : {"13", "12"}) candidates.push_back(std::string(stem) + ".so." + ver);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(var);
    if (root != nullptr && *root != '\0') {
      for (const char* ver : {"13", "12"}) candidates.push_back(std::string(root) + "/lib64/" + stem + ".so." + ver);
    }
  }
  for (const char* ver : {"13", "12"}) candidates.push_back(std::string("/usr/local/cuda/lib64/") + stem + ".so." + ver);
  std::string errors;
  for (const std::string& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      pathOut = c;
      return h;
    }
    const char* e = dlerror();
    errors += "\n  " + (e ? std::string(e) : c + ": unknown error");
  }
  throw std::runtime_error(std::string("could not load ") + stem +
                           " (cuBLAS from the CUDA 13 or 12 toolkit); install it or add its lib64 folder to "
                           "LD_LIBRARY_PATH. Tried:" +
                           errors);
}

template <typename F>
void bindSymbol(void* lib, const char* lib_name, const char* symbol, F& out) {
  dlerror();
  void* s = dlsym(lib, symbol);
  if (s == nullptr) {
    const char* e = dlerror();
    throw std::runtime_error(std::string(lib_name) + " has no symbol " + symbol + ": " + (e ? e : "not found"));
  }
  out = reinterpret_cast<F>(s);
}

Api loadOnce() {
  Api api;
  // cuBLASLt first: libcublas depends on it.
  void* lt = openLibrary("libcublasLt", api.cublasLtPath);
  void* cb = openLibrary("libcublas", api.cublasPath);
  const char* ltName = api.cublasLtPath.c_str();
  const char* cbName = api.cublasPath.c_str();
  bindSymbol(cb, cbName, "cublasCreate_v2", api.cublasCreate);
  bindSymbol(cb, cbName, "cublasDestroy_v2", api.cublasDestroy);
  bindSymbol(cb, cbName, "cublasSetStream_v2", api.cublasSetStream);
  bindSymbol(cb, cbName, "cublasSetWorkspace_v2", api.cublasSetWorkspace);
  bindSymbol(cb, cbName, "cublasGetStatusString", api.cublasGetStatusString);
  bindSymbol(cb, cbName, "cublasGemmEx", api.cublasGemmEx);
  bindSymbol(cb, cbName, "cublasGemmStridedBatchedEx", api.cublasGemmStridedBatchedEx);
  bindSymbol(lt, ltName, "cublasLtCreate", api.ltCreate);
  bindSymbol(lt, ltName, "cublasLtDestroy", api.ltDestroy);
  bindSymbol(lt, ltName, "cublasLtGetVersion", api.ltGetVersion);
  bindSymbol(lt, ltName, "cublasLtMatmulDescCreate", api.ltMatmulDescCreate);
  bindSymbol(lt, ltName, "cublasLtMatmulDescDestroy", api.ltMatmulDescDestroy);
  bindSymbol(lt, ltName, "cublasLtMatmulDescSetAttribute", api.ltMatmulDescSetAttribute);
  bindSymbol(lt, ltName, "cublasLtMatrixLayoutCreate", api.ltMatrixLayoutCreate);
  bindSymbol(lt, ltName, "cublasLtMatrixLayoutDestroy", api.ltMatrixLayoutDestroy);
  bindSymbol(lt, ltName, "cublasLtMatmulPreferenceCreate", api.ltMatmulPreferenceCreate);
  bindSymbol(lt, ltName, "cublasLtMatmulPreferenceDestroy", api.ltMatmulPreferenceDestroy);
  bindSymbol(lt, ltName, "cublasLtMatmulPreferenceSetAttribute", api.ltMatmulPreferenceSetAttribute);
  bindSymbol(lt, ltName, "cublasLtMatmulAlgoGetHeuristic", api.ltMatmulAlgoGetHeuristic);
  bindSymbol(lt, ltName, "cublasLtMatmul", api.ltMatmul);
  // The libraries stay loaded for the life of the process (handles are never dlclose'd).
  return api;
}

}  // namespace

const Api& load() {
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

std::string statusText(cublasStatus_t status) {
  const char* name = "CUBLAS_STATUS_UNKNOWN";
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: name = "CUBLAS_STATUS_SUCCESS"; break;
    case CUBLAS_STATUS_NOT_INITIALIZED: name = "CUBLAS_STATUS_NOT_INITIALIZED"; break;
    case CUBLAS_STATUS_ALLOC_FAILED: name = "CUBLAS_STATUS_ALLOC_FAILED"; break;
    case CUBLAS_STATUS_INVALID_VALUE: name = "CUBLAS_STATUS_INVALID_VALUE"; break;
    case CUBLAS_STATUS_ARCH_MISMATCH: name = "CUBLAS_STATUS_ARCH_MISMATCH"; break;
    case CUBLAS_STATUS_MAPPING_ERROR: name = "CUBLAS_STATUS_MAPPING_ERROR"; break;
    case CUBLAS_STATUS_EXECUTION_FAILED: name = "CUBLAS_STATUS_EXECUTION_FAILED"; break;
    case CUBLAS_STATUS_INTERNAL_ERROR: name = "CUBLAS_STATUS_INTERNAL_ERROR"; break;
    case CUBLAS_STATUS_NOT_SUPPORTED: name = "CUBLAS_STATUS_NOT_SUPPORTED"; break;
    case CUBLAS_STATUS_LICENSE_ERROR: name = "CUBLAS_STATUS_LICENSE_ERROR"; break;
  }
  return name;
}

}  // namespace blas
}  // namespace hs
