// Paged decode attention: split-KV ("flash-decoding", Dao et al. 2023) on tensor cores.
//
// Grid (numSplits, Hkv * headTiles, numReqs); CTA = 4 warps = one request, one kv head, up to 16
// q heads of its GQA group (the 16 rows of one m16 slab), one split of the context. The CTA
// streams its split through shared memory in 64-key tiles (cp.async, kStages deep); warp w owns
// keys 16w..16w+15 of every tile, so each K/V element is read from HBM once and used by all q
// heads of the group. Each warp keeps its own online-softmax state; the 4 states are merged
// in shared memory at the end. With one split the CTA writes bf16 output directly; otherwise it
// writes a normalised fp32 partial and its log2-sum-exp, and decodeMergeKernel combines the
// active splits. Split sizes are computed in the kernels from seqLens (device memory), so the
// grid depends only on static sizes and the launch can live in a CUDA graph.
// attention_decode_merge.cuh holds the merge kernel, the kernel arguments (DecodeArgs) and the
// row addressing (decodeRow) shared by both kernels.
// HiSparse (hsSparseDecodeAttention) reuses the same kernels: a row flagged sparse reads its own
// block table and length per (request, kv head) instead of the request's; the q/out row may be
// given per request (tokenRow, for decodes inside a mixed batch). A row whose tables equal the
// dense ones goes through exactly the same arithmetic, so it gives the dense result bit for bit.
#include "attention_decode_merge.cuh"
#include "pdl.cuh"

namespace hs_attn {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * 32;
static_assert(kDecodeWarps * 16 == kTileKeys, "each decode warp owns 16 keys of a tile");

// Pipeline depth per head dim (the benchmark builds variants with other values). D=128: 2 stages
// measured 1-6% faster than 3 on the H200 at batch sizes that fill the GPU with (request, kv
// head) pairs (bench/results/cuda_kernels_h200.md); with fewer pairs than SMs (batch 1 .. 16 of
// an 8-kv-head model) each CTA streams only a few tiles, and kDeepStages128 (two tiles in flight,
// 2 CTAs per SM) is used instead when HS_LAUNCH_DEEP_DECODE is on (kernels.h).
#ifndef HS_DECODE_STAGES_128
#define HS_DECODE_STAGES_128 2
#endif
#ifndef HS_DECODE_STAGES_64
#define HS_DECODE_STAGES_64 4
#endif
constexpr int kDeepStages128 = 3;
/** The deep launch is used for at most this many (request, kv head tile) pairs (Llama-8B: batch <= 4). */
constexpr int kDeepMaxPairs = 32;
/** Resident deep CTAs per SM (about 101 KiB of shared memory each). */
constexpr int kDeepCtasPerSm = 2;

/** Default pipeline depth of head dim D. */
template <int D>
constexpr int defaultDecodeStages() {
  return D == 128 ? HS_DECODE_STAGES_128 : HS_DECODE_STAGES_64;
}

/** Tile geometry: kStages stages of K+V tiles (32 KiB per stage at D=128, 16 KiB at D=64). */
template <int D, int kStagesT = defaultDecodeStages<D>()>
struct DecodeCfg {
  static constexpr int kStages = kStagesT;
  static constexpr int kQBytes = kDecodeHeadsPerCta * D * 2;
  static constexpr int kTileBytes = kTileKeys * D * 2;
  using Loader = KvTileLoader<D, kDecodeThreads, kStages>;
  static constexpr int kIdOffset = kQBytes + 2 * kStages * kTileBytes;
  static constexpr int kSmemBytes = kIdOffset + Loader::kIdBytes;
  /** Epilogue scratch: per warp m[16], l[16], o[16][D + 8] fp32 (padded rows, no bank conflicts). */
  static constexpr int kOStride = D + 8;
  static constexpr int kEpilogueBytes = kDecodeWarps * 16 * (2 + kOStride) * 4;
  static_assert(kEpilogueBytes <= kSmemBytes, "epilogue scratch must fit in the pipeline's shared memory");
};

/** Writes zeros to the first nRows heads (from headBase) of output row `row`. */
template <int D>
__device__ void zeroOutputRows(__nv_bfloat16* out, int row, int numHeads, int headBase, int nRows) {
  uint4* dst = reinterpret_cast<uint4*>(out + (static_cast<size_t>(row) * numHeads + headBase) * D);
  for (int i = threadIdx.x; i < nRows * D / 8; i += blockDim.x) dst[i] = make_uint4(0, 0, 0, 0);
}

/**
 * Merges the 4 warps' softmax states through shared memory and writes either the bf16 output
 * (numSplits == 1) or the fp32 partial + log2-sum-exp of this split. Caller has drained cp.async
 * and synchronised, so the pipeline's shared memory is free.
 */
template <int D, int kStages>
__device__ void decodeEpilogue(const DecodeArgs& a, unsigned char* smem, const float (&o)[1][D / 8][4],
                               const float (&m)[1][2], const float (&l)[1][2], int req, int outRow, int split,
                               int headBase, int nRows) {
  using Cfg = DecodeCfg<D, kStages>;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  float* sM = reinterpret_cast<float*>(smem);                       // [warps][16]
  float* sL = sM + kDecodeWarps * 16;                               // [warps][16]
  float* sO = sL + kDecodeWarps * 16 + warp * 16 * Cfg::kOStride;   // this warp's [16][kOStride]
  if (t == 0) {
    sM[warp * 16 + g] = m[0][0];
    sM[warp * 16 + g + 8] = m[0][1];
    sL[warp * 16 + g] = l[0][0];
    sL[warp * 16 + g + 8] = l[0][1];
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    const int d = dt * 8 + 2 * t;
    *reinterpret_cast<float2*>(sO + g * Cfg::kOStride + d) = make_float2(o[0][dt][0], o[0][dt][1]);
    *reinterpret_cast<float2*>(sO + (g + 8) * Cfg::kOStride + d) = make_float2(o[0][dt][2], o[0][dt][3]);
  }
  __syncthreads();
  // 8 threads per row; thread covers d = 32k + 4*(tid % 8) .. +3 for k < D/32 (conflict-free reads).
  const int row = threadIdx.x >> 3;
  if (row >= nRows) return;
  const float* sOAll = sL + kDecodeWarps * 16;
  float mMax = kNegInf;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) mMax = fmaxf(mMax, sM[w * 16 + row]);
  float wgt[kDecodeWarps];
  float lSum = 0.f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) {
    wgt[w] = fastExp2((sM[w * 16 + row] - mMax) * a.scaleLog2);  // empty warp: m = -inf -> 0
    lSum += wgt[w] * sL[w * 16 + row];
  }
  const float inv = 1.f / lSum;  // lSum > 0: warp 0 always holds the split's first key
  const int head = headBase + row;
  const size_t partRow = (static_cast<size_t>(req) * a.numSplits + split) * a.numHeads + head;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) {
    const int d = k * 32 + 4 * (threadIdx.x & 7);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float4 v = *reinterpret_cast<const float4*>(sOAll + (w * 16 + row) * Cfg::kOStride + d);
      acc.x += wgt[w] * v.x;
      acc.y += wgt[w] * v.y;
      acc.z += wgt[w] * v.z;
      acc.w += wgt[w] * v.w;
    }
    acc = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    if (a.numSplits == 1) {
      uint2 packed = make_uint2(packBf16x2(acc.x, acc.y), packBf16x2(acc.z, acc.w));
      *reinterpret_cast<uint2*>(a.out + (static_cast<size_t>(outRow) * a.numHeads + head) * D + d) = packed;
    } else {
      *reinterpret_cast<float4*>(a.partialO + partRow * D + d) = acc;
    }
  }
  if (a.numSplits > 1 && (threadIdx.x & 7) == 0) a.partialLse[partRow] = mMax * a.scaleLog2 + __log2f(lSum);
}

/**
 * One (split, kv head tile, request) of decode attention; see the file comment. Launched with
 * programmatic dependent launch (pdl.cuh): q and the newest K/V come from the previous kernels,
 * so the kernel waits before its first global access.
 */
template <int D, bool kSparse, int kStages>
__global__ void __launch_bounds__(kDecodeThreads) pagedDecodeKernel(const DecodeArgs a) {
  using Cfg = DecodeCfg<D, kStages>;
  extern __shared__ __align__(128) unsigned char smem[];
  hs::pdlLaunchDependents();
  hs::pdlWait();
  const int split = blockIdx.x;
  const int kvh = blockIdx.y / a.headTiles;
  const int headTile = blockIdx.y - kvh * a.headTiles;
  const int req = blockIdx.z;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int headBase = kvh * a.groupSize + headTile * kDecodeHeadsPerCta;
  const int nRows = min(kDecodeHeadsPerCta, a.groupSize - headTile * kDecodeHeadsPerCta);

  int seqLen;
  int outRow = req;
  const int* btRow = nullptr;
  if constexpr (kSparse) {
    const DecodeRow dr = decodeRow<kSparse>(a, req, kvh);
    if (dr.skip) return;
    seqLen = dr.seqLen;
    outRow = dr.row;
    btRow = dr.bt;
  } else {
    seqLen = decodeRow<false>(a, req, kvh).seqLen;
  }
  const int chunk = decodeSplitTokens(seqLen, a.splitDivisor, a.minSplitTokens);
  const int kvStart = split * chunk;
  const int kvEnd = min(seqLen, kvStart + chunk);
  if (kvStart >= kvEnd) {
    // Only split 0 of a padded row (seqLen 0) writes, and only without a merge pass.
    if (a.numSplits == 1) zeroOutputRows<D>(a.out, outRow, a.numHeads, headBase, nRows);
    return;
  }
  const int numTiles = (kvEnd - kvStart + kTileKeys - 1) / kTileKeys;

  const uint32_t sQ = smemAddr(smem);
  const uint32_t sK0 = sQ + Cfg::kQBytes;
  const uint32_t sV0 = sK0 + kStages * Cfg::kTileBytes;
  const int tokenStride = a.numKvHeads * D;
  const __nv_bfloat16* kvHead = a.kvCache + static_cast<size_t>(kvh) * D;
  if constexpr (!kSparse) btRow = a.blockTables + static_cast<size_t>(req) * a.maxBlocksPerReq;

  // Q rows (zero-filled past the group) join the first cp.async group.
  for (int i = tid; i < kDecodeHeadsPerCta * (D / 8); i += kDecodeThreads) {
    const int r = i / (D / 8);
    const int c = i - r * (D / 8);
    const bool valid = r < nRows;
    const __nv_bfloat16* src =
        valid ? a.qkv + static_cast<size_t>(outRow) * a.qkvRowStride + (headBase + r) * D + c * 8 : a.qkv;
    cpAsync16(sQ + swz<D>(r, c), src, valid ? 16 : 0);
  }
  typename Cfg::Loader loader(reinterpret_cast<int*>(smem + Cfg::kIdOffset), tid);
  loader.prologueIds(btRow, kvStart, kvEnd, a.log2BlockSize);
  __syncthreads();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < numTiles)
      issueKvTile(loader, a, sK0 + st * Cfg::kTileBytes, sV0 + st * Cfg::kTileBytes, kvHead, st, kvStart, tokenStride);
    cpAsyncCommit();
  }

  uint32_t qf[D / 16][4];
  float o[1][D / 8][4];
  float m[1][2] = {{kNegInf, kNegInf}};
  float l[1][2] = {{0.f, 0.f}};
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[0][dt][e] = 0.f;

  for (int it = 0; it < numTiles; ++it) {
    cpAsyncWait<kStages - 2>();
    __syncthreads();  // tile `it` landed for all threads; buffer of tile it-1 is free
    if (it == 0) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) loadAFrag<D>(qf[ks], sQ, 0, ks, lane);
    }
    const int next = it + kStages - 1;
    if (next < numTiles) {
      const int st = next % kStages;
      issueKvTile(loader, a, sK0 + st * Cfg::kTileBytes, sV0 + st * Cfg::kTileBytes, kvHead, next, kvStart, tokenStride);
    }
    loader.storeIds(next + 1);
    loader.loadIds(btRow, next + 2, kvStart, kvEnd, a.log2BlockSize);
    cpAsyncCommit();

    const int st = it % kStages;
    const int keyBase = warp * 16;
    const int firstKey = kvStart + it * kTileKeys + keyBase;
    if (firstKey < kvEnd) {  // warp-uniform: this warp's 16 keys hold at least one valid position
      float s[1][2][4];
      warpScoresRegQ<D, 2>(s, qf, sK0 + st * Cfg::kTileBytes, keyBase, lane);
      if (firstKey + 16 > kvEnd) {
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (firstKey + nt * 8 + 2 * (lane & 3) + (e & 1) >= kvEnd) s[0][nt][e] = kNegInf;
      }
      onlineSoftmax<D, 1, 2>(s, m, l, o, a.scaleLog2);
      warpPV<D, 1, 2>(o, s, sV0 + st * Cfg::kTileBytes, keyBase, lane);
    }
  }
  l[0][0] = quadSum(l[0][0]);
  l[0][1] = quadSum(l[0][1]);
  cpAsyncWait<0>();
  __syncthreads();
  decodeEpilogue<D, kStages>(a, smem, o, m, l, req, outRow, split, headBase, nRows);
}

/** The decode kernel with kStages stages, then (numSplits > 1) the merge; a: complete arguments. */
template <int D, bool kSparse, int kStages>
cudaError_t launchDecodeKernels(const DecodeArgs& a, int numKvHeads, int numReqs, cudaStream_t stream) {
  using Cfg = DecodeCfg<D, kStages>;
  static std::atomic<unsigned long long> smemLimitSet{0};  // per instantiation, one bit per device
  cudaError_t err = ensureSmemLimit(pagedDecodeKernel<D, kSparse, kStages>, Cfg::kSmemBytes, smemLimitSet);
  if (err != cudaSuccess) return err;
  // Splits >= splitDivisor never hold a key (decodeActiveSplits <= splitDivisor): not launched.
  const dim3 grid(a.splitDivisor, numKvHeads * a.headTiles, numReqs);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  err = hs::launchPdl(pagedDecodeKernel<D, kSparse, kStages>, grid, dim3(kDecodeThreads), Cfg::kSmemBytes, stream, a);
  if (err != cudaSuccess || a.numSplits == 1) return err;
  return hs::launchPdl(decodeMergeKernel<D, kSparse>, dim3(a.numHeads, numReqs), dim3(kMergeThreads),
                       mergeSmemBytes<D>(), stream, a);
}

/** Launches decode (+ merge) for head dim D; sizes already validated. sp: HiSparse tables or null (dense). */
template <int D, bool kSparse>
cudaError_t launchDecode(const HsPagedAttentionParams* p, const HsSparseDecodeParams* sp, int numSplits,
                         cudaStream_t stream) {
  DecodeArgs a{};
  if (sp != nullptr) {
    a.headBlockTables = sp->headBlockTables;
    a.headSeqLens = sp->headSeqLens;
    a.headTableStride = sp->headTableStride;
    a.rowFlags = sp->rowFlags;
    a.tokenRow = sp->tokenRow;
    a.onlyFlagged = sp->onlyFlaggedRows;
  }
  a.qkv = p->qkv;
  a.kvCache = p->kvCache;
  a.out = p->out;
  a.seqLens = p->seqLens;
  a.blockTables = p->blockTables;
  a.qkvRowStride = p->qkvRowStride;
  a.maxBlocksPerReq = p->maxBlocksPerReq;
  a.numHeads = p->numHeads;
  a.numKvHeads = p->numKvHeads;
  a.groupSize = p->numHeads / p->numKvHeads;
  a.headTiles = (a.groupSize + kDecodeHeadsPerCta - 1) / kDecodeHeadsPerCta;
  a.log2BlockSize = log2Pow2(p->blockSize);
  a.numSplits = numSplits;
  a.minSplitTokens = decodeMinSplitTokens().load(std::memory_order_relaxed);
  a.scaleLog2 = p->scale * kLog2e;
  a.kvFp8 = p->kvCacheFp8 != 0 ? 1 : 0;
  a.kScale = p->kScale;
  a.vScale = p->vScale;
  if (numSplits > 1) {
    const size_t rows = static_cast<size_t>(p->numReqs) * numSplits * p->numHeads;
    a.partialO = static_cast<float*>(p->workspace);
    a.partialLse = reinterpret_cast<float*>(static_cast<char*>(p->workspace) + align256(rows * D * sizeof(float)));
  }
  a.splitDivisor = numSplits;
  if constexpr (D == 128 && defaultDecodeStages<D>() != kDeepStages128) {
    // Few (request, kv head tile) pairs (batch 1 .. 4): size the splits so that the active CTAs
    // fill one wave of kDeepCtasPerSm per SM (splits of >= 64 keys instead of >= 256: more CTAs
    // at 1K, fewer partials at 32K), each keeping two tiles in flight.
    const long long pairs = static_cast<long long>(p->numReqs) * p->numKvHeads * a.headTiles;
    if (hs::launchOption(HS_LAUNCH_DEEP_DECODE) && pairs <= kDeepMaxPairs && numSplits > 1) {
      const long long wave = static_cast<long long>(currentSmCount(132)) * kDeepCtasPerSm / pairs;
      a.splitDivisor = static_cast<int>(wave < 1 ? 1 : (wave > numSplits ? numSplits : wave));
      if (a.minSplitTokens == kMinSplitTokens) a.minSplitTokens = kTileKeys;  // unless a benchmark set it
      return launchDecodeKernels<D, kSparse, kDeepStages128>(a, p->numKvHeads, p->numReqs, stream);
    }
  }
  return launchDecodeKernels<D, kSparse, defaultDecodeStages<D>()>(a, p->numKvHeads, p->numReqs, stream);
}

/** Validation + split count for a decode launch; returns 0 when the sizes are unsupported. */
int decodeSplitsFor(const HsPagedAttentionParams* p) {
  if (!validParams(p)) return 0;
  const int group = p->numHeads / p->numKvHeads;
  const int headTiles = (group + kDecodeHeadsPerCta - 1) / kDecodeHeadsPerCta;
  return decodeNumSplits(p->numReqs, p->numKvHeads * headTiles, p->maxModelLen, currentSmCount(132));
}

}  // namespace
}  // namespace hs_attn

extern "C" int hsPagedDecodeNumSplits(const HsPagedAttentionParams* p) { return hs_attn::decodeSplitsFor(p); }

extern "C" int hsSetDecodeMinSplitTokens(int tokens) {
  using namespace hs_attn;
  if (tokens <= 0) return decodeMinSplitTokens().load();
  const int t = (tokens + kTileKeys - 1) / kTileKeys * kTileKeys;
  return decodeMinSplitTokens().exchange(t > 4096 ? 4096 : t);
}

extern "C" size_t hsPagedAttentionWorkspaceBytes(int maxNumReqs, int maxNumTokens, int numHeads, int headDim,
                                                 int maxModelLen, int blockSize) {
  using namespace hs_attn;
  (void)maxNumTokens;
  if (maxNumReqs <= 0 || numHeads <= 0 || (headDim != 32 && headDim != 64 && headDim != 128) || maxModelLen <= 0 ||
      !isPow2(blockSize))
    return 0;
  // Worst case over launch sizes: one kv head tile (most splits per request); n * splits(n) is
  // not monotone in n, so take the maximum over every batch size up to maxNumReqs.
  const int sms = currentSmCount(256);
  size_t best = 0;
  for (int n = 1; n <= maxNumReqs; ++n) {
    const size_t b = decodeWorkspaceBytes(n, decodeNumSplits(n, 1, maxModelLen, sms), numHeads, headDim);
    if (b > best) best = b;
  }
  return best;
}

extern "C" cudaError_t hsPagedDecodeAttention(const HsPagedAttentionParams* p, cudaStream_t s) {
  using namespace hs_attn;
  const int splits = decodeSplitsFor(p);
  if (splits == 0 || p->numTokens < p->numReqs) return cudaErrorInvalidValue;
  if (p->numReqs == 0) return cudaSuccess;
  if (splits > 1 && (p->workspace == nullptr ||
                     p->workspaceBytes < decodeWorkspaceBytes(p->numReqs, splits, p->numHeads, p->headDim)))
    return cudaErrorInvalidValue;
  if (p->headDim == 32) return launchDecode<32, false>(p, nullptr, splits, s);
  return p->headDim == 128 ? launchDecode<128, false>(p, nullptr, splits, s)
                            : launchDecode<64, false>(p, nullptr, splits, s);
}

extern "C" cudaError_t hsSparseDecodeAttention(const HsSparseDecodeParams* sp, cudaStream_t s) {
  using namespace hs_attn;
  if (sp == nullptr) return cudaErrorInvalidValue;
  const HsPagedAttentionParams* p = &sp->base;
  const int splits = decodeSplitsFor(p);
  if (splits == 0 || sp->headBlockTables == nullptr || sp->headSeqLens == nullptr || sp->headTableStride <= 0)
    return cudaErrorInvalidValue;
  if (sp->tokenRow == nullptr && p->numTokens < p->numReqs) return cudaErrorInvalidValue;
  if (p->numReqs == 0) return cudaSuccess;
  if (splits > 1 && (p->workspace == nullptr ||
                     p->workspaceBytes < decodeWorkspaceBytes(p->numReqs, splits, p->numHeads, p->headDim)))
    return cudaErrorInvalidValue;
  if (p->headDim == 32) return launchDecode<32, true>(p, sp, splits, s);
  return p->headDim == 128 ? launchDecode<128, true>(p, sp, splits, s) : launchDecode<64, true>(p, sp, splits, s);
}
