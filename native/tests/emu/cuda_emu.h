// CPU emulation of the CUDA subset used by native/kernels/{attention,sampling,hisparse}*.cu and the tests in
// native/tests/, so that the real kernel sources and test programs run without a GPU (g++,
// force-included with -include). One OS thread per CUDA thread, CTAs one after another; warp
// collectives (shuffles, ballot, ldmatrix, mma) exchange values through a per-warp area between
// two std::barrier phases; __syncthreads is a CTA barrier; exited threads drop out of both
// barriers (as on sm_70+). ldmatrix and mma follow the PTX ISA fragment layouts (m8n8.x4[.trans],
// m16n8k16 row.col bf16 -> f32). cp.async copies land at issue (HS_EMU_CP_ASYNC=eager, default)
// or only when a cp.async.wait_group retires their group (HS_EMU_CP_ASYNC=late): the first
// exposes reuse of a buffer still being read, the second a read before the matching wait.
// This checks indexing, masking, pipeline and reduction logic; it says nothing about speed and
// cannot see hardware-specific behaviour beyond the modelled semantics.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#undef __launch_bounds__
#define __launch_bounds__(...)

// ---- built-in variables ----------------------------------------------------------------------
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

namespace hs_emu {

/** Warp exchange area: each lane publishes up to 16 words between two barrier phases. */
struct Warp {
  std::barrier<> bar{32};
  uint32_t slot[32][16];
};

/** One CTA in flight. */
struct Cta {
  std::barrier<>* bar;
  Warp* warps;
  unsigned char* smem;
};

extern thread_local Cta* tlCta;
extern thread_local int tlLane;
extern unsigned char gSmem[];  // the CTA's shared memory (CTAs run one at a time)
constexpr size_t kSmemBytes = 256 * 1024;

inline Warp& warp() { return tlCta->warps[threadIdx.x / 32]; }

/** Publishes `words` of this lane, waits for the warp, runs f(slots), waits again. */
template <typename F>
inline void warpExchange(const uint32_t* words, int n, F f) {
  Warp& w = warp();
  std::memcpy(w.slot[tlLane], words, n * 4);
  w.bar.arrive_and_wait();
  f(w.slot);
  w.bar.arrive_and_wait();
}

template <typename T>
inline T shflFrom(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  uint32_t words[2] = {0, 0};
  std::memcpy(words, &v, sizeof(T));
  T r;
  warpExchange(words, 2, [&](uint32_t (*slot)[16]) { std::memcpy(&r, slot[src], sizeof(T)); });
  return r;
}

// cp.async emulation: per-thread groups of pending 16-byte copies.
struct PendingCopy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes;
};
extern thread_local std::deque<std::vector<PendingCopy>> tlGroups;
extern thread_local std::vector<PendingCopy> tlOpenGroup;
bool lateCopies();

inline void landCopy(const PendingCopy& c) {
  std::memset(c.dst, 0, 16);
  if (c.bytes > 0) std::memcpy(c.dst, c.src, c.bytes);
}

/** Launches kernel over the grid on the CPU (or records it while a stream captures). */
void runGrid(dim3 grid, dim3 block, const std::function<void()>& body);
bool recordIfCapturing(const std::function<void()>& launch);

template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smemBytes, cudaStream_t,
                   Args... args) {
  if (smemBytes > kSmemBytes) {
    std::fprintf(stderr, "emu: %zu bytes of shared memory requested\n", smemBytes);
    std::abort();
  }
  std::function<void()> run = [=]() {
    runGrid(grid, block, [=]() { kernel(args...); });
  };
  if (!recordIfCapturing(run)) run();
}

}  // namespace hs_emu

// ---- device intrinsics -----------------------------------------------------------------------
inline void __syncthreads() { hs_emu::tlCta->bar->arrive_and_wait(); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int laneMask) {
  return hs_emu::shflFrom(v, hs_emu::tlLane ^ laneMask);
}
template <typename T>
inline T __shfl_up_sync(unsigned, T v, unsigned delta) {
  const int src = hs_emu::tlLane >= static_cast<int>(delta) ? hs_emu::tlLane - static_cast<int>(delta) : hs_emu::tlLane;
  return hs_emu::shflFrom(v, src);
}
inline unsigned __ballot_sync(unsigned, int pred) {
  uint32_t w = pred ? 1u : 0u;
  unsigned r = 0;
  hs_emu::warpExchange(&w, 1, [&](uint32_t (*slot)[16]) {
    for (int l = 0; l < 32; ++l) r |= (slot[l][0] & 1u) << l;
  });
  return r;
}
inline int __ffs(unsigned x) { return __builtin_ffs(static_cast<int>(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
/** Mask of the warp's lanes whose v equals this lane's (every lane of the warp takes part). */
inline unsigned __match_any_sync(unsigned, int v) {
  uint32_t w = static_cast<uint32_t>(v);
  unsigned r = 0;
  hs_emu::warpExchange(&w, 1, [&](uint32_t (*slot)[16]) {
    for (int l = 0; l < 32; ++l) r |= (slot[l][0] == w ? 1u : 0u) << l;
  });
  return r;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline unsigned long long __float2ull_rz(float f) { return static_cast<unsigned long long>(f); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline float __log2f(float x) { return std::log2(x); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicMin(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
inline double __dmul_rn(double a, double b) { return a * b; }  // g++ -std=c++20 does not contract
inline double __dadd_rn(double a, double b) { return a + b; }
inline long long __double_as_longlong(double d) {
  long long r;
  std::memcpy(&r, &d, 8);
  return r;
}
template <typename T>
inline T __ldcs(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __syncwarp(unsigned = 0xffffffffu) { hs_emu::warp().bar.arrive_and_wait(); }
template <typename T>
inline T __shfl_sync(unsigned, T v, int srcLane) {
  return hs_emu::shflFrom(v, srcLane & 31);
}
// IEEE round-to-nearest arithmetic (x86-64 SSE does exactly this; -std=c++20 does not contract).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __double2float_rn(double d) { return static_cast<float>(d); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// ---- PTX wrappers of native/kernels/attention_tile.cuh (built with HS_ATTN_HOST_EMU) ---------
namespace hs_attn {

inline uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - hs_emu::gSmem);
}
inline void cpAsync16(uint32_t dst, const void* src, int srcBytes) {
  hs_emu::PendingCopy c{hs_emu::gSmem + dst, static_cast<const unsigned char*>(src), srcBytes};
  if (dst + 16 > hs_emu::kSmemBytes || (dst & 15) != 0) {
    std::fprintf(stderr, "emu: bad cp.async destination %u\n", dst);
    std::abort();
  }
  if (hs_emu::lateCopies()) {
    hs_emu::tlOpenGroup.push_back(c);
  } else {
    hs_emu::landCopy(c);
  }
}
inline void stShared16(uint32_t dst, uint4 v) {
  if (dst + 16 > hs_emu::kSmemBytes || (dst & 15) != 0) {
    std::fprintf(stderr, "emu: bad st.shared destination %u\n", dst);
    std::abort();
  }
  std::memcpy(hs_emu::gSmem + dst, &v, 16);
}
inline void cpAsyncCommit() {
  hs_emu::tlGroups.push_back(std::move(hs_emu::tlOpenGroup));
  hs_emu::tlOpenGroup.clear();
}
template <int N>
inline void cpAsyncWait() {
  while (hs_emu::tlGroups.size() > static_cast<size_t>(N)) {
    for (const auto& c : hs_emu::tlGroups.front()) hs_emu::landCopy(c);
    hs_emu::tlGroups.pop_front();
  }
}

/** ldmatrix.m8n8.x4[.trans].b16: lanes 8i..8i+7 address the rows of matrix i -> register i. */
inline void emuLdmatrix(uint32_t (&r)[4], uint32_t addr, bool trans) {
  uint32_t a = addr;
  const int lane = hs_emu::tlLane;
  const int g = lane >> 2, t = lane & 3;
  hs_emu::warpExchange(&a, 1, [&](uint32_t (*slot)[16]) {
    for (int i = 0; i < 4; ++i) {
      auto elem = [&](int row, int col) {
        const uint32_t rowAddr = slot[8 * i + row][0];
        if ((rowAddr & 15) != 0 || rowAddr + 16 > hs_emu::kSmemBytes) {
          std::fprintf(stderr, "emu: bad ldmatrix row address %u\n", rowAddr);
          std::abort();
        }
        uint16_t v;
        std::memcpy(&v, hs_emu::gSmem + rowAddr + 2 * col, 2);
        return static_cast<uint32_t>(v);
      };
      const uint32_t lo = trans ? elem(2 * t, g) : elem(g, 2 * t);
      const uint32_t hi = trans ? elem(2 * t + 1, g) : elem(g, 2 * t + 1);
      r[i] = lo | (hi << 16);
    }
  });
}
inline void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) { emuLdmatrix(r, addr, false); }
inline void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t addr) { emuLdmatrix(r, addr, true); }

inline float emuBf16(uint32_t bits16) {
  const uint32_t u = (bits16 & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/** mma.m16n8k16.row.col f32.bf16.bf16.f32 with the PTX fragment layouts (attention_tile.cuh). */
inline void mmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t words[6] = {a[0], a[1], a[2], a[3], b0, b1};
  const int lane = hs_emu::tlLane;
  const int g = lane >> 2, t = lane & 3;
  float out[4];
  hs_emu::warpExchange(words, 6, [&](uint32_t (*slot)[16]) {
    auto A = [&](int row, int k) {  // owner lane of A[row][k]
      const int ol = (row % 8) * 4 + (k % 8) / 2;
      const int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
      return emuBf16(slot[ol][reg] >> (16 * (k & 1)));
    };
    auto B = [&](int k, int n) {
      const int ol = n * 4 + (k % 8) / 2;
      const int reg = k >= 8 ? 5 : 4;
      return emuBf16(slot[ol][reg] >> (16 * (k & 1)));
    };
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
      float acc = c[e];
      for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);
      out[e] = acc;
    }
  });
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}
inline float fastExp2(float x) { return std::exp2(x); }

}  // namespace hs_attn
