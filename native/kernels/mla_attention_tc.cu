// Tensor-core absorbed MLA attention (mla.h hsMlaAttentionTc) for DeepSeek-V3 / GLM-5 latent
// rows (C = 512 + R = 64, bf16). MQA: every head of a token reads the same rows, so one CTA of 8
// warps takes the token's 64 heads in the M dimension of mma.sync m16n8k16 (bf16 in, fp32
// accumulate; fragments and swizzled tiles of attention_tile.cuh) and each latent row is loaded
// into shared memory once for all of them. Grid (T, ceil(Hq / 64), numSplits); the SIMT kernel
// (mla_attention.cu) is the oracle (native/tests/mla_test.cu).
//
// Shared memory (190,464 bytes for 576-wide rows):
//   sQ    bf16 [64][D]           the token's absorbed queries (qAbs rounded to bf16), heads >= Hq zero
//   rows  kStages x bf16 [32][D] the chunk ring, cp.async 16-byte copies (zero-filled when masked)
//   sP    bf16 [64][32]          the chunk's probabilities
//   stats f32                    partial row maxima [2][64], alpha [64], half sums [2][64], final m [64]
//   ring  i32 [kStages + 1][32]  the slot of each row of the chunks in flight (-1: masked)
// Per chunk of 32 entries (three barriers):
//   top: wait for the chunk's copies; barrier; warp 0 stores the slots of chunk it + 3 and starts
//        the loads of the next two (positions two chunks ahead, block ids one chunk ahead, so a
//        load is first used an iteration after it was issued); every thread issues its 9
//        16-byte copies of chunk it + 2;
//   S:   warp w: heads 16 (w % 4) .. +15 x rows 16 (w / 4) .. +15 over D / 16 k-steps; scale,
//        mask (slot < 0 -> -inf), quad max -> partial maxima; barrier;
//   P:   m_new = max(m, both halves' maxima) (the two warps of a head slab keep the same m in
//        registers), p = exp(s - m_new) -> bf16 sP, half sum l = l alpha + sum p, alpha -> stats;
//        barrier;
//   PV:  warp w: O[64 heads][64 w .. 64 w + 63] (128 fp32 registers a thread) *= alpha, += P . V
//        over the chunk's 32 rows (2 k-steps x 4 m-tiles x 8 n-tiles).
// End: l = both halves; one split writes O / l, several write (O, m, l) in the layout of
// mla_attention.cuh and the shared merge kernel combines them. The online softmax is the
// FlashAttention-2 one (Dao 2023, Algorithm 1) in natural units, as the SIMT kernel's.
#include <atomic>
#include <cmath>

#include "attention_tile.cuh"
#include "hisparse_common.cuh"
#include "mla.h"
#include "mla_attention.cuh"
#include "mla_common.cuh"

namespace hs_mla {
namespace {

using hs_attn::cpAsync16;
using hs_attn::cpAsyncCommit;
using hs_attn::cpAsyncWait;
using hs_attn::loadAFrag;
using hs_attn::loadKFrag;
using hs_attn::loadVFrag;
using hs_attn::mmaBf16;
using hs_attn::packBf16x2;
using hs_attn::quadSum;
using hs_attn::smemAddr;
using hs_attn::swz;

constexpr int kTcThreads = 256;
constexpr int kTcWarps = kTcThreads / 32;
/** Heads of one CTA (M): 4 m16 slabs. */
constexpr int kTcHeads = 64;
constexpr int kTcMTiles = kTcHeads / 16;
/** Latent rows per chunk (N of S, K of P . V). */
constexpr int kTcRows = 32;
constexpr int kTcStages = 3;
constexpr int kTcRing = kTcStages + 1;
/** A split reads at least this many chunks (its partial costs 2 x 64 x C x 4 bytes of traffic). */
constexpr int kTcMinChunksPerSplit = 2;
constexpr int kTcMaxSplits = 128;
constexpr float kNegInf = -__builtin_huge_valf();

/** Compile-time shape of rows of C + R bf16 elements. */
template <int C, int R>
struct TcShape {
  static constexpr int D = C + R;
  static constexpr int kChunks = D / 8;  // 16-byte chunks a row
  static constexpr int kKSteps = D / 16;
  static constexpr int kNTiles = C / kTcWarps / 8;  // n8 tiles of O a warp
  static constexpr int kRowBytes = D * 2;
  static constexpr int kStageBytes = kTcRows * kRowBytes;
  static constexpr int kIssuePerThread = kTcRows * kChunks / kTcThreads;
  static constexpr int kOffQ = 0;
  static constexpr int kOffRows = kTcHeads * kRowBytes;
  static constexpr int kOffP = kOffRows + kTcStages * kStageBytes;
  static constexpr int kOffStats = kOffP + kTcHeads * kTcRows * 2;
  static constexpr int kStatFloats = 6 * kTcHeads;
  static constexpr int kOffRing = kOffStats + kStatFloats * 4;
  static constexpr int kSmemBytes = kOffRing + kTcRing * kTcRows * 4;
  static_assert(D % 64 == 0, "rows of a multiple of 64 elements (8-chunk swizzle groups)");
  static_assert(C % (kTcWarps * 16) == 0, "each warp owns pairs of n8 tiles of O");
  static_assert((kTcRows * kChunks) % kTcThreads == 0, "a chunk's copies split evenly over the threads");
};

/** Splits of one token's entries: fill the SMs once (one CTA an SM), at least two chunks a split. */
int tcNumSplits(int numTokens, int numHeads, int maxEntries) {
  const int ctas = numTokens * ((numHeads + kTcHeads - 1) / kTcHeads);
  const int sms = smCount();
  const int want = ctas >= sms ? 1 : sms / ctas;
  const int chunks = (maxEntries + kTcRows - 1) / kTcRows;
  const int byLength = chunks / kTcMinChunksPerSplit;
  return max(1, min(min(want, byLength), kTcMaxSplits));
}

/** Entries a split reads, a multiple of the chunk. */
int tcEntriesPerSplit(int maxEntries, int splits) {
  const int per = (maxEntries + splits - 1) / splits;
  return (per + kTcRows - 1) / kTcRows * kTcRows;
}

template <int C, int R>
__global__ void __launch_bounds__(kTcThreads, 1)
    attentionTcKernel(const HsMlaAttentionParams a, int perSplit, int numSplits) {
  using S = TcShape<C, R>;
  constexpr int D = S::D;
  extern __shared__ __align__(16) unsigned char smem[];
  float* partMax = reinterpret_cast<float*>(smem + S::kOffStats);  // [2][64]
  float* alphaS = partMax + 2 * kTcHeads;                           // [64]
  float* lHalf = alphaS + kTcHeads;                                 // [2][64]
  float* mFin = lHalf + 2 * kTcHeads;                               // [64]
  int* ring = reinterpret_cast<int*>(smem + S::kOffRing);           // [kTcRing][kTcRows]
  const uint32_t sQ = smemAddr(smem + S::kOffQ);
  const uint32_t sRows = smemAddr(smem + S::kOffRows);
  const uint32_t sP = smemAddr(smem + S::kOffP);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2;
  const int tq = lane & 3;
  const int t = blockIdx.x;
  const int h0 = blockIdx.y * kTcHeads;
  const int split = blockIdx.z;
  const int Hq = a.numHeads;
  const int headsHere = min(kTcHeads, Hq - h0);
  const int ts = t + a.queryStartLoc[0];  // the token's index in queryStartLoc's numbering
  const int r = requestOf(a.queryStartLoc, a.numReqs, ts);
  int p = -1;
  if (r >= 0) p = a.seqLens[r] - (a.queryStartLoc[r + 1] - a.queryStartLoc[r]) + (ts - a.queryStartLoc[r]);
  const int numEntries = p < 0 ? 0 : a.topkIndices != nullptr ? a.topkStride : p + 1;
  const int begin = split * perSplit;
  const int end = min(numEntries, begin + perSplit);
  const int nChunks = end > begin ? (end - begin + kTcRows - 1) / kTcRows : 0;
  const int bs = a.blockSize;
  const unsigned char* cache = static_cast<const unsigned char*>(a.latentCache);

  // The token's queries, rounded to bf16, into the swizzled Q tile.
  for (int i = tid; i < kTcHeads * S::kChunks; i += kTcThreads) {
    const int hh = i / S::kChunks;
    const int c = i - hh * S::kChunks;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (hh < headsHere) {
      const float4* src = reinterpret_cast<const float4*>(a.qAbs + (static_cast<size_t>(t) * Hq + h0 + hh) * D + c * 8);
      const float4 x = src[0];
      const float4 y = src[1];
      v = make_uint4(packBf16x2(x.x, x.y), packBf16x2(x.z, x.w), packBf16x2(y.x, y.y), packBf16x2(y.z, y.w));
    }
    *reinterpret_cast<uint4*>(smem + S::kOffQ + swz<D>(hh, c)) = v;
  }

  // Slot ids: position of row `row` of chunk `chunk` (-1: none), then its block id and offset.
  auto entryPos = [&](int chunk, int row) -> int {
    const int idx = begin + chunk * kTcRows + row;
    if (chunk >= nChunks || idx >= end) return -1;
    return a.topkIndices != nullptr ? a.topkIndices[static_cast<size_t>(t) * a.topkStride + idx] : idx;
  };
  auto blockOf = [&](int pos, int& blk, int& off) {
    blk = -1;
    off = 0;
    if (pos >= 0 && pos <= p && pos / bs < a.maxBlocksPerReq) {
      blk = a.blockTables[static_cast<size_t>(r) * a.maxBlocksPerReq + pos / bs];
      off = pos % bs;
    }
  };
  int pendPos = -1;  // row tid of chunk it + kTcStages + 1 (warp 0)
  int pendBlk = -1;  // row tid of chunk it + kTcStages
  int pendOff = 0;
  if (tid < kTcRows) {
    for (int c = 0; c < kTcStages; ++c) {
      int blk, off;
      blockOf(entryPos(c, tid), blk, off);
      ring[c * kTcRows + tid] = blk >= 0 ? blk * bs + off : -1;
    }
    blockOf(entryPos(kTcStages, tid), pendBlk, pendOff);
    pendPos = entryPos(kTcStages + 1, tid);
  }
  auto issue = [&](int chunk) {
    if (chunk >= nChunks) return;
    const int* slots = ring + (chunk % kTcRing) * kTcRows;
    const uint32_t stage = sRows + (chunk % kTcStages) * S::kStageBytes;
#pragma unroll
    for (int j = 0; j < S::kIssuePerThread; ++j) {
      const int i = tid + j * kTcThreads;
      const int row = i / S::kChunks;
      const int ch = i - row * S::kChunks;
      const int s = slots[row];
      const unsigned char* src = cache + (static_cast<size_t>(s < 0 ? 0 : s) * D + ch * 8) * 2;
      cpAsync16(stage + swz<D>(row, ch), src, s >= 0 ? 16 : 0);
    }
  };
  __syncthreads();  // Q tile and the first slots
#pragma unroll
  for (int c = 0; c < kTcStages - 1; ++c) {
    issue(c);
    cpAsyncCommit();
  }

  float o[kTcMTiles][S::kNTiles][4];
#pragma unroll
  for (int mt = 0; mt < kTcMTiles; ++mt)
#pragma unroll
    for (int n = 0; n < S::kNTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][n][e] = 0.f;
  const int mtS = warp & 3;  // the warp's S slab: heads 16 mtS + g, + 8
  const int nh = warp >> 2;  // and rows 16 nh .. + 15 of the chunk
  float m[2] = {kNegInf, kNegInf};
  float lh[2] = {0.f, 0.f};
  const bool liveS = 16 * mtS < headsHere;

  for (int it = 0; it < nChunks; ++it) {
    cpAsyncWait<kTcStages - 2>();
    __syncthreads();  // chunk it landed; chunk it - 1's stage, sP and stats are free
    if (tid < kTcRows) {
      ring[((it + kTcStages) % kTcRing) * kTcRows + tid] = pendBlk >= 0 ? pendBlk * bs + pendOff : -1;
      blockOf(pendPos, pendBlk, pendOff);
      pendPos = entryPos(it + kTcStages + 2, tid);
    }
    issue(it + kTcStages - 1);
    cpAsyncCommit();
    const uint32_t stage = sRows + (it % kTcStages) * S::kStageBytes;
    const int* slots = ring + (it % kTcRing) * kTcRows;

    float s[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = 0.f;
    if (liveS) {
#pragma unroll 12
      for (int ks = 0; ks < S::kKSteps; ++ks) {
        uint32_t af[4];
        uint32_t bf[4];
        loadAFrag<D>(af, sQ, 16 * mtS, ks, lane);
        loadKFrag<D>(bf, stage, 16 * nh, ks, lane);
        mmaBf16(s[0], af, bf[0], bf[1]);
        mmaBf16(s[1], af, bf[2], bf[3]);
      }
    }
    float mx[2] = {kNegInf, kNegInf};
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 16 * nh + 8 * j + 2 * tq + (e & 1);
        const float v = slots[col] >= 0 ? s[j][e] * a.scale : kNegInf;
        s[j][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
      if (tq == 0) partMax[nh * kTcHeads + 16 * mtS + g + 8 * hh] = mx[hh];
    }
    __syncthreads();  // partial maxima

#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int head = 16 * mtS + g + 8 * hh;
      const float mNew = fmaxf(m[hh], fmaxf(partMax[head], partMax[kTcHeads + head]));
      const float alpha = m[hh] == kNegInf ? 0.f : expf(m[hh] - mNew);  // m finite: mNew finite
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
          const float pv = s[j][e] == kNegInf ? 0.f : expf(s[j][e] - mNew);
          s[j][e] = pv;
          sum += pv;
        }
      lh[hh] = lh[hh] * alpha + sum;
      m[hh] = mNew;
      if (nh == 0 && tq == 0) alphaS[head] = alpha;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int chunk = 2 * nh + j;  // 16-byte chunk of the 32-wide P row
      const int row = 16 * mtS + g;
      *reinterpret_cast<uint32_t*>(smem + S::kOffP + swz<kTcRows>(row, chunk) + 4 * tq) = packBf16x2(s[j][0], s[j][1]);
      *reinterpret_cast<uint32_t*>(smem + S::kOffP + swz<kTcRows>(row + 8, chunk) + 4 * tq) =
          packBf16x2(s[j][2], s[j][3]);
    }
    __syncthreads();  // P and alpha

#pragma unroll
    for (int mt = 0; mt < kTcMTiles; ++mt) {
      if (16 * mt < headsHere) {
        const float a0 = alphaS[16 * mt + g];
        const float a1 = alphaS[16 * mt + g + 8];
#pragma unroll
        for (int n = 0; n < S::kNTiles; ++n) {
          o[mt][n][0] *= a0;
          o[mt][n][1] *= a0;
          o[mt][n][2] *= a1;
          o[mt][n][3] *= a1;
        }
      }
    }
#pragma unroll
    for (int ks = 0; ks < kTcRows / 16; ++ks) {
      uint32_t pa[kTcMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kTcMTiles; ++mt)
        if (16 * mt < headsHere) loadAFrag<kTcRows>(pa[mt], sP, 16 * mt, ks, lane);
#pragma unroll
      for (int jp = 0; jp < S::kNTiles / 2; ++jp) {
        uint32_t b[4];
        loadVFrag<D>(b, stage, 16 * ks, warp * (S::kNTiles / 2) + jp, lane);
#pragma unroll
        for (int mt = 0; mt < kTcMTiles; ++mt) {
          if (16 * mt < headsHere) {
            mmaBf16(o[mt][2 * jp], pa[mt], b[0], b[1]);
            mmaBf16(o[mt][2 * jp + 1], pa[mt], b[2], b[3]);
          }
        }
      }
    }
  }
  cpAsyncWait<0>();  // (only empty groups remain)

#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const float l = quadSum(lh[hh]);
    const int head = 16 * mtS + g + 8 * hh;
    if (tq == 0) {
      lHalf[nh * kTcHeads + head] = l;
      if (nh == 0) mFin[head] = m[hh];
    }
  }
  __syncthreads();
  float* ws = static_cast<float*>(a.workspace);
#pragma unroll
  for (int mt = 0; mt < kTcMTiles; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int head = 16 * mt + g + 8 * hh;
      if (head < headsHere) {  // (not continue: o stays in registers only with compile-time indices)
        const size_t th = static_cast<size_t>(t) * Hq + h0 + head;
        const float l = lHalf[head] + lHalf[kTcHeads + head];
        float* dst;
        float mul = 1.f;
        if (numSplits == 1) {
          dst = a.oLat + th * C;
          mul = l > 0.f ? 1.f / l : 0.f;
        } else {
          const size_t part = static_cast<size_t>(split) * a.numTokens * Hq + th;
          dst = ws + part * C;
          if (warp == 0 && tq == 0) {
            float* pml = ws + static_cast<size_t>(numSplits) * a.numTokens * Hq * C + part * 2;
            pml[0] = mFin[head];
            pml[1] = l;
          }
        }
#pragma unroll
        for (int n = 0; n < S::kNTiles; ++n) {
          const int col = warp * (C / kTcWarps) + 8 * n + 2 * tq;
          *reinterpret_cast<float2*>(dst + col) = make_float2(o[mt][n][2 * hh] * mul, o[mt][n][2 * hh + 1] * mul);
        }
      }
    }
  }
}

std::atomic<unsigned long long> gTcSmemRaised{0};

}  // namespace

bool tcSupports(int cacheDtype, int rank, int ropeDim) {
  return cacheDtype == HS_DTYPE_BF16 && rank == 512 && ropeDim == 64;
}

size_t tcWorkspaceBytes(int numTokens, int numHeads, int rank, int maxEntries) {
  if (numTokens <= 0 || numHeads <= 0 || rank != 512 || maxEntries <= 0) return 0;
  return splitWorkspaceBytes(tcNumSplits(numTokens, numHeads, maxEntries), numTokens, numHeads, rank);
}

}  // namespace hs_mla

using namespace hs_mla;

extern "C" cudaError_t hsMlaAttentionTc(const HsMlaAttentionParams* p, cudaStream_t stream) {
  if (p == nullptr || !validAttentionParams(*p)) return cudaErrorInvalidValue;
  const HsMlaAttentionParams& a = *p;
  if (!tcSupports(a.cacheDtype, a.rank, a.ropeDim)) return cudaErrorInvalidValue;
  if ((reinterpret_cast<uintptr_t>(a.qAbs) & 15) != 0 || (reinterpret_cast<uintptr_t>(a.latentCache) & 15) != 0)
    return cudaErrorInvalidValue;  // 16-byte loads and cp.async of the rows
  if (a.numTokens == 0) return cudaSuccess;
  const int maxEntries = a.topkIndices != nullptr ? a.topkStride : a.maxContext;
  const int splits = tcNumSplits(a.numTokens, a.numHeads, maxEntries);
  const int perSplit = tcEntriesPerSplit(maxEntries, splits);
  if (splits > 1 && (a.workspace == nullptr ||
                     a.workspaceBytes < tcWorkspaceBytes(a.numTokens, a.numHeads, a.rank, maxEntries)))
    return cudaErrorInvalidValue;
  using S = TcShape<512, 64>;
  cudaError_t err = hs_sparse::ensureSmem(attentionTcKernel<512, 64>, S::kSmemBytes, gTcSmemRaised);
  if (err != cudaSuccess) return err;
  const dim3 grid(a.numTokens, (a.numHeads + kTcHeads - 1) / kTcHeads, splits);
  attentionTcKernel<512, 64><<<grid, kTcThreads, S::kSmemBytes, stream>>>(a, perSplit, splits);
  err = cudaGetLastError();
  if (err != cudaSuccess || splits == 1) return err;
  return launchMerge(static_cast<const float*>(a.workspace), a.oLat, a.numTokens, a.numHeads, a.rank, splits, stream);
}
