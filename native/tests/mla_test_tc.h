// The tensor-core MLA attention cases of mla_test.cu (hsMlaAttentionTc against the float64
// reference and the SIMT kernel, its oracle). Included by mla_test.cu inside its anonymous
// namespace, after AttnCase, makeInputs, runAttention, relMaxErr and tally.
#pragma once

/** Relative error bound of the tensor-core kernel: q and P are rounded to bf16 (2^-9 each). */
constexpr double kTcTol = 1e-2;

/**
 * The tensor-core kernel (hsMlaAttentionTc) against the float64 reference and the SIMT kernel
 * (its oracle) on the same inputs; hsMlaAttention must pick it (bit-identical outputs), and with
 * every position selected it must equal its own dense run exactly.
 */
void testAttentionTc(const AttnCase& c, Rng& rng) {
  const auto in = makeInputs(c, rng);
  const auto tc = runAttention(c, in.st, in.q, in.cache, in.kvB, in.topk, in.K, hsMlaAttentionTc);
  const auto simt = runAttention(c, in.st, in.q, in.cache, in.kvB, in.topk, in.K, hsMlaAttentionSimt);
  const auto ref = mla_ref::attention(in.q, in.cache, in.kvB, in.st, c.d, in.topk, in.K);
  const double eRef = relMaxErr(tc, ref);
  const double eSimt = relMaxErr(tc, simt);
  std::printf("  tc %s: rel err %.3g vs float64, %.3g vs SIMT\n", c.name, eRef, eSimt);
  tally.record(eRef < kTcTol, (std::string("tc vs float64 ") + c.name).c_str());
  tally.record(eSimt < kTcTol, (std::string("tc vs SIMT ") + c.name).c_str());
  const auto viaDispatch = runAttention(c, in.st, in.q, in.cache, in.kvB, in.topk, in.K, hsMlaAttention);
  tally.record(viaDispatch == tc, (std::string("hsMlaAttention runs tc ") + c.name).c_str());
  if (c.topk < 0) {
    const auto dense = runAttention(c, in.st, in.q, in.cache, in.kvB, {}, 0, hsMlaAttentionTc);
    tally.record(dense == tc, (std::string("tc sparse == tc dense ") + c.name).c_str());
  }
}

/** Tensor-core kernel cases: GLM-5's 64 heads x (512 + 64) rows (N, Vd cut to keep the reference fast). */
void attentionTcTests(bool quick) {
  Rng rng(57);
  const double sc = 1.0 / std::sqrt(80.0);
  const mla_ref::Dims glm{64, 16, 64, 32, 512, sc};
  const mla_ref::Dims wide{20, 16, 64, 24, 512, sc};
  const mla_ref::Dims h128{128, 16, 64, 16, 512, sc};
  testAttentionTc({"20 heads (padded M), one split, DSA top-40", wide, {{1, 70}, {2, 33}}, 16, 5, 40}, rng);
  testAttentionTc({"64 heads DSA all positions (split-KV)", glm, {{1, 100}, {2, 50}}, 16, 8, -1}, rng);
  if (quick) return;
  testAttentionTc({"64 heads dense decode x3 (split-KV, empty splits)", glm, {{1, 300}, {1, 5}, {1, 700}}, 16, 48, 0},
                  rng);
  testAttentionTc({"64 heads DSA top-256 decode + prefill chunk", glm, {{1, 600}, {4, 90}}, 16, 40, 256}, rng);
  testAttentionTc({"128 heads (two head groups) dense", h128, {{1, 150}, {1, 40}}, 16, 10, 0}, rng);
  std::vector<std::pair<int, int>> many;
  for (int i = 0; i < 140; ++i) many.push_back({1, 1 + (i * 37) % 60});
  testAttentionTc({"140 decode tokens (T >= SMs: one split)", glm, many, 16, 4, 0}, rng);
}
