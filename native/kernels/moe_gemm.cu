// Grouped expert GEMM of the MoE layers (hsMoeGroupedGemm, moe.h): one launch computes
// out[r] = x[r] @ w[e]^T for the rows of every expert segment, bf16 on tensor cores
// (mma.sync m16n8k16 with ldmatrix fragments and swizzled shared tiles, the building blocks of
// attention_tile.cuh), multi-stage cp.async pipeline, fp32 accumulators rounded once.
//
// Tile schedule without host data: CTA (nTile, slot) owns the slot-th BM-row tile in the
// concatenation of every expert's tiles (expert e has ceil(count_e / BM) of them). Warp 0 finds it
// by scanning the E + 1 offsets (a lane per E/32 experts, one shuffle scan); CTAs whose slot is
// past the last tile exit at once. The grid's slot count is the bound over every segmentation
// (moe.h), so a decode step at batch 1 with k = 8 launches exactly 8 row tiles per column tile.
//
// Configs (BM x BN x BK, warps M x N, stages): rows per expert decide, since the only reuse of a
// weight tile is across the rows of one expert:
//   kSmall  16 x  64 x 128, 1 x 4, 4 stages: decode; every active expert's weights are read once
//           by ceil(N / 64) CTAs (192 CTAs for Qwen3-30B-A3B's gate_up at batch 1), 48 KiB of
//           weights in flight per CTA, 2 CTAs per SM;
//   kMedium 64 x 128 x 64, 1 x 4, 3 stages;  kLarge 128 x 128 x 64, 2 x 4, 3 stages (prefill).
// Each output element accumulates its k16 products in ascending k in every config (no split-K), so
// a row's result is the same whichever config or batch computes it.
#include <atomic>

#include "attention_launch.cuh"
#include "common.cuh"
#include "moe.h"

namespace hs_moe {
namespace {

using hs_attn::cpAsync16;
using hs_attn::cpAsyncCommit;
using hs_attn::cpAsyncWait;
using hs_attn::loadAFrag;
using hs_attn::loadKFrag;
using hs_attn::mmaBf16;
using hs_attn::smemAddr;
using hs_attn::swz;
using bf16 = __nv_bfloat16;

template <int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N, int STAGES_>
struct GemmCfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = STAGES_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kWarpsN = WARPS_N;
  static constexpr int kWarpRows = BM / WARPS_M;
  static constexpr int kWarpCols = BN / WARPS_N;
  static constexpr int MT = kWarpRows / 16;
  static constexpr int NT = kWarpCols / 8;
  static constexpr int kChunks = BK / 8;  // 16-byte chunks per tile row
  static constexpr int kATileBytes = BM * BK * 2;
  static constexpr int kBTileBytes = BN * BK * 2;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  /** Pipeline stages, then the tile descriptor (3 ints). */
  static constexpr int kSmemBytes = kStages * kStageBytes + 16;
  static_assert(kWarpRows % 16 == 0 && kWarpCols % 16 == 0, "warp tiles of whole m16 x n16 blocks");
  static_assert(BK % 16 == 0 && kChunks >= 8, "swizzle needs >= 8 chunks per row");
  static_assert(kStages >= 2, "at least double buffering");
};

using SmallCfg = GemmCfg<16, 64, 128, 1, 4, 4>;
using MediumCfg = GemmCfg<64, 128, 64, 1, 4, 3>;
using LargeCfg = GemmCfg<128, 128, 64, 2, 4, 3>;

struct GemmArgs {
  const bf16* x;
  const bf16* w;
  bf16* out;
  const int32_t* offsets;
  int numRows, E, N, K;
};

/**
 * Warp 0: the tile `slot` of the concatenated per-expert tile lists -> tile[0..2] = expert, first
 * row, end row (expert -1: no such tile). Offsets are clamped to [0, numRows] so that a corrupt
 * table cannot send loads or stores outside x and out.
 */
template <int BM>
__device__ void findTile(const GemmArgs& a, int slot, int* tile, int lane) {
  const int per = (a.E + 31) / 32;
  const int e0 = min(a.E, lane * per);
  const int e1 = min(a.E, e0 + per);
  auto clampRow = [&](int v) { return v < 0 ? 0 : (v > a.numRows ? a.numRows : v); };
  auto tilesOf = [&](int e) {
    const int n = clampRow(__ldg(a.offsets + e + 1)) - clampRow(__ldg(a.offsets + e));
    return n > 0 ? (n + BM - 1) / BM : 0;
  };
  int local = 0;
  for (int e = e0; e < e1; ++e) local += tilesOf(e);
  int incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 0) tile[0] = -1;
  __syncwarp();
  int run = incl - local;
  if (slot >= run && slot < incl) {
    for (int e = e0; e < e1; ++e) {
      const int n = tilesOf(e);
      if (slot < run + n) {
        const int start = clampRow(__ldg(a.offsets + e));
        const int end = clampRow(__ldg(a.offsets + e + 1));
        const int first = start + (slot - run) * BM;
        tile[0] = e;
        tile[1] = first;
        tile[2] = min(end, first + BM);
        break;
      }
      run += n;
    }
  }
}

/**
 * Issues the cp.async copies of k-tile kt into a stage: A rows [rowStart, rowEnd) of x, B rows of
 * expert e's weight (for gateUpSilu, tile row r = 16q + j maps to gate row nBase + 8q + j for
 * j < 8 and up row I + nBase + 8q + j - 8 otherwise, I = N / 2). Rows and columns outside the
 * operands are zero-filled.
 */
template <class Cfg, bool kSilu>
__device__ __forceinline__ void issueTile(const GemmArgs& a, const bf16* wE, uint32_t sA, uint32_t sB, int kt,
                                          int rowStart, int rowEnd, int nBase) {
  const int k0 = kt * Cfg::BK;
  for (int idx = threadIdx.x; idx < Cfg::BM * Cfg::kChunks; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kChunks;
    const int ch = idx % Cfg::kChunks;
    const int row = rowStart + r;
    const int kk = k0 + ch * 8;
    const bool ok = row < rowEnd && kk < a.K;
    cpAsync16(sA + swz<Cfg::BK>(r, ch), ok ? a.x + static_cast<size_t>(row) * a.K + kk : a.x, ok ? 16 : 0);
  }
  for (int idx = threadIdx.x; idx < Cfg::BN * Cfg::kChunks; idx += Cfg::kThreads) {
    const int r = idx / Cfg::kChunks;
    const int ch = idx % Cfg::kChunks;
    int wRow;
    bool okRow;
    if (kSilu) {
      const int half = a.N / 2;
      const int i = nBase + 8 * (r >> 4) + (r & 7);
      okRow = i < half;
      wRow = (r & 15) < 8 ? i : half + i;
    } else {
      wRow = nBase + r;
      okRow = wRow < a.N;
    }
    const int kk = k0 + ch * 8;
    const bool ok = okRow && kk < a.K;
    cpAsync16(sB + swz<Cfg::BK>(r, ch), ok ? wE + static_cast<size_t>(wRow) * a.K + kk : wE, ok ? 16 : 0);
  }
}

/** bf16 value of an fp32 accumulator, as a float (the unfused GEMM output's rounding). */
__device__ __forceinline__ float bf16Round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

/** hsSiluAndMul's formula on the bf16-rounded gate and up values: T(T(silu(g)) * u). */
__device__ __forceinline__ float siluMul(float g, float u) {
  const float gf = bf16Round(g);
  const float silu = bf16Round(gf / (1.f + expf(-gf)));
  return silu * bf16Round(u);
}

/** Stores a warp's accumulators: plain (cols nBase + ..) or silu_and_mul pairs (cols nBase/.. of [*, N/2]). */
template <class Cfg, bool kSilu>
__device__ __forceinline__ void storeTile(const GemmArgs& a, const float (&acc)[Cfg::MT][Cfg::NT][4], int rowStart,
                                          int rowEnd, int nBase, int warpRow, int warpCol, int lane) {
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < Cfg::MT; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int row = rowStart + warpRow + 16 * mt + g + 8 * hh;
      if (row >= rowEnd) continue;
      if (kSilu) {
        const int half = a.N / 2;
#pragma unroll
        for (int np = 0; np < Cfg::NT / 2; ++np) {
          const int col = nBase + 8 * (warpCol / 16 + np) + 2 * t;
          if (col >= half) continue;
          const float* gv = acc[mt][2 * np];
          const float* uv = acc[mt][2 * np + 1];
          const __nv_bfloat162 v =
              __floats2bfloat162_rn(siluMul(gv[2 * hh], uv[2 * hh]), siluMul(gv[2 * hh + 1], uv[2 * hh + 1]));
          *reinterpret_cast<__nv_bfloat162*>(a.out + static_cast<size_t>(row) * half + col) = v;
        }
      } else {
#pragma unroll
        for (int nt = 0; nt < Cfg::NT; ++nt) {
          const int col = nBase + warpCol + 8 * nt + 2 * t;
          if (col >= a.N) continue;
          const __nv_bfloat162 v = __floats2bfloat162_rn(acc[mt][nt][2 * hh], acc[mt][nt][2 * hh + 1]);
          *reinterpret_cast<__nv_bfloat162*>(a.out + static_cast<size_t>(row) * a.N + col) = v;
        }
      }
    }
  }
}

template <class Cfg, bool kSilu>
__global__ void __launch_bounds__(Cfg::kThreads) groupedGemmKernel(const GemmArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  int* tile = reinterpret_cast<int*>(smem + Cfg::kStages * Cfg::kStageBytes);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  if (warp == 0) findTile<Cfg::BM>(a, blockIdx.y, tile, lane);
  __syncthreads();
  const int e = tile[0];
  if (e < 0) return;  // past the last tile (uniform across the CTA)
  const int rowStart = tile[1];
  const int rowEnd = tile[2];
  // Column base: output columns of this CTA (for gateUpSilu, BN/2 columns of [*, N/2]).
  const int nBase = blockIdx.x * (kSilu ? Cfg::BN / 2 : Cfg::BN);
  const bf16* wE = a.w + static_cast<size_t>(e) * a.N * a.K;
  const uint32_t base = smemAddr(smem);
  const int KT = (a.K + Cfg::BK - 1) / Cfg::BK;

#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < KT) {
      const uint32_t sA = base + s * Cfg::kStageBytes;
      issueTile<Cfg, kSilu>(a, wE, sA, sA + Cfg::kATileBytes, s, rowStart, rowEnd, nBase);
    }
    cpAsyncCommit();
  }
  float acc[Cfg::MT][Cfg::NT][4];
#pragma unroll
  for (int mt = 0; mt < Cfg::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < Cfg::NT; ++nt)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mt][nt][q] = 0.f;
  const int warpRow = (warp / Cfg::kWarpsN) * Cfg::kWarpRows;
  const int warpCol = (warp % Cfg::kWarpsN) * Cfg::kWarpCols;

  for (int kt = 0; kt < KT; ++kt) {
    cpAsyncWait<Cfg::kStages - 2>();
    __syncthreads();  // tile kt landed for every thread; stage (kt - 1) % S is free
    const int next = kt + Cfg::kStages - 1;
    if (next < KT) {
      const uint32_t sA = base + (next % Cfg::kStages) * Cfg::kStageBytes;
      issueTile<Cfg, kSilu>(a, wE, sA, sA + Cfg::kATileBytes, next, rowStart, rowEnd, nBase);
    }
    cpAsyncCommit();
    const uint32_t sA = base + (kt % Cfg::kStages) * Cfg::kStageBytes;
    const uint32_t sB = sA + Cfg::kATileBytes;
#pragma unroll
    for (int ks = 0; ks < Cfg::BK / 16; ++ks) {
      uint32_t af[Cfg::MT][4];
#pragma unroll
      for (int mt = 0; mt < Cfg::MT; ++mt) loadAFrag<Cfg::BK>(af[mt], sA, warpRow + 16 * mt, ks, lane);
#pragma unroll
      for (int np = 0; np < Cfg::NT / 2; ++np) {
        uint32_t b[4];
        loadKFrag<Cfg::BK>(b, sB, warpCol + 16 * np, ks, lane);
#pragma unroll
        for (int mt = 0; mt < Cfg::MT; ++mt) {
          mmaBf16(acc[mt][2 * np], af[mt], b[0], b[1]);
          mmaBf16(acc[mt][2 * np + 1], af[mt], b[2], b[3]);
        }
      }
    }
  }
  cpAsyncWait<0>();
  storeTile<Cfg, kSilu>(a, acc, rowStart, rowEnd, nBase, warpRow, warpCol, lane);
}

/** Row tiles of BM rows over any split of numRows rows into E segments (moe.h). */
inline long long maxTiles(int numRows, int E, int BM) {
  const long long nnz = numRows < E ? numRows : E;
  return (static_cast<long long>(numRows) + nnz * (BM - 1)) / BM;
}

template <class Cfg, bool kSilu>
cudaError_t launchGemm(const GemmArgs& a, cudaStream_t stream) {
  static std::atomic<unsigned long long> smemSet{0};
  const cudaError_t err =
      hs_attn::ensureSmemLimit(groupedGemmKernel<Cfg, kSilu>, Cfg::kSmemBytes, smemSet);
  if (err != cudaSuccess) return err;
  const long long tiles = maxTiles(a.numRows, a.E, Cfg::BM);
  const int outCols = kSilu ? a.N / 2 : a.N;
  const int colTile = kSilu ? Cfg::BN / 2 : Cfg::BN;
  if (tiles > 65535) return cudaErrorInvalidValue;
  if (tiles == 0) return cudaSuccess;
  const dim3 grid((outCols + colTile - 1) / colTile, static_cast<unsigned>(tiles));
  groupedGemmKernel<Cfg, kSilu><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

template <bool kSilu>
cudaError_t launchConfig(int config, const GemmArgs& a, cudaStream_t stream) {
  switch (config) {
    case HS_MOE_GEMM_SMALL:
      return launchGemm<SmallCfg, kSilu>(a, stream);
    case HS_MOE_GEMM_MEDIUM:
      return launchGemm<MediumCfg, kSilu>(a, stream);
    case HS_MOE_GEMM_LARGE:
      return launchGemm<LargeCfg, kSilu>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace
}  // namespace hs_moe

extern "C" int hsMoeGemmAutoConfig(int numRows, int numExperts) {
  const int active = numRows < numExperts ? numRows : numExperts;
  const double rowsPerExpert = active > 0 ? static_cast<double>(numRows) / active : 0.0;
  if (rowsPerExpert < 24) return HS_MOE_GEMM_SMALL;
  if (rowsPerExpert < 96) return HS_MOE_GEMM_MEDIUM;
  return HS_MOE_GEMM_LARGE;
}

extern "C" cudaError_t hsMoeGroupedGemmWith(int config, const void* x, const void* w, void* out,
                                            const int32_t* offsets, int numRows, int numExperts, int N, int K,
                                            int gateUpSilu, cudaStream_t stream) {
  if (numRows < 0 || numExperts < 1 || N < 8 || K < 8 || K % 8 != 0 || N % (gateUpSilu ? 16 : 8) != 0)
    return cudaErrorInvalidValue;
  if (numRows == 0) return cudaSuccess;
  if (x == nullptr || w == nullptr || out == nullptr || offsets == nullptr) return cudaErrorInvalidValue;
  if (!hs::aligned(x, 16) || !hs::aligned(w, 16) || !hs::aligned(out, 16)) return cudaErrorInvalidValue;
  if (config == HS_MOE_GEMM_AUTO) config = hsMoeGemmAutoConfig(numRows, numExperts);
  const hs_moe::GemmArgs a{static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w),
                           static_cast<__nv_bfloat16*>(out), offsets, numRows, numExperts, N, K};
  return gateUpSilu ? hs_moe::launchConfig<true>(config, a, stream) : hs_moe::launchConfig<false>(config, a, stream);
}

extern "C" cudaError_t hsMoeGroupedGemm(const void* x, const void* w, void* out, const int32_t* offsets,
                                        int numRows, int numExperts, int N, int K, int gateUpSilu,
                                        cudaStream_t stream) {
  return hsMoeGroupedGemmWith(HS_MOE_GEMM_AUTO, x, w, out, offsets, numRows, numExperts, N, K, gateUpSilu, stream);
}
