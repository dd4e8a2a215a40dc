// Helpers shared by the standalone CUDA tests and benchmarks in native/tests/ (no Node needed):
// checked CUDA calls, a seeded RNG, bf16 conversion on the host, device buffers, result tallies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

/** Aborts with the CUDA error string and call site when a CUDA call fails. */
#define HS_CHECK(call)                                                                                  \
  do {                                                                                                  \
    cudaError_t err_ = (call);                                                                          \
    if (err_ != cudaSuccess) {                                                                          \
      std::fprintf(stderr, "CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(err_),                 \
                   cudaGetErrorString(err_), __FILE__, __LINE__, #call);                                \
      std::exit(2);                                                                                     \
    }                                                                                                   \
  } while (0)

namespace hs_test {

/** SplitMix64 generator: deterministic, seedable, good enough for test data. */
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /** Uniform in [0, 1). */
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  /** Uniform in [lo, hi). */
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /** Uniform integer in [0, n). */
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  /** Standard normal (Box-Muller). */
  double normal() {
    const double u1 = uniform() + 1e-300;
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

/** bf16 bits -> float (exact). */
inline float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/** float -> bf16 bits, round to nearest even (NaN stays NaN). */
inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/** bf16 NaN bit pattern used to poison buffers. */
constexpr uint16_t kBf16NaN = 0xffff;

/** A random bf16 value in +-[lo, hi] (never zero when lo > 0). */
inline uint16_t randomBf16(Rng& rng, double lo, double hi) {
  const double mag = rng.uniform(lo, hi);
  return floatToBf16(static_cast<float>(rng.uniform() < 0.5 ? -mag : mag));
}

/** Owning device buffer of T (cudaMalloc / cudaFree). */
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : count(n) {
    if (n > 0) HS_CHECK(cudaMalloc(&ptr, n * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), count(o.count) {
    o.ptr = nullptr;
    o.count = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr) cudaFree(ptr);
      ptr = o.ptr;
      count = o.count;
      o.ptr = nullptr;
      o.count = 0;
    }
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  size_t bytes() const { return count * sizeof(T); }
  void upload(const std::vector<T>& h) {
    if (h.size() != count) {
      std::fprintf(stderr, "upload size mismatch: %zu vs %zu\n", h.size(), count);
      std::exit(2);
    }
    if (count > 0) HS_CHECK(cudaMemcpy(ptr, h.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(count);
    if (count > 0) HS_CHECK(cudaMemcpy(h.data(), ptr, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
  /** Fills every byte with `byte` (0xff makes bf16/f32 NaNs). */
  void poison(int byte = 0xff) {
    if (count > 0) HS_CHECK(cudaMemset(ptr, byte, bytes()));
  }
};

/** Pass/fail tally printed at the end of a test program. */
struct Tally {
  int passed = 0;
  int failed = 0;
  void record(bool ok, const char* name) {
    if (ok) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAIL: %s\n", name);
    }
  }
  int finish(const char* program) const {
    std::printf("%s: %d passed, %d failed\n", program, passed, failed);
    return failed == 0 ? 0 : 1;
  }
};

/** True if argv holds `flag`. */
inline bool hasFlag(int argc, char** argv, const char* flag) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return true;
  return false;
}

/** Value after `flag` in argv, or nullptr. */
inline const char* flagValue(int argc, char** argv, const char* flag) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  return nullptr;
}

}  // namespace hs_test
