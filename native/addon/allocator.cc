// CachingAllocator and its N-API wrapper DeviceAllocator.
#include "allocator.h"

#include <stdexcept>
#include <string>

#include "common.h"

namespace hs {
namespace {

constexpr size_t kSmall = 1 << 20;        // 1 MiB
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = 2 << 20;   // 2 MiB

std::string mib(size_t bytes) {
  return std::to_string(bytes / (1 << 20)) + " MiB";
}

}  // namespace

size_t CachingAllocator::roundSize(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t r = bytes < kSmall ? kSmallRound : kLargeRound;
  return (bytes + r - 1) / r * r;
}

void* CachingAllocator::cudaAlloc(size_t size) {
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation && !cached_.empty()) {
    (void)cudaGetLastError();
    stats_.numOomRetries++;
    emptyCache();
    err = cudaMalloc(&p, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t freeBytes = 0;
    size_t totalBytes = 0;
    (void)cudaMemGetInfo(&freeBytes, &totalBytes);
    throw std::runtime_error("out of device memory: could not allocate " + mib(size) + " (this allocator holds " +
                             mib(stats_.bytesInUse) + " in use; the device has " + mib(freeBytes) + " free of " +
                             mib(totalBytes) + ")");
  }
  checkCuda(err, "cudaMalloc", __FILE__, __LINE__);
  stats_.numCudaMallocs++;
  stats_.bytesReserved += size;
  if (stats_.bytesReserved > stats_.peakBytesReserved) stats_.peakBytesReserved = stats_.bytesReserved;
  return p;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = caching_ ? roundSize(bytes) : (bytes == 0 ? 1 : bytes);
  stats_.numAllocs++;
  void* p = nullptr;
  size_t got = size;
  if (caching_) {
    // Best fit among cached blocks no larger than size + size/4 (bounded waste, no splitting).
    auto it = cached_.lower_bound(size);
    if (it != cached_.end() && it->first <= size + size / 4) {
      p = it->second;
      got = it->first;
      cached_.erase(it);
      stats_.numCacheHits++;
    }
  }
  if (p == nullptr) p = cudaAlloc(size);
  live_.emplace(p, Block{got, bytes});
  stats_.bytesInUse += got;
  stats_.bytesRequested += bytes;
  if (stats_.bytesInUse > stats_.peakBytesInUse) stats_.peakBytesInUse = stats_.bytesInUse;
  return p;
}

void CachingAllocator::release(void* ptr) {
  auto it = live_.find(ptr);
  if (it == live_.end()) throw std::runtime_error("DeviceAllocator.free: the address was not allocated here");
  const Block b = it->second;
  live_.erase(it);
  stats_.numFrees++;
  stats_.bytesInUse -= b.size;
  stats_.bytesRequested -= b.requested;
  if (caching_) {
    cached_.emplace(b.size, ptr);
    return;
  }
  stats_.bytesReserved -= b.size;
  stats_.numCudaFrees++;
  HS_CUDA(cudaFree(ptr));
}

void CachingAllocator::emptyCache() {
  for (auto& [size, p] : cached_) {
    (void)cudaFree(p);
    stats_.bytesReserved -= size;
    stats_.numCudaFrees++;
  }
  cached_.clear();
}

void CachingAllocator::releaseAll() {
  emptyCache();
  for (auto& [p, b] : live_) {
    (void)cudaFree(p);
    stats_.bytesReserved -= b.size;
    stats_.numCudaFrees++;
  }
  live_.clear();
  stats_.bytesInUse = 0;
  stats_.bytesRequested = 0;
  (void)cudaGetLastError();
}

namespace {

/**
 * JS class DeviceAllocator({caching?: boolean}):
 *   malloc(bytes) -> address; free(address); emptyCache(); stats() -> AllocatorStats; dispose().
 */
class DeviceAllocator : public Napi::ObjectWrap<DeviceAllocator> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "DeviceAllocator",
                       {InstanceMethod<&DeviceAllocator::Malloc>("malloc"),
                        InstanceMethod<&DeviceAllocator::Free>("free"),
                        InstanceMethod<&DeviceAllocator::EmptyCache>("emptyCache"),
                        InstanceMethod<&DeviceAllocator::Stats>("stats"),
                        InstanceMethod<&DeviceAllocator::Dispose>("dispose")});
  }

  explicit DeviceAllocator(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceAllocator>(info) {
    bool caching = true;
    if (info.Length() > 0 && info[0].IsObject()) caching = optBool(info[0].As<Napi::Object>(), "caching", true);
    alloc_ = new CachingAllocator(caching);
  }
  ~DeviceAllocator() override { delete alloc_; }

 private:
  CachingAllocator& get(const Napi::CallbackInfo& info) {
    if (alloc_ == nullptr) throw Napi::Error::New(info.Env(), "DeviceAllocator is disposed");
    return *alloc_;
  }
  Napi::Value Malloc(const Napi::CallbackInfo& info) {
    Args a(info, 1, "DeviceAllocator.malloc");
    return ptrValue(info.Env(), get(info).allocate(a.size(0)));
  }
  Napi::Value Free(const Napi::CallbackInfo& info) {
    Args a(info, 1, "DeviceAllocator.free");
    get(info).release(a.ptr(0));
    return info.Env().Undefined();
  }
  Napi::Value EmptyCache(const Napi::CallbackInfo& info) {
    get(info).emptyCache();
    return info.Env().Undefined();
  }
  Napi::Value Stats(const Napi::CallbackInfo& info) {
    const AllocatorStats& s = get(info).stats();
    Napi::Env env = info.Env();
    Napi::Object o = Napi::Object::New(env);
    auto num = [&](const char* k, double v) { o.Set(k, Napi::Number::New(env, v)); };
    num("bytesInUse", static_cast<double>(s.bytesInUse));
    num("bytesRequested", static_cast<double>(s.bytesRequested));
    num("bytesReserved", static_cast<double>(s.bytesReserved));
    num("bytesCached", static_cast<double>(s.bytesReserved - s.bytesInUse));
    num("peakBytesInUse", static_cast<double>(s.peakBytesInUse));
    num("peakBytesReserved", static_cast<double>(s.peakBytesReserved));
    num("numAllocs", static_cast<double>(s.numAllocs));
    num("numFrees", static_cast<double>(s.numFrees));
    num("numCacheHits", static_cast<double>(s.numCacheHits));
    num("numCudaMallocs", static_cast<double>(s.numCudaMallocs));
    num("numCudaFrees", static_cast<double>(s.numCudaFrees));
    num("numOomRetries", static_cast<double>(s.numOomRetries));
    o.Set("caching", Napi::Boolean::New(env, alloc_->caching()));
    return o;
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    delete alloc_;
    alloc_ = nullptr;
    return info.Env().Undefined();
  }
  CachingAllocator* alloc_ = nullptr;
};

}  // namespace

void initAllocator(Napi::Env env, Napi::Object exports) {
  exports.Set("DeviceAllocator", DeviceAllocator::Define(env));
}

}  // namespace hs
