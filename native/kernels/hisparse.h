// Launchers of the HiSparse kernels (plain C ABI, conventions of kernels.h).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Swap-in of KV pages from the host tier: for i < count, copies `bytesPerCopy` bytes from
 * `src + srcOffsets[i]` to `dst + dstOffsets[i]`. `src` is pinned host memory mapped into the
 * device address space (cudaHostAlloc(..., cudaHostAllocMapped); with UVA the host pointer itself
 * works), so the GPU reads it directly over the host link with 16-byte loads: no CPU work and no
 * per-page cudaMemcpyAsync (DESIGN.md §4 step 3; SGLang HiSparse's swap-in kernel).
 * The grid is sized by `maxCopies` (static, graph-capturable); the live count is read from
 * `count` on the device when non-null (the resolver writes it), else it is maxCopies.
 * Requirements: bytesPerCopy a multiple of 16; every offset and both bases 16-byte aligned.
 * dst: device memory; srcOffsets, dstOffsets: int64 [maxCopies] in device memory.
 */
cudaError_t hsSwapInPages(void* dst, const void* src, const int64_t* srcOffsets, const int64_t* dstOffsets,
                          const int32_t* count, int maxCopies, size_t bytesPerCopy, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
