// Standalone correctness test of the paged attention kernels against a double-precision CPU
// reference (native/tests/paged_case.h). Usage: attention_test [--quick] [--only TEXT]
//   --quick      a small subset (for compute-sanitizer runs and the CPU emulation)
//   --only TEXT  only the cases whose name contains TEXT
// Every case: random bf16 inputs (never zero), KV on random non-contiguous blocks, NaN in every
// cache slot and qkv column the kernels must not read, output poisoned with NaN first; passes when
// every covered output element is finite, rows without keys are exactly 0,
// ||gpu - ref|| / ||ref|| < 1e-2 over the case and < 2e-2 for every (token, head) row.
// The decode cases with head dim 128 and few (request, kv head) pairs run twice: with the default
// launch options (deep small-batch pipeline, programmatic dependent launch) and with none
// (hsSetKernelLaunchOptions(0): the 2-stage pipeline, serialized launches).
// Exit code 0 iff all cases pass.
#include <cstdio>
#include <vector>

#include "../kernels/kernels.h"
#include "attention_test_fp8.h"
#include "paged_case.h"

using namespace hs_test;

namespace {

constexpr double kTol = 1e-2;
/** Case-name filter from --only (nullptr: every case). */
const char* gOnly = nullptr;

bool selected(const std::string& name) { return gOnly == nullptr || name.find(gOnly) != std::string::npos; }

/** Runs one decode or prefill case and records the result. */
bool runCase(const CaseSpec& spec, bool decode, Tally& tally) {
  if (!selected(spec.name)) return true;
  PagedCase c = buildCase(spec);
  const HsPagedAttentionParams p = c.params();
  int maxQ = 0;
  for (int q : spec.qLens) maxQ = std::max(maxQ, q);
  const std::vector<double> ref = referenceAttention(c);
  // Prefill: once without workspace (one pass), then with it (split-KV where the launch splits).
  const size_t prefillWs = decode ? 0 : hsPagedPrefillWorkspaceBytes(c.numReqs, c.numTokens, spec.numHeads,
                                                                    spec.numKvHeads, spec.headDim, maxQ,
                                                                    p.maxBlocksPerReq * spec.blockSize);
  bool all = true;
  for (int pass = 0; pass < (decode || prefillWs == 0 ? 1 : 2); ++pass) {
    HsPagedAttentionParams q = p;
    if (!decode && pass == 0) q.workspaceBytes = 0;
    if (pass == 1) c.dOut.poison();
    const int splits = decode ? hsPagedDecodeNumSplits(&q) : (pass == 1 ? static_cast<int>(prefillWs > 0) : 0);
    HS_CHECK(decode ? hsPagedDecodeAttention(&q, 0) : hsPagedPrefillAttention(&q, maxQ, 0));
    HS_CHECK(cudaDeviceSynchronize());
    const Comparison cmp = compareOutput(c, ref);
    const bool ok = cmp.ok(kTol);
    std::printf("%-4s %-44s splits=%-3d relErr=%.2e worstRow=%.2e maxAbs=%.2e nonFinite=%ld zeroRowErr=%ld %s\n",
                decode ? "dec" : (pass == 1 ? "preS" : "pre"), spec.name.c_str(), splits, cmp.relErr, cmp.worstRow,
                cmp.maxAbs, cmp.nonFinite, cmp.zeroRowErr, ok ? "ok" : "FAIL");
    tally.record(ok, (spec.name + (pass == 1 ? " (split-KV)" : "")).c_str());
    all = all && ok;
  }
  return all;
}

/** A decode spec: qLen 1 per request. */
CaseSpec decodeSpec(const char* name, int hq, int hkv, int d, int bs, std::vector<int> seqLens, int maxModelLen,
                    uint64_t seed) {
  CaseSpec s{name, hq, hkv, d, bs, std::vector<int>(seqLens.size(), 1), std::move(seqLens), maxModelLen, seed};
  return s;
}

/** A prefill spec from (queryLen, seqLen) pairs. */
CaseSpec prefillSpec(const char* name, int hq, int hkv, int d, int bs, std::vector<std::pair<int, int>> reqs,
                     int maxModelLen, uint64_t seed) {
  CaseSpec s{name, hq, hkv, d, bs, {}, {}, maxModelLen, seed};
  for (auto& r : reqs) {
    s.qLens.push_back(r.first);
    s.seqLens.push_back(r.second);
  }
  return s;
}

/** Random lengths in [lo, hi], with `zeros` padded rows (0) appended. */
std::vector<int> randomLens(uint64_t seed, int n, int lo, int hi, int zeros) {
  Rng rng(seed);
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + rng.below(hi - lo + 1));
  for (int i = 0; i < zeros; ++i) v.push_back(0);
  return v;
}

/**
 * CUDA-graph check: capture one decode launch, replay it, then change seqLens and block tables
 * in device memory (same static shapes) and replay again; both replays must match the reference.
 */
void graphCase(Tally& tally) {
  CaseSpec spec = decodeSpec("graph replay, lengths changed in device memory", 32, 8, 128, 16,
                             {3000, 1, 0, 700, 4096, 250, 0, 1500}, 4096, 77);
  spec.poison = false;  // every block holds data, so both block assignments are valid
  if (!selected(spec.name)) return;
  PagedCase c = buildCase(spec);
  const HsPagedAttentionParams p = c.params();
  cudaStream_t stream;
  HS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  HS_CHECK(hsPagedDecodeAttention(&p, stream));  // warm-up outside capture (sets the smem limit once)
  HS_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  HS_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  HS_CHECK(hsPagedDecodeAttention(&p, stream));
  HS_CHECK(cudaStreamEndCapture(stream, &graph));
  HS_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  Rng rng(78);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      c.seqLens = {17, 4096, 1200, 0, 1, 2048, 333, 4000};
      c.assignBlocks(rng);
      c.uploadTables();
    }
    c.dOut.poison();
    HS_CHECK(cudaGraphLaunch(exec, stream));
    HS_CHECK(cudaStreamSynchronize(stream));
    const Comparison cmp = compareOutput(c, referenceAttention(c));
    const bool ok = cmp.ok(kTol);
    std::printf("dec  %-44s round=%d relErr=%.2e worstRow=%.2e maxAbs=%.2e nonFinite=%ld %s\n",
                spec.name.c_str(), round, cmp.relErr, cmp.worstRow, cmp.maxAbs, cmp.nonFinite, ok ? "ok" : "FAIL");
    tally.record(ok, "graph replay");
  }
  HS_CHECK(cudaGraphExecDestroy(exec));
  HS_CHECK(cudaGraphDestroy(graph));
  HS_CHECK(cudaStreamDestroy(stream));
}

/** Unsupported sizes and a short workspace are refused with cudaErrorInvalidValue. */
void invalidCases(Tally& tally) {
  PagedCase c = buildCase(decodeSpec("invalid", 8, 2, 64, 16, {300, 20}, 4096, 5));
  HsPagedAttentionParams p = c.params();
  HsPagedAttentionParams bad = p;
  bad.headDim = 96;
  tally.record(hsPagedDecodeAttention(&bad, 0) == cudaErrorInvalidValue, "headDim 96 refused");
  bad = p;
  bad.numHeads = 7;
  tally.record(hsPagedPrefillAttention(&bad, 1, 0) == cudaErrorInvalidValue, "Hq % Hkv != 0 refused");
  bad = p;
  bad.blockSize = 24;
  tally.record(hsPagedDecodeAttention(&bad, 0) == cudaErrorInvalidValue, "blockSize 24 refused");
  bad = p;
  if (hsPagedDecodeNumSplits(&p) > 1) {
    bad.workspaceBytes = 16;
    tally.record(hsPagedDecodeAttention(&bad, 0) == cudaErrorInvalidValue, "short workspace refused");
  }
  bad = p;
  bad.out = p.out + 1;  // 2-byte offset
  tally.record(hsPagedDecodeAttention(&bad, 0) == cudaErrorInvalidValue, "misaligned output refused");
  bad = p;
  bad.qkvRowStride = p.qkvRowStride + 4;
  tally.record(hsPagedPrefillAttention(&bad, 1, 0) == cudaErrorInvalidValue, "qkv stride % 8 != 0 refused");
  tally.record(hsPagedDecodeAttention(nullptr, 0) == cudaErrorInvalidValue, "null params refused");
  HS_CHECK(cudaGetLastError());
  std::printf("invalid-argument checks done\n");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  gOnly = flagValue(argc, argv, "--only");
  cudaDeviceProp prop;
  HS_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  Tally tally;
  // ---- decode ----
  runCase(decodeSpec("d64 g4 bs32, random lens + padded rows", 8, 2, 64, 32, randomLens(11, 12, 1, 3000, 2), 4096,
                     101),
          true, tally);
  const int launchDefault = hsSetKernelLaunchOptions(-1);
  for (const int opts : {launchDefault, 0}) {
    hsSetKernelLaunchOptions(opts);
    const std::string tag = opts == 0 ? " [launch options 0]" : "";
    runCase(decodeSpec(("d128 g20 (2 head tiles) bs64" + tag).c_str(), 40, 2, 128, 64, {5000, 1, 777, 0, 64}, 8192,
                       102),
            true, tally);
    runCase(decodeSpec(("d128 g4 maxModelLen 256 (1 split)" + tag).c_str(), 32, 8, 128, 16, {256, 1, 100}, 256, 103),
            true, tally);
    runCase(decodeSpec(("llama-8b shape b1 x 3000" + tag).c_str(), 32, 8, 128, 16, {3000}, 4096, 112), true, tally);
  }
  hsSetKernelLaunchOptions(launchDefault);
  runCase(decodeSpec("d32 g2 bs16 (tiny MoE models)", 4, 2, 32, 16, randomLens(17, 5, 1, 700, 1), 1024, 110), true,
          tally);
  runCase(decodeSpec("d32 g2 maxModelLen 256 (1 split)", 4, 2, 32, 16, {256, 1, 100, 0}, 256, 111), true, tally);
  if (!quick) {
    runCase(decodeSpec("llama-8b shape bs16, lens 1..32K + padded",
                       32, 8, 128, 16,
                       {1, 2, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 4096, 8191, 32768, 0}, 32768, 104),
            true, tally);
    runCase(decodeSpec("d64 MHA (g1) bs16", 4, 4, 64, 16, randomLens(12, 7, 1, 2000, 1), 2048, 105), true, tally);
    runCase(decodeSpec("d128 g7 (qwen2-7b) bs16", 28, 4, 128, 16, randomLens(13, 9, 1, 9000, 1), 16384, 106), true,
            tally);
    runCase(decodeSpec("d128 g4 bs128", 16, 4, 128, 128, randomLens(14, 6, 1, 5000, 1), 8192, 107), true, tally);
    runCase(decodeSpec("d64 g2 bs8", 8, 4, 64, 8, randomLens(15, 6, 1, 3000, 1), 4096, 108), true, tally);
    runCase(decodeSpec("batch 160 (no split, direct bf16 write)", 32, 8, 128, 16, randomLens(16, 150, 0, 600, 10),
                       1024, 109),
            true, tally);
    graphCase(tally);
  }
  // ---- prefill (general causal, mixed) ----
  runCase(prefillSpec("d64 g3 bs32 mixed chunks + decodes", 12, 4, 64, 32,
                      {{200, 200}, {45, 1000}, {1, 1}, {333, 333}, {1, 4000}}, 4096, 201),
          false, tally);
  runCase(prefillSpec("d128 g20 bs64", 40, 2, 128, 64, {{100, 100}, {37, 400}, {1, 64}}, 1024, 202), false, tally);
  runCase(prefillSpec("d32 g2 bs16 mixed (tiny MoE models)", 4, 2, 32, 16, {{300, 300}, {7, 40}, {1, 9}}, 1024, 208),
          false, tally);
  runCase(prefillSpec("d64 g4 few queries over a long context (split-KV)", 8, 2, 64, 16, {{24, 3000}, {1, 700}}, 4096,
                      209),
          false, tally);
  if (!quick) {
    runCase(prefillSpec("llama-8b shape bs16 mixed + padded", 32, 8, 128, 16,
                        {{300, 300}, {77, 1077}, {1, 501}, {129, 144}, {0, 0}, {1, 1}, {513, 600}, {1, 0}}, 2048, 203),
            false, tally);
    runCase(prefillSpec("d128 MHA bs8", 2, 2, 128, 8, {{1000, 1500}, {16, 16}}, 2048, 204), false, tally);
    runCase(prefillSpec("d128 g4 long (2 x 2K queries)", 8, 2, 128, 16, {{1024, 2048}, {2048, 2048}}, 2048, 205),
            false, tally);
    runCase(prefillSpec("d64 g4 bs256", 4, 1, 64, 256, {{300, 700}, {5, 5}}, 1024, 206), false, tally);
    runCase(prefillSpec("decode batch through prefill kernel", 32, 8, 128, 16,
                        {{1, 1}, {1, 17}, {1, 300}, {1, 4096}, {1, 65}, {1, 1000}}, 4096, 207),
            false, tally);
  }
  // ---- fp8 (e4m3) KV cache ----
  fp8ReshapeCase(tally, gOnly);
  fp8AmaxCase(tally, gOnly);
  fp8AttentionCase(decodeSpec("fp8 d64 g4 bs16 decode", 8, 2, 64, 16, randomLens(21, 6, 1, 1500, 1), 2048, 301), true, tally, gOnly);
  fp8AttentionCase(prefillSpec("fp8 d128 g4 bs16 prefill", 16, 4, 128, 16, {{100, 100}, {33, 300}, {1, 70}}, 512, 302), false, tally, gOnly);
  if (!quick) {
    fp8AttentionCase(decodeSpec("fp8 llama-8b shape decode", 32, 8, 128, 16, randomLens(22, 9, 1, 9000, 1), 16384, 303), true, tally, gOnly);
    fp8AttentionCase(prefillSpec("fp8 d64 g3 prefill", 12, 4, 64, 32, {{200, 200}, {45, 1000}, {1, 1}}, 2048, 304), false, tally, gOnly);
  }
  invalidCases(tally);
  return tally.finish("attention_test");
}
