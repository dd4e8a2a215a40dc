// MoE routing (hsMoeRoute, moe.h): softmax or sigmoid scores, correction bias, group limit, top-k,
// renormalisation and routed scaling, one warp per token. The rounding points are the CPU
// oracle's (src/backends/cpu/kernels/moe.ts), which follows HF transformers' fp32 routers
// (Qwen3MoeTopKRouter; DeepseekV3TopkRouter / Glm4MoeTopkRouter "noaux_tc"): scores in float64
// rounded to f32, f32 adds, float64 for the eps and the scaling factor. The one difference in
// order: the softmax denominator is a warp tree sum in float64 where the oracle sums in index
// order; the two differ by ~1e-16 relative, which changes an f32 score only when it sits that
// close to a rounding boundary.
#include "moe_route.cuh"

namespace hs {
namespace {

using namespace moe_route;

__global__ void __launch_bounds__(kRouteWarps * 32) moeRouteKernel(const RouteArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= a.T) return;  // whole warps only: the rest of the kernel syncs per warp
  const int E = a.E;
  routeToken(a, a.logits + static_cast<size_t>(t) * E, t, reinterpret_cast<float*>(smem) + warp * routeWarpFloats(E),
             lane);
}

}  // namespace
}  // namespace hs

extern "C" cudaError_t hsMoeRoute(const float* logits, const float* bias, int32_t* topkIds, float* topkWeights,
                                  int numTokens, int numExperts, int topK, int scoring, int renormalize,
                                  int numGroups, int topkGroup, double routedScalingFactor, cudaStream_t stream) {
  const int E = numExperts;
  if (numTokens < 0 || E < 1 || E > HS_MOE_MAX_EXPERTS || topK < 1 || topK > E || topK > HS_MOE_MAX_TOPK)
    return cudaErrorInvalidValue;
  if (scoring != HS_MOE_SOFTMAX && scoring != HS_MOE_SIGMOID) return cudaErrorInvalidValue;
  if (numGroups < 1 || numGroups > 32 || E % numGroups != 0 || topkGroup < 1 || topkGroup > numGroups ||
      topK > topkGroup * (E / numGroups))
    return cudaErrorInvalidValue;
  if (logits == nullptr || topkIds == nullptr || topkWeights == nullptr) return cudaErrorInvalidValue;
  if (numTokens == 0) return cudaSuccess;
  hs::RouteArgs a{logits, bias, topkIds, topkWeights, numTokens, E, topK, scoring, renormalize, numGroups, topkGroup,
                  routedScalingFactor};
  const int blocks = hs::ceilDiv(numTokens, hs::kRouteWarps);
  const size_t smem = sizeof(float) * hs::kRouteWarps * hs::routeWarpFloats(E);
  hs::moeRouteKernel<<<blocks, hs::kRouteWarps * 32, smem, stream>>>(a);
  return cudaGetLastError();
}
