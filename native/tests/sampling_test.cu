// Standalone test of hsSample against a CPU implementation of the rule in
// src/backends/backend.ts (DeviceSamplingRows). Usage: sampling_test [--quick] [--no-timing]
// Crafted rows (ties at the argmax, top-k boundary ties, top-p edges and ties, min-p edges, a
// 128K vocabulary with picks across tiles) must give exactly the hand-computed ids. Random rows
// must give the reference id, or (counted separately) an id the reference gives when u, topP and
// minP move by 1e-6 relative: host and device expf may differ in the last ulp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "../kernels/sampling.h"
#include "test_common.h"

using namespace hs_test;

namespace {

/** One row of sampler input. */
struct SampleRow {
  std::vector<float> logits;
  float temperature;
  int topK;
  float topP;
  float minP;
  float u;
};

/** CPU reference of the rule with thresholds (tp, mp) and draw u; exact sums in double. */
struct Reference {
  std::vector<float> p;
  std::vector<float> sortedDesc;
  int argmax = 0;
  bool greedy = false;
  float tK = 0.f;

  explicit Reference(const SampleRow& r) {
    const int V = static_cast<int>(r.logits.size());
    float m = -__builtin_huge_valf();
    for (int i = 0; i < V; ++i)
      if (r.logits[i] > m) {
        m = r.logits[i];
        argmax = i;
      }
    greedy = !(r.temperature > 0.f);
    if (greedy) return;
    const float invT = 1.f / r.temperature;
    p.resize(V);
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp((r.logits[i] - m) * invT);
    const float invZ = 1.f / static_cast<float>(z);
    for (int i = 0; i < V; ++i) p[i] = std::max(std::exp((r.logits[i] - m) * invT) * invZ, 0.f);
    sortedDesc = p;
    std::sort(sortedDesc.begin(), sortedDesc.end(), [](float a, float b) { return a > b; });
    if (r.topK > 0 && r.topK < V) tK = sortedDesc[r.topK - 1];
  }

  /** Largest p value t with mass(p >= t) >= topP * total (ties counted together). */
  float topPThreshold(float tp) const {
    if (!(tp < 1.f)) return 0.f;
    double total = 0;
    for (float v : sortedDesc) total += v;
    const double target = std::max(static_cast<double>(tp), 0.0) * total;
    double cum = 0;
    for (size_t i = 0; i < sortedDesc.size();) {
      size_t j = i;
      while (j < sortedDesc.size() && sortedDesc[j] == sortedDesc[i]) cum += sortedDesc[j++];
      if (cum >= target && sortedDesc[i] > 0.f) return sortedDesc[i];
      i = j;
    }
    return 0.f;
  }

  /** The sampled id for thresholds from (tp, mp) and draw u. */
  int pick(float tp, float mp, double u) const {
    if (greedy) return argmax;
    float thr = std::max(tK, topPThreshold(tp));
    if (mp > 0.f) thr = std::max(thr, mp * p[argmax]);
    double kept = 0;
    int last = -1;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] >= thr) {
        kept += p[i];
        last = static_cast<int>(i);
      }
    const double target = std::min(std::max(u, 0.0), 0.99999994) * kept;
    double run = 0;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] >= thr) {
        run += p[i];
        if (run > target) return static_cast<int>(i);
      }
    return last;
  }
};

/** Runs hsSample on rows of equal V; returns the ids. */
std::vector<int> runDevice(const std::vector<SampleRow>& rows, float* msOut = nullptr, int reps = 1) {
  const int B = static_cast<int>(rows.size());
  const int V = static_cast<int>(rows[0].logits.size());
  std::vector<float> logits, temp, topP, minP, u;
  std::vector<int> topK;
  for (const auto& r : rows) {
    logits.insert(logits.end(), r.logits.begin(), r.logits.end());
    temp.push_back(r.temperature);
    topK.push_back(r.topK);
    topP.push_back(r.topP);
    minP.push_back(r.minP);
    u.push_back(r.u);
  }
  DeviceBuffer<float> dLogits(logits.size()), dTemp(B), dTopP(B), dMinP(B), dU(B);
  DeviceBuffer<int> dTopK(B), dOut(B);
  dLogits.upload(logits);
  dTemp.upload(temp);
  dTopK.upload(topK);
  dTopP.upload(topP);
  dMinP.upload(minP);
  dU.upload(u);
  dOut.poison();
  DeviceBuffer<unsigned char> ws(hsSampleWorkspaceBytes(B, V));
  auto launch = [&] {
    HS_CHECK(hsSample(dLogits.ptr, B, V, dTemp.ptr, dTopK.ptr, dTopP.ptr, dMinP.ptr, dU.ptr, dOut.ptr, ws.ptr,
                      ws.bytes(), 0));
  };
  launch();
  HS_CHECK(cudaDeviceSynchronize());
  if (msOut != nullptr) {
    cudaEvent_t a, b;
    HS_CHECK(cudaEventCreate(&a));
    HS_CHECK(cudaEventCreate(&b));
    std::vector<float> times;
    for (int i = 0; i < reps; ++i) {
      HS_CHECK(cudaEventRecord(a));
      launch();
      HS_CHECK(cudaEventRecord(b));
      HS_CHECK(cudaEventSynchronize(b));
      float ms;
      HS_CHECK(cudaEventElapsedTime(&ms, a, b));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    *msOut = times[times.size() / 2];
    HS_CHECK(cudaEventDestroy(a));
    HS_CHECK(cudaEventDestroy(b));
  }
  return dOut.download();
}

/** Row from probabilities: logits = ln p (T = 1 reproduces p up to rounding). */
SampleRow fromProbs(const std::vector<double>& probs, int k, float tp, float mp, float u) {
  SampleRow r{{}, 1.f, k, tp, mp, u};
  for (double q : probs) r.logits.push_back(static_cast<float>(std::log(q)));
  return r;
}

/** Crafted rows with hand-computed answers (see the comments); each must match exactly. */
void craftedCases(Tally& tally) {
  struct Crafted {
    const char* name;
    SampleRow row;
    int expected;
  };
  const float ninf = -__builtin_huge_valf();
  const std::vector<float> tieLogits = {1, 3, 2, 3, 2, 0};
  std::vector<Crafted> cases = {
      {"greedy: tie at max -> lowest id", {{0.5f, 2, -1, 3, 0, 3, 1, ninf}, 0.f, 0, 1.f, 0.f, 0.5f}, 3},
      {"negative temperature is greedy", {{0.5f, 2, -1, 3, 0, 3, 1, ninf}, -1.f, 5, 0.5f, 0.f, 0.9f}, 3},
      // k=3: third largest p is e^2 (tie ids 2,4) -> kept {1,2,3,4}; masses e3,e2,e3,e2 (sum 54.95).
      {"top-k boundary tie kept, u=0.45", {tieLogits, 1.f, 3, 1.f, 0.f, 0.45f}, 2},
      {"top-k boundary tie kept, u=0.6", {tieLogits, 1.f, 3, 1.f, 0.f, 0.6f}, 3},
      {"top-k boundary tie kept, u=0.999", {tieLogits, 1.f, 3, 1.f, 0.f, 0.999f}, 4},
      {"top-k boundary tie kept, u=0", {tieLogits, 1.f, 3, 1.f, 0.f, 0.f}, 1},
      // k=2: both e^3 tokens (ids 1, 3) kept; u=0.75 falls in id 3's half.
      {"top-k=2 with tie at the top", {tieLogits, 1.f, 2, 1.f, 0.f, 0.75f}, 3},
      // p = [0.2, 0.5, 0.3]: topP 0.79 keeps {0.5, 0.3}; 0.81 keeps all; 0.49 keeps only 0.5.
      {"top-p 0.79 keeps ids 1,2 (u=0.5)", fromProbs({0.2, 0.5, 0.3}, 0, 0.79f, 0.f, 0.5f), 1},
      {"top-p 0.79 keeps ids 1,2 (u=0.7)", fromProbs({0.2, 0.5, 0.3}, 0, 0.79f, 0.f, 0.7f), 2},
      {"top-p 0.81 keeps all (u=0.1)", fromProbs({0.2, 0.5, 0.3}, 0, 0.81f, 0.f, 0.1f), 0},
      {"top-p 0.49 keeps only the max", fromProbs({0.2, 0.5, 0.3}, 0, 0.49f, 0.f, 0.05f), 1},
      // four tied tokens hold 0.918 of the mass: topP 0.1 keeps all four (ties kept).
      {"top-p ties kept (u=0.9)", {{0, 0, 0, 0, -1}, 1.f, 0, 0.1f, 0.f, 0.9f}, 3},
      {"top-p ties kept (u=0.3)", {{0, 0, 0, 0, -1}, 1.f, 0, 0.1f, 0.f, 0.3f}, 1},
      // p = [0.1, 0.4, 0.05, 0.25, 0.2]: minP 0.49 -> thr 0.196 keeps id 4; 0.51 -> 0.204 drops it.
      {"min-p 0.49 keeps 0.2 (u=0.95)", fromProbs({0.1, 0.4, 0.05, 0.25, 0.2}, 0, 1.f, 0.49f, 0.95f), 4},
      {"min-p 0.51 drops 0.2 (u=0.95)", fromProbs({0.1, 0.4, 0.05, 0.25, 0.2}, 0, 1.f, 0.51f, 0.95f), 3},
      // p = [0.05,0.3,0.15,0.2,0.1,0.2]: k=4 -> tK 0.15; topP 0.6 -> tP 0.2; kept {1,3,5}, K = 0.7.
      {"top-k + top-p + min-p (u=0.5)", fromProbs({0.05, 0.3, 0.15, 0.2, 0.1, 0.2}, 4, 0.6f, 0.1f, 0.5f), 3},
      {"top-k + top-p + min-p (u=0.9)", fromProbs({0.05, 0.3, 0.15, 0.2, 0.1, 0.2}, 4, 0.6f, 0.1f, 0.9f), 5},
      {"-inf logits never sampled", {{ninf, 1, ninf, 1, ninf}, 1.f, 0, 1.f, 0.f, 0.999f}, 3},
  };
  // 128K vocabulary: background -10, spikes 5 (ids 5, 70000), 4.5 (9000), 4 (128255); topP 0.9
  // keeps the four spikes (cumulative 0.664, 0.865, 0.987); picks cross kVec x 1024 tiles.
  SampleRow big{std::vector<float>(128256, -10.f), 1.f, 0, 0.9f, 0.f, 0.5f};
  big.logits[5] = 5.f;
  big.logits[70000] = 5.f;
  big.logits[9000] = 4.5f;
  big.logits[128255] = 4.f;
  cases.push_back({"128K vocab top-p spikes (u=0.5)", big, 9000});
  big.u = 0.7f;
  cases.push_back({"128K vocab top-p spikes (u=0.7)", big, 70000});
  big.u = 0.99f;
  cases.push_back({"128K vocab top-p spikes (u=0.99)", big, 128255});
  big.topK = 2;
  big.u = 0.6f;
  cases.push_back({"128K vocab top-k=2 tie (u=0.6)", big, 70000});

  for (const auto& c : cases) {
    const std::vector<int> got = runDevice({c.row});
    const int ref = Reference(c.row).pick(c.row.topP, c.row.minP, c.row.u);
    const bool ok = got[0] == c.expected && ref == c.expected;
    std::printf("crafted  %-40s expected=%-6d gpu=%-6d cpu=%-6d %s\n", c.name, c.expected, got[0], ref,
                ok ? "ok" : "FAIL");
    tally.record(ok, c.name);
  }
}

/** Random rows of one vocabulary size; see the file comment for the acceptance rule. */
void randomCases(int V, int B, uint64_t seed, Tally& tally) {
  Rng rng(seed);
  const float temps[] = {0.f, 0.3f, 0.7f, 1.f, 1.5f};
  const int ks[] = {0, 1, 2, 20, 100, 5000};
  const float tps[] = {1.f, 0.95f, 0.9f, 0.5f, 0.1f};
  const float mps[] = {0.f, 0.f, 0.01f, 0.1f};
  std::vector<SampleRow> rows;
  for (int b = 0; b < B; ++b) {
    SampleRow r{std::vector<float>(V), temps[rng.below(5)], ks[rng.below(6)], tps[rng.below(5)], mps[rng.below(4)],
                static_cast<float>(rng.uniform())};
    const double sigma = 1.0 + 2.0 * rng.below(3);
    for (auto& x : r.logits) x = static_cast<float>(sigma * rng.normal());
    for (int s = 0; s < 5; ++s) r.logits[rng.below(V)] += static_cast<float>(rng.uniform(2.0, 10.0));
    rows.push_back(std::move(r));
  }
  const std::vector<int> got = runDevice(rows);
  const std::vector<int> again = runDevice(rows);
  int exact = 0, tolerated = 0, bad = 0;
  for (int b = 0; b < B; ++b) {
    const SampleRow& r = rows[b];
    const Reference ref(r);
    if (got[b] == ref.pick(r.topP, r.minP, r.u)) {
      ++exact;
      continue;
    }
    bool ok = false;
    const double d = 1e-6;
    for (float tp : {r.topP * (1 - 1e-6f), r.topP, r.topP * (1 + 1e-6f)})
      for (float mp : {r.minP * (1 - 1e-6f), r.minP, r.minP * (1 + 1e-6f)}) {
        const int lo = ref.pick(tp, mp, r.u - d);
        const int hi = ref.pick(tp, mp, r.u + d);
        if (got[b] >= lo && got[b] <= hi) ok = true;
      }
    if (ok) {
      ++tolerated;
    } else {
      ++bad;
      std::printf("  row %d: V=%d T=%g k=%d topP=%g minP=%g u=%.9f gpu=%d cpu=%d\n", b, V, r.temperature, r.topK,
                  r.topP, r.minP, r.u, got[b], ref.pick(r.topP, r.minP, r.u));
    }
  }
  const bool deterministic = got == again;
  std::printf("random   V=%-7d rows=%-3d exact=%d tolerated=%d mismatched=%d deterministic=%s\n", V, B, exact,
              tolerated, bad, deterministic ? "yes" : "NO");
  tally.record(bad == 0 && deterministic, "random rows");
}

/** Median time of one hsSample call on B rows of V logits. */
void timing(int B, int V, float temperature, int k, float tp, float mp) {
  Rng rng(99);
  std::vector<SampleRow> rows;
  for (int b = 0; b < B; ++b) {
    SampleRow r{std::vector<float>(V), temperature, k, tp, mp, static_cast<float>(rng.uniform())};
    for (auto& x : r.logits) x = static_cast<float>(3.0 * rng.normal());
    rows.push_back(std::move(r));
  }
  float ms = 0;
  runDevice(rows, &ms, 20);
  std::printf("timing   B=%d V=%d T=%g k=%d topP=%g minP=%g: %.1f us per call (median of 20)\n", B, V, temperature, k,
              tp, mp, ms * 1000.f);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = hasFlag(argc, argv, "--quick");
  const bool timed = !quick && !hasFlag(argc, argv, "--no-timing");
  Tally tally;
  craftedCases(tally);
  randomCases(1000, 64, 1, tally);
  if (!quick) {
    randomCases(32000, 48, 2, tally);
    randomCases(128256, 32, 3, tally);
    randomCases(151936, 16, 4, tally);
  }
  if (timed) {
    timing(64, 128256, 0.f, 0, 1.f, 0.f);
    timing(64, 128256, 0.8f, 0, 1.f, 0.f);
    timing(64, 128256, 0.8f, 50, 0.9f, 0.05f);
    timing(1, 128256, 0.8f, 50, 0.9f, 0.05f);
  }
  HS_CHECK(cudaGetLastError());
  return tally.finish("sampling_test");
}
