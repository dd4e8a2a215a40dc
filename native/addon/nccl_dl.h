// The part of the NCCL C API that the addon uses, declared here because the build machine has no
// NCCL headers: the addon loads libnccl.so.2 with dlopen at run time (nccl_dl.cc), as it loads
// cuBLAS (cublas_dl.h). Types and enum values are those of NVIDIA's nccl.h (2.x; stable since
// 2.10 for everything used here); names are the real ones inside namespace hs::nccl.
//
// NVLink multicast (NVLS) stays off on the machines we run on: loadNccl() sets
// NCCL_NVLS_ENABLE=0 in the process environment before the library is opened, and nothing in
// the addon calls cuMulticastCreate.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace hs {
namespace nccl {

// ---- nccl.h ------------------------------------------------------------------------------------
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;

/** NCCL_UNIQUE_ID_BYTES. */
constexpr size_t kUniqueIdBytes = 128;
typedef struct {
  char internal[kUniqueIdBytes];
} ncclUniqueId;

struct ncclComm;
typedef struct ncclComm* ncclComm_t;

/** The entry points, bound once per process. */
struct Api {
  std::string path;
  /** NCCL_VERSION_CODE of the loaded library, e.g. 22803 for 2.28.3. */
  int version = 0;
  ncclResult_t (*getVersion)(int*) = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*getErrorString)(ncclResult_t) = nullptr;
};

/**
 * Loads libnccl.so.2 (once per process; NCCL_NVLS_ENABLE=0 is set first) and binds the entry
 * points. @throws std::runtime_error naming what was tried when it cannot be loaded.
 */
const Api& loadNccl();

}  // namespace nccl
}  // namespace hs
