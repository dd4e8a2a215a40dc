// GPU sampler for the CUDA backend (plain C ABI): greedy, temperature, top-k, top-p and min-p
// over fp32 logits, implementing the rule of `DeviceSamplingRows` in src/backends/backend.ts.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Device scratch bytes hsSample needs for B rows of V logits. The one-CTA-per-row kernel keeps
 * all its state in shared memory, so this is 0; callers should still allocate what it returns.
 */
size_t hsSampleWorkspaceBytes(int B, int V);

/**
 * Samples one token id per row. All pointers are device pointers; per-row arrays have B entries.
 *   logits      [B, V] f32 (finite or -inf; at least one finite value per row)
 *   temperature [B]: <= 0 (or NaN) takes the argmax, lowest id on ties
 *   topK        [B]: 0 (or >= V) disables
 *   topP        [B]: >= 1 disables
 *   minP        [B]: <= 0 disables
 *   uniform     [B]: u in [0, 1) drawn by the host from the request's generator
 *   outIds      [B] i32 result
 * For temperature > 0 (the rule in src/backends/backend.ts):
 *   p_i = expf((x_i - max x) * (1/T)) * (1/Z), Z = sum_i expf((x_i - max x) * (1/T)), all fp32
 *   (Z summed in a fixed order, so the result is deterministic);
 *   keep i iff p_i >= tK (the k-th largest p), p_i >= minP * max p, and p_i >= tP (the largest
 *   p value t whose tokens {p >= t} hold at least topP of the total mass);
 *   return the first kept id (ascending) whose running kept mass exceeds u * (kept mass), or the
 *   last kept id if rounding leaves none.
 * Masses are summed exactly in 64-bit fixed point (p * 2^62, truncated; error < 2^-62 per token),
 * so the thresholds and the inverse CDF are exact functions of the fp32 p values.
 * One CTA of 1024 threads per row; V up to 2^31 / 2. Returns cudaErrorInvalidValue for bad
 * sizes or null pointers, else the launch status. Graph-capturable (no sync, no allocation).
 */
cudaError_t hsSample(const float* logits, int B, int V, const float* temperature, const int* topK,
                     const float* topP, const float* minP, const float* uniform, int* outIds,
                     void* workspace, size_t workspaceBytes, cudaStream_t s);

#ifdef __cplusplus
}
#endif
