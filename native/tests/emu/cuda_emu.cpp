// Runtime side of the CPU emulation (see cuda_emu.h): grid execution and the subset of the CUDA
// runtime API the tests call (memory, mapped host memory, copies, streams, graph capture of
// launches, events).
#include "cuda_emu.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace hs_emu {

thread_local Cta* tlCta = nullptr;
thread_local int tlLane = 0;
thread_local std::deque<std::vector<PendingCopy>> tlGroups;
thread_local std::vector<PendingCopy> tlOpenGroup;
alignas(128) unsigned char gSmem[kSmemBytes];

bool lateCopies() {
  static const bool late = [] {
    const char* v = std::getenv("HS_EMU_CP_ASYNC");
    return v != nullptr && std::string(v) == "late";
  }();
  return late;
}

static std::vector<std::function<void()>>* gCapture = nullptr;

bool recordIfCapturing(const std::function<void()>& launch) {
  if (gCapture == nullptr) return false;
  gCapture->push_back(launch);
  return true;
}

void runGrid(dim3 grid, dim3 block, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  if (block.y != 1 || block.z != 1 || threads % 32 != 0) {
    std::fprintf(stderr, "emu: only 1-D blocks of whole warps are supported\n");
    std::abort();
  }
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(gSmem, 0xff, kSmemBytes);  // shared memory starts as NaN garbage
        std::barrier<> bar(threads);
        std::vector<Warp> warps(threads / 32);
        Cta cta{&bar, warps.data(), gSmem};
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (unsigned t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            threadIdx = make_uint3(t, 0, 0);
            blockIdx = make_uint3(x, y, z);
            blockDim = block;
            gridDim = grid;
            tlCta = &cta;
            tlLane = static_cast<int>(t % 32);
            tlGroups.clear();
            tlOpenGroup.clear();
            body();
            for (auto& g : tlGroups)
              for (auto& c : g) landCopy(c);
            for (auto& c : tlOpenGroup) landCopy(c);
            tlGroups.clear();
            tlOpenGroup.clear();
            warps[t / 32].bar.arrive_and_drop();
            bar.arrive_and_drop();
          });
        for (auto& th : pool) th.join();
      }
}

}  // namespace hs_emu

// ---- runtime API subset ----------------------------------------------------------------------
struct CUstream_st {
  int unused;
};
struct CUgraph_st {
  std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> ops;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point t;
};

extern "C" {

cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind, cudaStream_t) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaError(emu)"; }
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "error (emu)"; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
/** SMs the emulation reports: 132 (H100 / H200), or $HS_EMU_SMS (fewer splits: longer pipelines per CTA). */
static int emuSms() {
  const char* v = std::getenv("HS_EMU_SMS");
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 132;
}
cudaError_t cudaDeviceGetAttribute(int* v, enum cudaDeviceAttr attr, int) {
  *v = attr == cudaDevAttrMultiProcessorCount ? emuSms()
       : attr == cudaDevAttrMaxSharedMemoryPerBlockOptin ? static_cast<int>(hs_emu::kSmemBytes) - 1024
                                                          : 0;
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned int) {
  *dev = host;  // one address space: UVA
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int) {
  std::memset(prop, 0, sizeof *prop);
  std::strcpy(prop->name, "CPU emulation (132 SMs modelled)");
  prop->multiProcessorCount = emuSms();
  prop->l2CacheSize = 50 << 20;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void*, enum cudaFuncAttribute, int v) {
  return v <= static_cast<int>(hs_emu::kSmemBytes) ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  *s = new CUstream_st{0};
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode) {
  hs_emu::gCapture = new std::vector<std::function<void()>>();
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* g) {
  *g = new CUgraph_st{std::move(*hs_emu::gCapture)};
  delete hs_emu::gCapture;
  hs_emu::gCapture = nullptr;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  *e = new CUgraphExec_st{g->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
  for (auto& op : e->ops) op();
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new CUevent_st{};
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

}  // extern "C"
