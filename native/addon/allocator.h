// A caching device allocator (the idea of PyTorch's CUDACachingAllocator, without block
// splitting): freed blocks go to a size-ordered cache and are handed out again to requests that
// fit them closely, so steady-state steps do no cudaMalloc/cudaFree (both synchronise the device
// and are not allowed during graph capture).
//
// Stream semantics: blocks are meant for one stream (the backend's). A block freed while kernels
// still use it may be handed out again at once; that is safe for work queued later on the same
// stream. Work on other streams must be ordered with events by the caller.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

namespace hs {

struct AllocatorStats {
  size_t bytesInUse = 0;       ///< bytes of blocks handed out (rounded sizes)
  size_t bytesRequested = 0;   ///< bytes asked for by live allocations (unrounded)
  size_t bytesReserved = 0;    ///< bytes obtained from cudaMalloc and not yet returned
  size_t peakBytesInUse = 0;
  size_t peakBytesReserved = 0;
  uint64_t numAllocs = 0;      ///< allocate() calls
  uint64_t numFrees = 0;       ///< release() calls
  uint64_t numCacheHits = 0;   ///< allocations served from the cache
  uint64_t numCudaMallocs = 0;
  uint64_t numCudaFrees = 0;
  uint64_t numOomRetries = 0;  ///< cudaMalloc failures retried after emptying the cache
};

class CachingAllocator {
 public:
  /** caching = false: exact sizes, cudaMalloc/cudaFree on every call (for compute-sanitizer). */
  explicit CachingAllocator(bool caching) : caching_(caching) {}
  ~CachingAllocator() { releaseAll(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /**
   * Returns a device block of at least `bytes` bytes, 256-byte aligned (cudaMalloc alignment).
   * @throws std::runtime_error when the device has no room even after emptying the cache.
   */
  void* allocate(size_t bytes);
  /** Returns a block to the cache (or to the device when not caching). @throws on an unknown pointer. */
  void release(void* ptr);
  /** cudaFree of every cached block. */
  void emptyCache();
  /** Frees every block, live or cached (dispose). Errors are ignored (the device may be gone). */
  void releaseAll();
  const AllocatorStats& stats() const { return stats_; }
  bool caching() const { return caching_; }

  /** Size class of a request: 512-byte multiples below 1 MiB, 2 MiB multiples above. */
  static size_t roundSize(size_t bytes);

 private:
  struct Block {
    size_t size;       ///< rounded size (what the block holds)
    size_t requested;  ///< bytes asked for
  };
  void* cudaAlloc(size_t size);
  const bool caching_;
  std::unordered_map<void*, Block> live_;
  std::multimap<size_t, void*> cached_;  ///< free blocks by size
  AllocatorStats stats_;
};

}  // namespace hs
