// Host-side helpers shared by the attention launchers (attention_decode.cu, attention_prefill.cu):
// argument validation, the decode split policy (also used inside the kernels), workspace sizing
// and the one-time shared-memory limit. Internal header: not part of the C ABI.
#pragma once

#include <atomic>

#include "attention_tile.cuh"

namespace hs_attn {

/** Smallest decode split (tokens): below this the partial writes and merge outweigh the gain. */
constexpr int kMinSplitTokens = 256;
/** Most decode splits per (request, kv head). */
constexpr int kMaxSplits = 256;
/** Decode CTAs aimed at per SM (about 4 waves at 2 resident CTAs per SM) when choosing splits. */
#ifndef HS_DECODE_CTAS_PER_SM
#define HS_DECODE_CTAS_PER_SM 8
#endif
constexpr int kDecodeCtasPerSm = HS_DECODE_CTAS_PER_SM;
/** Query heads per decode CTA (one m16 slab). */
constexpr int kDecodeHeadsPerCta = 16;

/** True for a positive power of two. */
__host__ __device__ inline bool isPow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

/**
 * Checks the sizes both launchers need: pointers set and 16-byte aligned, D in {32, 64, 128}, Hq a
 * multiple of Hkv, qkv row stride a multiple of 8 elements, blockSize a power of two, positive
 * scale and bounds, grid dimensions within CUDA limits.
 */
inline bool validParams(const HsPagedAttentionParams* p) {
  if (p == nullptr || p->qkv == nullptr || p->kvCache == nullptr || p->out == nullptr ||
      p->seqLens == nullptr || p->blockTables == nullptr)
    return false;
  if (p->headDim != 32 && p->headDim != 64 && p->headDim != 128) return false;
  if (p->numKvHeads <= 0 || p->numHeads <= 0 || p->numHeads % p->numKvHeads != 0) return false;
  if (!isPow2(p->blockSize) || p->maxBlocksPerReq <= 0 || p->maxModelLen <= 0) return false;
  if (p->numReqs < 0 || p->numReqs > 65535 || p->numTokens < 0) return false;
  if (p->qkvRowStride < p->numHeads * p->headDim || p->qkvRowStride % 8 != 0) return false;
  // 16-byte vector accesses: tensors must start on 16 bytes (cudaMalloc gives 256).
  const auto misaligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) != 0; };
  if (misaligned(p->qkv) || misaligned(p->kvCache) || misaligned(p->out) || misaligned(p->workspace)) return false;
  if (!(p->scale > 0.f)) return false;
  return true;
}

/**
 * Tokens per decode split for a request of seqLen tokens: ceil(seqLen / numSplits) rounded up
 * to whole tiles, at least minSplitTokens (a multiple of kTileKeys; kMinSplitTokens unless a
 * benchmark set hsSetDecodeMinSplitTokens); 0 when seqLen <= 0. Read from device memory by the
 * kernels, so the split sizes follow the current lengths while the grid stays fixed.
 */
__host__ __device__ inline int decodeSplitTokens(int seqLen, int numSplits, int minSplitTokens) {
  if (seqLen <= 0) return 0;
  int per = (seqLen + numSplits - 1) / numSplits;
  per = (per + kTileKeys - 1) / kTileKeys * kTileKeys;
  return per < minSplitTokens ? minSplitTokens : per;
}

/** Splits holding at least one key for a request of seqLen tokens (<= numSplits). */
__host__ __device__ inline int decodeActiveSplits(int seqLen, int numSplits, int minSplitTokens) {
  const int chunk = decodeSplitTokens(seqLen, numSplits, minSplitTokens);
  return chunk == 0 ? 0 : (seqLen + chunk - 1) / chunk;
}

/**
 * The process-wide smallest split of the decode launches that follow (a benchmark knob; the
 * static split count, and so the workspace, does not depend on it). Default kMinSplitTokens.
 */
inline std::atomic<int>& decodeMinSplitTokens() {
  static std::atomic<int> v{kMinSplitTokens};
  return v;
}

/**
 * Static number of decode splits: enough CTAs for kDecodeCtasPerSm per SM over
 * numReqs * kvHeadTiles (request, kv head tile) pairs, at most ceil(maxModelLen /
 * kMinSplitTokens) and kMaxSplits, at least 1.
 */
inline int decodeNumSplits(int numReqs, int kvHeadTiles, int maxModelLen, int numSms) {
  const long long pairs = static_cast<long long>(numReqs > 0 ? numReqs : 1) * kvHeadTiles;
  const long long target = static_cast<long long>(numSms) * kDecodeCtasPerSm;
  long long splits = (target + pairs - 1) / pairs;
  long long cap = (maxModelLen + kMinSplitTokens - 1) / kMinSplitTokens;
  if (cap > kMaxSplits) cap = kMaxSplits;
  if (splits > cap) splits = cap;
  return splits < 1 ? 1 : static_cast<int>(splits);
}

/** SM count of the current device, or `fallback` if it cannot be read. */
inline int currentSmCount(int fallback) {
  int dev = 0;
  int sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return fallback;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) return fallback;
  return sms;
}

/**
 * Raises `kernel`'s dynamic shared-memory limit to `bytes` once per device (`doneMask`: one bit
 * per device id < 64, owned by the caller's launcher instantiation). Later calls, including those
 * made while a stream is being captured into a CUDA graph, make no CUDA call.
 */
template <typename Kernel>
inline cudaError_t ensureSmemLimit(Kernel kernel, int bytes, std::atomic<unsigned long long>& doneMask) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  const unsigned long long bit = 1ull << (dev & 63);
  if (doneMask.load(std::memory_order_acquire) & bit) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) doneMask.fetch_or(bit, std::memory_order_acq_rel);
  return err;
}

/** Rounds a byte count up to 256 (workspace sub-buffer alignment). */
inline size_t align256(size_t v) { return (v + 255) / 256 * 256; }

/**
 * Workspace bytes of one decode launch: fp32 partial outputs [numReqs, splits, Hq, D] then
 * their log2-sum-exp [numReqs, splits, Hq], each 256-byte aligned; 0 when splits == 1.
 */
inline size_t decodeWorkspaceBytes(int numReqs, int splits, int numHeads, int headDim) {
  if (splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(numReqs) * splits * numHeads;
  return align256(rows * headDim * sizeof(float)) + align256(rows * sizeof(float));
}

}  // namespace hs_attn
