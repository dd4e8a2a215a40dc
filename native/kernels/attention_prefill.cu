// Paged causal attention for prefill chunks (and any mix with decodes): FlashAttention-2 tiling
// (Dao 2023) on mma.sync m16n8k16 bf16 with fp32 accumulation, K/V read through the block table.
//
// Rows are (query token, q head of the GQA group) pairs, row = j * G + h, so one CTA's K/V tiles
// serve every head of its kv group. Grid (ceil(maxQueryLen * G / kRows), Hkv, numReqs); the row
// tiles run in reverse order so the tiles with the longest causal range start first. A CTA of
// kWarps warps owns kRows = kWarps * 16 * kMT rows of one request and one kv head; warp w owns
// rows 16*kMT*w .. +16*kMT. K/V stream through shared memory in kKeys-key tiles (cp.async, kStages
// deep, block ids prefetched ahead); each warp computes S = Q K^T for its rows, applies the
// causal mask (key position <= query position, query j at seqLen - queryLen + j), updates its
// online softmax and accumulates P V, all in registers. Rows with no key write zeros.
//
// Split-KV (FlashAttention's split-KV / flash-decoding, applied to prefill chunks): a chunk of few
// query tokens over a long cached context (a prefix-cache hit, a preheated document, the later
// turns of a conversation) has few row tiles, so the grid above fills a fraction of the SMs while
// each CTA walks the whole context. When the grid would be under kPrefillCtasPerSm CTAs per SM and
// the caller gives the workspace (hsPagedPrefillWorkspaceBytes), each (row tile, kv head, request)
// is split over numSplits CTAs along the keys (grid z = request * numSplits + split; split sizes
// in whole key tiles, so no tile straddles two splits), each writing fp32 normalised partial rows
// and their log2-sum-exp; prefillMergeKernel then combines the splits in split order
// (deterministic, and independent of how the other requests of the batch were split).
#include "attention_launch.cuh"
#include "attention_prefill_merge.cuh"

// Tile shape knobs (keys per K/V tile, pipeline stages) per head dim. D=128: 64-key tiles with 2
// stages spill a few registers (ATTENTION.md) yet ran 7-10% faster than 32 keys / 3 stages on the
// H200 (301 vs 280 TFLOP/s at 8K, 320 vs 290 at 32K: bench/results/cuda_kernels_h200.md), so they
// are the default. The benchmark builds a second copy with other values to compare them.
#ifndef HS_PREFILL_KEYS_128
#define HS_PREFILL_KEYS_128 64
#endif
#ifndef HS_PREFILL_STAGES_128
#define HS_PREFILL_STAGES_128 2
#endif
#ifndef HS_PREFILL_KEYS_64
#define HS_PREFILL_KEYS_64 64
#endif
#ifndef HS_PREFILL_STAGES_64
#define HS_PREFILL_STAGES_64 2
#endif


namespace hs_attn {
namespace {

/** Tile shape per head dim: 128 rows (4 warps x 32 rows, as FlashAttention-2) x kKeys keys. */
template <int D>
struct PrefillCfg {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kMT = 2;  // m16 slabs per warp
  static constexpr int kStages = D == 128 ? HS_PREFILL_STAGES_128 : HS_PREFILL_STAGES_64;
  static constexpr int kKeys = D == 128 ? HS_PREFILL_KEYS_128 : HS_PREFILL_KEYS_64;  // keys per K/V tile
  static constexpr int kRowsPerWarp = 16 * kMT;
  static constexpr int kRows = kWarps * kRowsPerWarp;
  static constexpr int kQBytes = kRows * D * 2;
  static constexpr int kTileBytes = kKeys * D * 2;
  using Loader = KvTileLoader<D, kThreads, kStages, kKeys>;
  static constexpr int kIdOffset = kQBytes + 2 * kStages * kTileBytes;
  static constexpr int kSmemBytes = kIdOffset + Loader::kIdBytes;
};

/** Prefill kernel arguments (by value). */
struct PrefillArgs {
  const __nv_bfloat16* qkv;
  const __nv_bfloat16* kvCache;
  __nv_bfloat16* out;
  const int* queryStartLoc;
  const int* seqLens;
  const int* blockTables;
  int qkvRowStride;
  int maxBlocksPerReq;
  int numHeads;
  int numKvHeads;
  int groupSize;
  int log2BlockSize;
  float scaleLog2;
  int kvFp8;     // nonzero: kvCache holds e4m3 bytes (HsPagedAttentionParams.kvCacheFp8)
  float kScale;  // fp8 per-tensor scales
  float vScale;
  int numSplits;      // split-KV factor (1: no split, the CTA writes `out` itself)
  int numTokens;      // rows of out (partial row stride)
  float* partialO;    // [numSplits, numTokens, Hq, D] fp32, normalised by the split's own sum
  float* partialLse;  // [numSplits, numTokens, Hq] log2-sum-exp of the split (-inf: no key)
};

/** Row range of one CTA and its causal geometry. */
struct RowTile {
  int qStart;   // first token of the request in qkv / out
  int ctxLen;   // seqLen - queryLen: position of query token 0
  int rowBase;  // first row (j * G + h) of the tile
  int rowEnd;   // one past the last valid row of the tile
};

/** Loads the tile's Q rows (zero past rowEnd) into the swizzled shared tile sQ with cp.async. */
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void loadQTile(const PrefillArgs& a, const RowTile& rt, int kvh, uint32_t sQ) {
  for (int i = threadIdx.x; i < kRows * (D / 8); i += kThreads) {
    const int r = i / (D / 8);
    const int c = i - r * (D / 8);
    const int rho = rt.rowBase + r;
    const bool valid = rho < rt.rowEnd;
    const __nv_bfloat16* src = a.qkv;
    if (valid) {
      const int j = rho / a.groupSize;
      const int h = rho - j * a.groupSize;
      src = a.qkv + static_cast<size_t>(rt.qStart + j) * a.qkvRowStride + (kvh * a.groupSize + h) * D + c * 8;
    }
    cpAsync16(sQ + swz<D>(r, c), src, valid ? 16 : 0);
  }
}

/**
 * Writes o / l (bf16) for this thread's valid rows; rows with l == 0 (no key) get zeros. Split
 * launches write the fp32 partial row and its log2-sum-exp (m * scaleLog2 + log2 l) instead.
 */
template <int D, int MT>
__device__ __forceinline__ void prefillEpilogue(const PrefillArgs& a, const RowTile& rt, int kvh, int split,
                                                int warpRow0, const float (&o)[MT][D / 8][4], float (&l)[MT][2],
                                                const float (&m)[MT][2]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float sum = quadSum(l[mt][hh]);
      const int rho = rt.rowBase + warpRow0 + mt * 16 + g + 8 * hh;
      if (rho >= rt.rowEnd) continue;  // padding row of the last tile
      const int j = rho / a.groupSize;
      const int head = kvh * a.groupSize + (rho - j * a.groupSize);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      if (a.numSplits > 1) {
        const size_t prow = (static_cast<size_t>(split) * a.numTokens + rt.qStart + j) * a.numHeads + head;
        if (t == 0) a.partialLse[prow] = sum > 0.f ? m[mt][hh] * a.scaleLog2 + __log2f(sum) : kNegInf;
        if (sum > 0.f) {
          float* po = a.partialO + prow * D + 2 * t;
#pragma unroll
          for (int dt = 0; dt < D / 8; ++dt)
            *reinterpret_cast<float2*>(po + dt * 8) = make_float2(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
        }
        continue;
      }
      __nv_bfloat16* dst = a.out + (static_cast<size_t>(rt.qStart + j) * a.numHeads + head) * D + 2 * t;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<uint32_t*>(dst + dt * 8) = packBf16x2(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
    }
  }
}

/** One (row tile, kv head, request) of causal paged attention; see the file comment. */
template <int D>
__global__ void __launch_bounds__(PrefillCfg<D>::kThreads) pagedPrefillKernel(const PrefillArgs a) {
  using Cfg = PrefillCfg<D>;
  constexpr int kMT = Cfg::kMT;
  constexpr int kStages = Cfg::kStages;
  constexpr int kKeys = Cfg::kKeys;
  constexpr int kNT = kKeys / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const int kvh = blockIdx.y;
  const int req = blockIdx.z / a.numSplits;
  const int split = blockIdx.z - req * a.numSplits;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  RowTile rt;
  rt.qStart = __ldg(a.queryStartLoc + req);
  const int qLen = __ldg(a.queryStartLoc + req + 1) - rt.qStart;
  rt.rowBase = (gridDim.x - 1 - blockIdx.x) * Cfg::kRows;
  const int rowsTotal = qLen * a.groupSize;
  if (rt.rowBase >= rowsTotal) return;
  rt.rowEnd = min(rt.rowBase + Cfg::kRows, rowsTotal);
  const int maxLen = a.maxBlocksPerReq << a.log2BlockSize;
  const int seqLen = min(max(__ldg(a.seqLens + req), 0), maxLen);
  rt.ctxLen = seqLen - qLen;
  // Keys needed by the tile: positions <= the last row's query position.
  const int kvEndTile = max(0, min(seqLen, rt.ctxLen + (rt.rowEnd - 1) / a.groupSize + 1));
  // This split's keys [kvBegin, kvEnd): whole kKeys tiles, so no tile straddles two splits.
  int kvBegin = 0;
  int kvEnd = kvEndTile;
  if (a.numSplits > 1) {
    const int per = ((kvEndTile + a.numSplits - 1) / a.numSplits + kKeys - 1) / kKeys * kKeys;
    kvBegin = min(kvEndTile, split * per);
    kvEnd = min(kvEndTile, kvBegin + per);
  }
  const int numTiles = (kvEnd - kvBegin + kKeys - 1) / kKeys;

  // This thread's rows: query position (or -1 for padding rows) of row g + 8hh of slab mt.
  const int warpRow0 = warp * Cfg::kRowsPerWarp;
  int qpos[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int rho = rt.rowBase + warpRow0 + mt * 16 + (lane >> 2) + 8 * hh;
      qpos[mt][hh] = rho < rt.rowEnd ? rt.ctxLen + rho / a.groupSize : -1;
    }
  // Warp bounds: skip tiles past its last query; mask tiles reaching past its first query.
  const int wFirst = rt.rowBase + warpRow0;
  const int wLast = min(wFirst + Cfg::kRowsPerWarp, rt.rowEnd) - 1;
  const int warpMaxQpos = wLast >= wFirst ? rt.ctxLen + wLast / a.groupSize : -1;
  const int warpMinQpos = wFirst + Cfg::kRowsPerWarp <= rt.rowEnd ? rt.ctxLen + wFirst / a.groupSize : -1;

  const uint32_t sQ = smemAddr(smem);
  const uint32_t sK0 = sQ + Cfg::kQBytes;
  const uint32_t sV0 = sK0 + kStages * Cfg::kTileBytes;
  const int tokenStride = a.numKvHeads * D;
  const __nv_bfloat16* kvHead = a.kvCache + static_cast<size_t>(kvh) * D;
  const int* btRow = a.blockTables + static_cast<size_t>(req) * a.maxBlocksPerReq;

  loadQTile<D, Cfg::kRows, Cfg::kThreads>(a, rt, kvh, sQ);
  typename Cfg::Loader loader(reinterpret_cast<int*>(smem + Cfg::kIdOffset), tid);
  loader.prologueIds(btRow, kvBegin, kvEnd, a.log2BlockSize);
  __syncthreads();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < numTiles)
      issueKvTile(loader, a, sK0 + st * Cfg::kTileBytes, sV0 + st * Cfg::kTileBytes, kvHead, st, kvBegin, tokenStride);
    cpAsyncCommit();
  }

  float o[kMT][D / 8][4];
  float m[kMT][2];
  float l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    m[mt][0] = m[mt][1] = kNegInf;
    l[mt][0] = l[mt][1] = 0.f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
  }

  for (int it = 0; it < numTiles; ++it) {
    cpAsyncWait<kStages - 2>();
    __syncthreads();  // tile `it` (and Q) landed for all threads; buffer of tile it-1 is free
    const int next = it + kStages - 1;
    if (next < numTiles) {
      const int st = next % kStages;
      issueKvTile(loader, a, sK0 + st * Cfg::kTileBytes, sV0 + st * Cfg::kTileBytes, kvHead, next, kvBegin,
                  tokenStride);
    }
    loader.storeIds(next + 1);
    loader.loadIds(btRow, next + 2, kvBegin, kvEnd, a.log2BlockSize);
    cpAsyncCommit();

    const int tileStart = kvBegin + it * kKeys;
    if (tileStart > warpMaxQpos) continue;  // every key of the tile is in this warp's future
    const int st = it % kStages;
    float s[kMT][kNT][4];
    warpScores<D, kMT, kNT>(s, sQ, warpRow0, sK0 + st * Cfg::kTileBytes, 0, lane);
    if (tileStart + kKeys - 1 > warpMinQpos) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (tileStart + nt * 8 + 2 * (lane & 3) + (e & 1) > qpos[mt][e >> 1]) s[mt][nt][e] = kNegInf;
    }
    onlineSoftmax<D, kMT, kNT>(s, m, l, o, a.scaleLog2);
    warpPV<D, kMT, kNT>(o, s, sV0 + st * Cfg::kTileBytes, 0, lane);
  }
  cpAsyncWait<0>();
  prefillEpilogue<D, kMT>(a, rt, kvh, split, warpRow0, o, l, m);
}

/** Launches the prefill kernel for head dim D; sizes already validated. */
template <int D>
cudaError_t launchPrefill(const HsPagedAttentionParams* p, int maxQueryLen, cudaStream_t stream) {
  using Cfg = PrefillCfg<D>;
  PrefillArgs a{};
  a.qkv = p->qkv;
  a.kvCache = p->kvCache;
  a.out = p->out;
  a.queryStartLoc = p->queryStartLoc;
  a.seqLens = p->seqLens;
  a.blockTables = p->blockTables;
  a.qkvRowStride = p->qkvRowStride;
  a.maxBlocksPerReq = p->maxBlocksPerReq;
  a.numHeads = p->numHeads;
  a.numKvHeads = p->numKvHeads;
  a.groupSize = p->numHeads / p->numKvHeads;
  a.log2BlockSize = log2Pow2(p->blockSize);
  a.scaleLog2 = p->scale * kLog2e;
  a.kvFp8 = p->kvCacheFp8 != 0 ? 1 : 0;
  a.kScale = p->kScale;
  a.vScale = p->vScale;
  const long long rows = static_cast<long long>(maxQueryLen) * a.groupSize;
  const long long tiles = (rows + Cfg::kRows - 1) / Cfg::kRows;
  if (tiles > 0x7fffffffLL || p->numKvHeads > 65535) return cudaErrorInvalidValue;
  a.numTokens = p->numTokens;
  a.numSplits = prefillNumSplits(p->numReqs, p->numKvHeads, a.groupSize, maxQueryLen, p->maxModelLen, Cfg::kRows,
                                 currentSmCount(132));
  const size_t need = prefillWorkspaceBytes(a.numSplits, p->numTokens, p->numHeads, D);
  if (a.numSplits > 1 && (p->workspace == nullptr || p->workspaceBytes < need)) a.numSplits = 1;  // no room: one pass
  if (a.numSplits > 1) {
    a.partialO = static_cast<float*>(p->workspace);
    a.partialLse = reinterpret_cast<float*>(static_cast<unsigned char*>(p->workspace) +
                                            align256(static_cast<size_t>(a.numSplits) * p->numTokens * p->numHeads * D *
                                                     sizeof(float)));
  }
  static std::atomic<unsigned long long> smemLimitSet{0};  // per head dim, one bit per device
  cudaError_t err = ensureSmemLimit(pagedPrefillKernel<D>, Cfg::kSmemBytes, smemLimitSet);
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(tiles), p->numKvHeads, p->numReqs * a.numSplits);
  pagedPrefillKernel<D><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
  if (a.numSplits > 1) {
    const dim3 mgrid((p->numHeads + kPrefillMergeWarps - 1) / kPrefillMergeWarps, p->numTokens);
    prefillMergeKernel<D><<<mgrid, kPrefillMergeWarps * 32, 0, stream>>>(a.partialO, a.partialLse, a.out,
                                                                          a.numSplits, p->numTokens, p->numHeads);
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace hs_attn

extern "C" size_t hsPagedPrefillWorkspaceBytes(int numReqs, int numTokens, int numHeads, int numKvHeads, int headDim,
                                               int maxQueryLen, int maxModelLen) {
  using namespace hs_attn;
  if (numReqs <= 0 || numTokens <= 0 || numKvHeads <= 0 || numHeads % numKvHeads != 0 || maxQueryLen <= 0) return 0;
  const int rowsPerCta = headDim == 128 ? PrefillCfg<128>::kRows : headDim == 64 ? PrefillCfg<64>::kRows
                                                                                   : PrefillCfg<32>::kRows;
  const int splits = prefillNumSplits(numReqs, numKvHeads, numHeads / numKvHeads, maxQueryLen, maxModelLen, rowsPerCta,
                                      currentSmCount(132));
  return prefillWorkspaceBytes(splits, numTokens, numHeads, headDim);
}

extern "C" cudaError_t hsPagedPrefillAttention(const HsPagedAttentionParams* p, int maxQueryLen, cudaStream_t s) {
  using namespace hs_attn;
  if (!validParams(p) || p->queryStartLoc == nullptr || maxQueryLen < 0) return cudaErrorInvalidValue;
  if (p->numReqs == 0 || maxQueryLen == 0) return cudaSuccess;
  if (p->headDim == 32) return launchPrefill<32>(p, maxQueryLen, s);
  return p->headDim == 128 ? launchPrefill<128>(p, maxQueryLen, s) : launchPrefill<64>(p, maxQueryLen, s);
}
