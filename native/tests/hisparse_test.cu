// Standalone correctness test of the HiSparse kernels (native/kernels/hisparse.h and
// hsSparseDecodeAttention) against the C++ ports of the CPU oracles (hisparse_ref.h) and a
// float64 attention reference. Runs on a GPU (scripts/gpu/hisparse_check.sh builds it with nvcc)
// and on the CPU through the emulator (bash native/tests/emu/run_emu.sh hisparse --quick).
// This file holds main() and the --only filter; the cases sit in hisparse_test_{kv,select,
// resolve,attention}.cu (one per kernel group, see hisparse_test_common.h), all linked together.
// Usage: hisparse_test [--quick] [--only TEXT] (the resolver's swap-in bandwidth: resolver_bench.cu)
// Exact checks: KV rows and digests written by hsReshapeAndCacheDigest (bits; bf16 and fp8
// digests, the fp8 directed rounding exhaustively), selections of hsQuestSelect over bf16 and
// fp8 digests (pages, ties included), hsResolve over a scripted multi-step sequence (blocks,
// lengths, LRU state, hits / misses, held pages, every copied byte), the mirror's host layout,
// sparse attention with dense-equal tables (bits equal to hsPagedDecodeAttention). Tolerance
// checks: sparse attention with per-head tables against float64 (relative error < 1e-2).
#include <string>

#include "hisparse_test_common.h"

using namespace hs_test;

namespace {

const char* gOnly = nullptr;

}  // namespace

bool hs_test::selected(const char* name) {
  return gOnly == nullptr || std::string(name).find(gOnly) != std::string::npos;
}

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  gOnly = flagValue(argc, argv, "--only");
  cudaDeviceProp prop;
  HS_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  Tally tally;
  directedRoundingCase(tally);
  digestCase(tally, 4, 2, 64, 8);
  digestCase(tally, 4, 2, 64, 16, 4);  // sub-page digests: 4 per page
  digestCase(tally, 4, 2, 64, 8, 0, true);  // fp8 digests, rounded outward
  digestCase(tally, 4, 2, 64, 16, 4, true);
  selectCase(tally, 8, 2, 64, 16, 11);
  selectCase(tally, 8, 2, 64, 16, 17, 4);  // a page scores as the best of its 4 sub-page digests
  selectCase(tally, 8, 2, 64, 16, 11, 1, true);  // fp8 digests
  selectCase(tally, 8, 2, 64, 16, 17, 4, true);
  // Sub-pages scored kN at a time (hisparse_select.cu scoreChunk): D = 32 (4 lanes) with S = 4
  // splits every lane bit; S = 8 takes two chunks of 4; D = 16 (2 lanes) caps kN at 2; S = 3
  // scores one at a time.
  selectCase(tally, 4, 2, 32, 16, 26, 4);
  selectCase(tally, 4, 2, 64, 16, 27, 8, true);
  selectCase(tally, 4, 2, 16, 16, 28, 4);
  selectCase(tally, 4, 2, 64, 12, 29, 3, true);
  hsQuestSetScoreChunkCap(1);  // the benchmark's one-at-a-time comparison
  selectCase(tally, 4, 2, 64, 16, 30, 4, true);
  hsQuestSetScoreChunkCap(0);
  selectCase(tally, 20, 2, 64, 16, 14);  // 10 heads per group: two head tiles of the scoring kernel
  selectCase(tally, 2, 2, 64, 16, 15);   // 1 head per group
  selectCase(tally, 16, 2, 64, 16, 16);  // 8 heads per group
  // One scoring CTA per (row, kv head): every page through the grid-stride loop; D = 96 has
  // 12 lanes of dims padded to 16, D = 32 puts 8 pages in a warp.
  hsQuestSetScoreCtaCap(1);
  selectCase(tally, 8, 2, 64, 16, 21);
  selectCase(tally, 4, 2, 96, 16, 22);
  selectCase(tally, 4, 2, 32, 16, 23);
  selectCase(tally, 4, 2, 32, 16, 24, 2);
  selectCase(tally, 4, 2, 96, 16, 25, 2, true);
  hsQuestSetScoreCtaCap(0);
  overlapCase(tally);
  resolveCase(tally, 2, 64, 8, quick ? 6 : 40, ResolveMode::kFused);
  resolveCase(tally, 2, 64, 8, quick ? 6 : 40, ResolveMode::kSplit);
  resolveCase(tally, 2, 64, 8, quick ? 6 : 40, ResolveMode::kSplitFp8);
  resolveErrorCase(tally);
  mirrorCase(tally, 2, 64, 8, false);
  mirrorCase(tally, 2, 64, 8, true);
  sparseAttentionCase(tally, 8, 2, 64, 16, {300, 1, 0, 777, 64}, 1024);
  if (!quick) {
    digestCase(tally, 32, 8, 128, 16);
    digestCase(tally, 32, 8, 128, 16, 4, true);  // the Llama-3.1-8B shape, 4-token fp8 digests
    selectCase(tally, 32, 8, 128, 16, 12);
    selectCase(tally, 32, 8, 128, 16, 12, 4, true);
    selectCase(tally, 28, 4, 128, 32, 13);
    resolveCase(tally, 8, 128, 16, 60, ResolveMode::kFused);
    resolveCase(tally, 8, 128, 16, 60, ResolveMode::kSplit);
    resolveCase(tally, 8, 128, 16, 60, ResolveMode::kSplitFp8);
    mirrorCase(tally, 8, 128, 16, false);
    mirrorCase(tally, 8, 128, 16, true);
    sparseAttentionCase(tally, 32, 8, 128, 16, {4000, 1, 0, 777, 2048, 16, 17, 9000}, 16384);
    sparseAttentionCase(tally, 40, 2, 128, 64, {5000, 1, 700}, 8192);
  }
  return tally.finish("hisparse_test");
}
