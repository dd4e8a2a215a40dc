// The part of the cuBLAS / cuBLASLt C API that the addon uses, declared here because the build
// machine has no cuBLAS headers: the addon loads libcublas.so.13 / libcublasLt.so.13 (falling back
// to .so.12) with dlopen at run time. Enum values and struct layouts are copied from NVIDIA's
// cublas_api.h and cublasLt.h (CUDA 12.x, unchanged in 13.0 for everything used here); names are
// the real ones inside namespace hs::blas so a later real header cannot clash.
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>  // cudaDataType_t: CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14

#include <cstddef>
#include <cstdint>
#include <string>

namespace hs {
namespace blas {

// ---- cublas_api.h ------------------------------------------------------------------------------
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

struct cublasContext;
typedef struct cublasContext* cublasHandle_t;

// ---- cublasLt.h ---------------------------------------------------------------------------------
struct cublasLtContext;
typedef struct cublasLtContext* cublasLtHandle_t;

typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

struct cublasLtMatmulDescOpaque;
typedef struct cublasLtMatmulDescOpaque* cublasLtMatmulDesc_t;
struct cublasLtMatrixLayoutOpaque;
typedef struct cublasLtMatrixLayoutOpaque* cublasLtMatrixLayout_t;
struct cublasLtMatmulPreferenceOpaque;
typedef struct cublasLtMatmulPreferenceOpaque* cublasLtMatmulPreference_t;

/** Layout of cublasLtMatmulHeuristicResult_t (cublasLt.h): arrays of it are passed to cuBLASLt. */
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,      // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,  // const void*
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,  // int32_t (cudaDataType_t), default -1 = D's type
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,  // uint64_t
} cublasLtMatmulPreferenceAttributes_t;

// ---- function pointer types ---------------------------------------------------------------------
using cublasCreate_t = cublasStatus_t (*)(cublasHandle_t*);
using cublasDestroy_t = cublasStatus_t (*)(cublasHandle_t);
using cublasSetStream_t = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using cublasSetWorkspace_t = cublasStatus_t (*)(cublasHandle_t, void*, size_t);
using cublasGetStatusString_t = const char* (*)(cublasStatus_t);
using cublasGemmEx_t = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void*, const void*, cudaDataType_t, int, const void*,
                                          cudaDataType_t, int, const void*, void*, cudaDataType_t, int,
                                          cublasComputeType_t, cublasGemmAlgo_t);
using cublasGemmStridedBatchedEx_t = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                        int, const void*, const void*, cudaDataType_t, int, long long,
                                                        const void*, cudaDataType_t, int, long long, const void*,
                                                        void*, cudaDataType_t, int, long long, int,
                                                        cublasComputeType_t, cublasGemmAlgo_t);

using cublasLtCreate_t = cublasStatus_t (*)(cublasLtHandle_t*);
using cublasLtDestroy_t = cublasStatus_t (*)(cublasLtHandle_t);
using cublasLtGetVersion_t = size_t (*)();
using cublasLtMatmulDescCreate_t = cublasStatus_t (*)(cublasLtMatmulDesc_t*, cublasComputeType_t, cudaDataType_t);
using cublasLtMatmulDescDestroy_t = cublasStatus_t (*)(cublasLtMatmulDesc_t);
using cublasLtMatmulDescSetAttribute_t = cublasStatus_t (*)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                                                            const void*, size_t);
using cublasLtMatrixLayoutCreate_t = cublasStatus_t (*)(cublasLtMatrixLayout_t*, cudaDataType_t, uint64_t, uint64_t,
                                                        int64_t);
using cublasLtMatrixLayoutDestroy_t = cublasStatus_t (*)(cublasLtMatrixLayout_t);
using cublasLtMatmulPreferenceCreate_t = cublasStatus_t (*)(cublasLtMatmulPreference_t*);
using cublasLtMatmulPreferenceDestroy_t = cublasStatus_t (*)(cublasLtMatmulPreference_t);
using cublasLtMatmulPreferenceSetAttribute_t = cublasStatus_t (*)(cublasLtMatmulPreference_t,
                                                                  cublasLtMatmulPreferenceAttributes_t, const void*,
                                                                  size_t);
using cublasLtMatmulAlgoGetHeuristic_t = cublasStatus_t (*)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                            cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                            cublasLtMatmulPreference_t, int,
                                                            cublasLtMatmulHeuristicResult_t*, int*);
using cublasLtMatmul_t = cublasStatus_t (*)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*,
                                            cublasLtMatrixLayout_t, const void*, cublasLtMatrixLayout_t, const void*,
                                            const void*, cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
                                            const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t);

/** The loaded entry points. Every pointer is non-null once load() succeeded. */
struct Api {
  std::string cublasPath;
  std::string cublasLtPath;
  cublasCreate_t cublasCreate = nullptr;                  // symbol cublasCreate_v2
  cublasDestroy_t cublasDestroy = nullptr;                // symbol cublasDestroy_v2
  cublasSetStream_t cublasSetStream = nullptr;            // symbol cublasSetStream_v2
  cublasSetWorkspace_t cublasSetWorkspace = nullptr;      // symbol cublasSetWorkspace_v2
  cublasGetStatusString_t cublasGetStatusString = nullptr;
  cublasGemmEx_t cublasGemmEx = nullptr;
  cublasGemmStridedBatchedEx_t cublasGemmStridedBatchedEx = nullptr;
  cublasLtCreate_t ltCreate = nullptr;
  cublasLtDestroy_t ltDestroy = nullptr;
  cublasLtGetVersion_t ltGetVersion = nullptr;
  cublasLtMatmulDescCreate_t ltMatmulDescCreate = nullptr;
  cublasLtMatmulDescDestroy_t ltMatmulDescDestroy = nullptr;
  cublasLtMatmulDescSetAttribute_t ltMatmulDescSetAttribute = nullptr;
  cublasLtMatrixLayoutCreate_t ltMatrixLayoutCreate = nullptr;
  cublasLtMatrixLayoutDestroy_t ltMatrixLayoutDestroy = nullptr;
  cublasLtMatmulPreferenceCreate_t ltMatmulPreferenceCreate = nullptr;
  cublasLtMatmulPreferenceDestroy_t ltMatmulPreferenceDestroy = nullptr;
  cublasLtMatmulPreferenceSetAttribute_t ltMatmulPreferenceSetAttribute = nullptr;
  cublasLtMatmulAlgoGetHeuristic_t ltMatmulAlgoGetHeuristic = nullptr;
  cublasLtMatmul_t ltMatmul = nullptr;
};

/**
 * Loads libcublasLt and libcublas once per process (thread-safe) and returns the entry points.
 * Search order per library: soname .13 then .12 through the dynamic loader (LD_LIBRARY_PATH,
 * rpath, ld.so.cache), then $CUDA_HOME/lib64, $CUDA_PATH/lib64 and /usr/local/cuda/lib64.
 * @throws std::runtime_error naming the libraries tried and dlerror() when either cannot be loaded
 *   or lacks a symbol.
 */
const Api& load();

/** "CUBLAS_STATUS_...: description" of a status code. */
std::string statusText(cublasStatus_t status);

}  // namespace blas
}  // namespace hs
