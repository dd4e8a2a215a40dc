// Launcher of the generated-weight kernel (native/kernels/dummy_init.cu): `--load-format dummy`
// weights made on the device. Same conventions as kernels.h (asynchronous on `stream`, returns
// cudaGetLastError(), graph-capturable, no allocation).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Writes elements [first, first + count) of a generated fill to dst[0 .. count) (the rule of
 * src/backends/weight_fill.ts, bit for bit):
 *   pair c = i / 2 (64-bit), lo = c mod 2^32, hi = c / 2^32;
 *   r = mix32(mix32(lo ^ key0) ^ (key1 + hi * 0x9e3779b9)), mix32 = lowbias32 (hash-prospector);
 *   dst[i - first] = table[i even ? r & 0xffff : r >> 16].
 * With table == nullptr every element is `constantBits` instead. Elements are copied as bits:
 * dtype (HsDtype) only gives their size (f32: 4 bytes; bf16, f16: 2), and the 65,536-entry table
 * holds values already in dst's dtype. dst: [count] of dtype; table: [65536] of dtype or null.
 */
cudaError_t hsFillWeight(void* dst, int dtype, size_t count, unsigned long long first, const void* table,
                         uint32_t constantBits, uint32_t key0, uint32_t key1, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
