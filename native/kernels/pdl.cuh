// Programmatic dependent launch (PDL, CUDA 11.8+, sm_90: griddepcontrol) for the kernels of a
// decode step, and the process-wide launch options (hsSetKernelLaunchOptions, kernels.h).
//
// Without PDL a kernel of a CUDA stream (or graph) starts only after its predecessor has fully
// drained: at batch-1 decode every one of the ~10 kernels per layer pays a launch, a ramp-up and
// a tail of one or two microseconds. With PDL (cudaLaunchAttributeProgrammaticStreamSerialization)
// the next kernel's CTAs may start as soon as every CTA of the running kernel has executed
// griddepcontrol.launch_dependents (pdlLaunchDependents), and they block in griddepcontrol.wait
// (pdlWait) until the predecessor has completed and its memory is visible. What a kernel does
// before pdlWait must not touch memory another kernel writes or reads: only constant data (the
// skinny GEMM's weights, gemv.cu) may be read there; nothing may be written. Every kernel launched
// through launchPdl must call pdlWait on every path before its first such access. Since each
// kernel waits for its predecessor, which waited for its own, the ordering is transitive.
// Kernels launched without the attribute (cuBLAS, every other kernel) keep full serialization,
// and pdlWait returns at once in a grid launched without it.
// Internal header of native/kernels (CUDA C++); the C entry point is in launch_options.cu.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <utility>

#include "kernels.h"

namespace hs {

/**
 * The launch options in force (HsKernelLaunchOption bits): HS_LAUNCH_DEFAULT, or the integer in
 * the environment variable HISPARSE_KERNEL_LAUNCH when set at the first use.
 */
inline std::atomic<int>& kernelLaunchOptions() {
  static std::atomic<int> v{[] {
    const char* s = std::getenv("HISPARSE_KERNEL_LAUNCH");
    return s != nullptr && *s != '\0' ? std::atoi(s) & HS_LAUNCH_ALL : HS_LAUNCH_DEFAULT;
  }()};
  return v;
}

/** True when launch option `bit` is on. */
inline bool launchOption(int bit) { return (kernelLaunchOptions().load(std::memory_order_relaxed) & bit) != 0; }

/** Lets the next kernel of the stream launch (its CTAs then block in pdlWait). No-op without PDL. */
__device__ __forceinline__ void pdlLaunchDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(HS_ATTN_HOST_EMU)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/** Blocks until the preceding kernel has completed and its writes are visible. No-op without PDL. */
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(HS_ATTN_HOST_EMU)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/**
 * kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
 * when HS_LAUNCH_PDL is on and `stream` is not the legacy default stream (0), where launches stay
 * fully serialized (the kernel must follow the pdlWait rule of the file comment either way).
 * Returns the launch status. Graph-capturable (CUDA 12.3+ records the programmatic edge).
 */
template <typename... KArgs, typename... Args>
inline cudaError_t launchPdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
#ifndef HS_ATTN_HOST_EMU
  if (stream != nullptr && launchOption(HS_LAUNCH_PDL)) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  }
#endif
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

}  // namespace hs
