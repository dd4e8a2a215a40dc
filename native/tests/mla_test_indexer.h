// The DSA indexer cases of mla_test.cu: hsMlaIndexerLogits (the tensor-core kernel for bf16
// shapes it takes) and hsMlaIndexerLogitsSimt against the float64 reference, and hsMlaTopk
// against the reference's order and tie rule, at short contexts and at contexts of thousands of
// positions (several logits spans, a top-k over long per-thread runs). Included by mla_test.cu
// inside its anonymous namespace, after makeStep, DevStep, randVals and tally.
#pragma once

/** Logits of one kernel (hsMlaIndexerLogits or hsMlaIndexerLogitsSimt) over the step's inputs. */
std::vector<float> runIndexerLogits(cudaError_t (*fn)(const HsMlaIndexerParams*, cudaStream_t),
                                    const mla_ref::Step& st, DevStep& ds, const DeviceBuffer<uint16_t>& dq,
                                    const DeviceBuffer<uint16_t>& dw, const DeviceBuffer<uint16_t>& dk, int Hi,
                                    int Di, int width) {
  const int T = st.numTokens();
  DeviceBuffer<float> dLogits(static_cast<size_t>(T) * width);
  dLogits.poison();
  HsMlaIndexerParams p{};
  p.q = dq.ptr;
  p.headWeights = dw.ptr;
  p.qDtype = HS_DTYPE_BF16;
  p.indexKeys = dk.ptr;
  p.keyDtype = HS_DTYPE_BF16;
  p.logits = dLogits.ptr;
  p.queryStartLoc = ds.qsl.ptr;
  p.seqLens = ds.seqLens.ptr;
  p.blockTables = ds.blockTables.ptr;
  p.maxBlocksPerReq = st.maxBlocksPerReq;
  p.numReqs = st.numReqs();
  p.numTokens = T;
  p.numHeads = Hi;
  p.headDim = Di;
  p.blockSize = st.blockSize;
  p.softmaxScale = 1.f / std::sqrt(static_cast<float>(Di));
  p.headWeightScale = 1.f / std::sqrt(static_cast<float>(Hi));
  p.width = width;
  HS_CHECK(fn(&p, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  return dLogits.download();
}

/** True when logits match ref: -inf exactly where ref is, else max |diff| / max |ref| < tol. */
bool logitsMatch(const std::vector<float>& logits, const std::vector<float>& ref, double tol, const char* what) {
  double num = 0, den = 1e-6;
  bool infOk = true;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      infOk &= std::isinf(logits[i]) && logits[i] < 0;
      continue;
    }
    num = std::max(num, static_cast<double>(std::fabs(logits[i] - ref[i])));
    den = std::max(den, static_cast<double>(std::fabs(ref[i])));
  }
  if (!infOk || num / den >= tol) std::printf("  %s: -inf %s, rel err %.3g\n", what, infOk ? "ok" : "WRONG", num / den);
  return infOk && num / den < tol;
}

/**
 * hsMlaTopk over `logits` ([T, width], T = positions.size()) against mla_ref::topk, entry for
 * entry; records the result as `label` (and prints the count of differing entries).
 */
void checkTopk(const std::vector<float>& logits, int width, const std::vector<int32_t>& positions, int k,
               const std::string& label) {
  const int T = static_cast<int>(positions.size());
  DeviceBuffer<float> dLogits(logits.size());
  DeviceBuffer<int32_t> dPos(T), dSel(static_cast<size_t>(T) * k);
  dLogits.upload(logits);
  dPos.upload(positions);
  dSel.poison();
  HS_CHECK(hsMlaTopk(dLogits.ptr, dPos.ptr, dSel.ptr, T, width, k, nullptr));
  HS_CHECK(cudaDeviceSynchronize());
  const auto sel = dSel.download();
  const auto want = mla_ref::topk(logits, width, positions, k);
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += sel[i] != want[i];
  if (bad) std::printf("  %s: %d of %zu entries differ\n", label.c_str(), bad, want.size());
  tally.record(bad == 0, label.c_str());
}

/**
 * Logits of both kernels vs the float64 reference (relative 1e-5), then hsMlaTopk over the
 * dispatching kernel's logits (with `levels` > 0 reshaped to `levels` values, a NaN and a -0 to
 * force ties) vs the reference's selection, entry for entry.
 */
void testIndexer(const char* name, int Hi, int Di, const std::vector<std::pair<int, int>>& reqs, int k, int levels,
                 Rng& rng) {
  int numBlocks = 0;
  const int bs = 16;
  int longest = 0;
  for (auto [q, s] : reqs) longest = std::max(longest, s);
  const int mbpr = std::max(24, (longest + bs - 1) / bs + 1);
  const auto st = makeStep(reqs, bs, mbpr, rng, numBlocks);
  const int T = st.numTokens(), width = mbpr * bs;
  const auto q = randVals(rng, static_cast<size_t>(T) * Hi * Di, 1.0, true);
  const auto w = randVals(rng, static_cast<size_t>(T) * Hi, 1.0, true);
  const auto keys = randVals(rng, static_cast<size_t>(numBlocks) * bs * Di, 1.0, true);
  DevStep ds(st);
  DeviceBuffer<uint16_t> dq(q.size()), dw(w.size()), dk(keys.size());
  dq.upload(toBf16(q));
  dw.upload(toBf16(w));
  dk.upload(toBf16(keys));
  const float ss = 1.f / std::sqrt(static_cast<float>(Di)), hs = 1.f / std::sqrt(static_cast<float>(Hi));
  const auto ref = mla_ref::indexerLogits(q, w, keys, st, Hi, Di, ss, hs, width);
  auto logits = runIndexerLogits(hsMlaIndexerLogits, st, ds, dq, dw, dk, Hi, Di, width);
  const auto simt = runIndexerLogits(hsMlaIndexerLogitsSimt, st, ds, dq, dw, dk, Hi, Di, width);
  tally.record(logitsMatch(logits, ref, 1e-5, name), (std::string("indexer logits ") + name).c_str());
  tally.record(logitsMatch(simt, ref, 1e-5, name), (std::string("indexer logits SIMT ") + name).c_str());
  // Top-k over the device logits, reshaped to force ties / NaN / -0 when asked.
  if (levels > 0)
    for (size_t i = 0; i < logits.size(); ++i)
      if (!std::isinf(logits[i])) logits[i] = static_cast<float>(rng.below(levels)) - 1.f;
  if (levels > 0) {
    logits[0] = std::nanf("");
    logits[1] = -0.f;
  }
  std::vector<int32_t> positions(T);
  for (int t = 0; t < T; ++t) {
    int r, pp;
    st.where(t, r, pp);
    positions[t] = pp;
  }
  checkTopk(logits, width, positions, k, std::string("indexer top-k ") + name);
}

/**
 * hsMlaTopk alone on crafted rows that reach each of its paths: the threshold bin taken whole
 * (exactly k keys of one large value), candidates in shared memory (distinct values), and the
 * general radix path (a bin of more keys than the shared-memory candidates hold: many ties).
 */
void testTopkPaths(Rng& rng) {
  struct Row {
    const char* name;
    int n;
    int k;
    std::function<float(int)> value;
  };
  const Row rows[] = {
      {"whole bin (k keys of 5.0)", 5000, 100, [](int i) { return i % 50 == 7 ? 5.f : 0.001f * (i % 97); }},
      // One binade: every key shares its top byte, so the radix select over the taken-whole bin
      // stops at a prefix that the lower bins' keys exceed (the bin's smallest key is the threshold).
      {"whole bin within one binade", 5000, 100, [](int i) { return i % 50 == 7 ? 1.5f : 1.f + 0.0001f * (i % 997); }},
      // Edge rows (from the review): all equal, -inf / NaN majorities, +inf, signed zeros at the
      // threshold, one outlier packing the rest into the lowest bins, -inf mixed into bin 0.
      {"all equal (20000)", 20000, 2048, [](int) { return 0.25f; }},
      {"-inf majority", 20000, 2048, [](int i) { return i % 200 == 3 ? 0.1f * i : -INFINITY; }},
      {"NaN majority", 6000, 300, [](int i) { return i % 50 == 3 ? 0.1f * i : std::nanf(""); }},
      {"+inf and finite", 9000, 64, [](int i) { return i % 300 == 1 ? INFINITY : 0.001f * (i % 1000); }},
      {"+0 / -0 at the threshold", 3000, 1000,
       [](int i) { return i % 3 == 0 ? (i % 2 ? -0.f : 0.f) : (i % 3 == 1 ? 1.f : -1.f); }},
      {"one outlier", 20000, 2048, [](int i) { return i == 0 ? 1e6f : 0.00001f * i; }},
      {"-inf mixed into the lowest bin", 9000, 8900, [](int i) { return i % 2 ? -INFINITY : -1.f + 1e-7f * i; }},
      {"a span past FLT_MAX", 4000, 100, [](int i) { return i % 2 ? 3e38f : -3e38f + 1e31f * (i % 100); }},
      {"shared-memory candidates (distinct)", 9000, 700, [&](int) { return static_cast<float>(rng.below(1 << 20)); }},
      {"general radix path (10000 ties)", 12000, 50, [](int i) { return i % 6 == 5 ? 0.5f : 1.f; }},
  };
  for (const auto& r : rows) {
    const int width = r.n + 16;
    std::vector<float> logits(width, -INFINITY);
    for (int i = 0; i < r.n; ++i) logits[i] = r.value(i);
    checkTopk(logits, width, {r.n - 1}, r.k, std::string("top-k path: ") + r.name);
  }
}

void indexerTests(bool quick) {
  Rng rng(33);
  testIndexer("tiny 4x32 k32 (decode + prefill)", 4, 32, {{1, 300}, {6, 40}, {1, 7}}, 32, 0, rng);
  testIndexer("ties (3 levels), NaN, -0", 4, 32, {{1, 200}, {2, 120}}, 32, 3, rng);
  testIndexer("k >= context", 4, 32, {{1, 20}, {1, 1}}, 32, 0, rng);
  testIndexer("heads 20x64 (a partial head tile) k48", 20, 64, {{1, 700}, {2, 90}}, 48, 0, rng);
  testIndexer("long context 4x32 k512, ties (5 levels)", 4, 32, {{1, 6000}, {1, 2100}}, 512, 5, rng);
  if (!quick) {
    testIndexer("GLM-5 heads 32x128 k64", 32, 128, {{1, 380}, {3, 100}}, 64, 0, rng);
    testIndexer("DeepSeek-V3.2 heads 64x128 k256", 64, 128, {{1, 1500}, {1, 300}}, 256, 0, rng);
    testIndexer("long context 8x32 k2048", 8, 32, {{1, 12000}}, 2048, 0, rng);
  } else {
    testIndexer("GLM-5 heads 32x128 k64", 32, 128, {{1, 150}}, 64, 0, rng);
  }
  testTopkPaths(rng);
}
