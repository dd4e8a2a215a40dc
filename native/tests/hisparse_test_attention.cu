// HiSparse kernel test, sparse decode attention (part of hisparse_test; see hisparse_test.cu):
// hsSparseDecodeAttention with dense-equal tables (bits equal to hsPagedDecodeAttention), with
// per-head tables (float64 reference), and in a mixed batch (only flagged rows, at tokenRow).
#include "hisparse_test_common.h"

namespace hs_test {
namespace {

// ---- 5. sparse decode attention ---------------------------------------------------------------------

/** float64 attention of one query row over explicit (block, offset) key positions of kv head kvh. */
void refRowAttention(const PagedCase& c, int t, int h, int kvh, const std::vector<std::pair<int, int>>& keys,
                     std::vector<double>& out) {
  const CaseSpec& s = c.spec;
  std::vector<double> q(s.headDim), acc(s.headDim, 0.0), sc(keys.size());
  for (int d = 0; d < s.headDim; ++d) q[d] = bf16ToFloat(c.qkv[static_cast<size_t>(t) * c.stride + h * s.headDim + d]);
  double mx = -1e300;
  for (size_t k = 0; k < keys.size(); ++k) {
    const uint16_t* kp = c.cache.data() + c.cacheIndex(keys[k].first, 0, keys[k].second, kvh);
    double dot = 0;
    for (int d = 0; d < s.headDim; ++d) dot += q[d] * bf16ToFloat(kp[d]);
    sc[k] = dot / std::sqrt(static_cast<double>(s.headDim));
    mx = std::max(mx, sc[k]);
  }
  double sum = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const double pr = std::exp(sc[k] - mx);
    sum += pr;
    const uint16_t* vp = c.cache.data() + c.cacheIndex(keys[k].first, 1, keys[k].second, kvh);
    for (int d = 0; d < s.headDim; ++d) acc[d] += pr * bf16ToFloat(vp[d]);
  }
  out.assign(s.headDim, 0.0);
  if (!keys.empty())
    for (int d = 0; d < s.headDim; ++d) out[d] = acc[d] / sum;
}

}  // namespace

void sparseAttentionCase(Tally& tally, int Hq, int Hkv, int D, int bs, std::vector<int> lens, int maxModelLen) {
  char name[96];
  std::snprintf(name, sizeof name, "sparse attention Hq%d Hkv%d D%d bs%d", Hq, Hkv, D, bs);
  if (!selected(name)) return;
  CaseSpec spec{name, Hq, Hkv, D, bs, std::vector<int>(lens.size(), 1), lens, maxModelLen, 900 + static_cast<uint64_t>(D)};
  spec.poison = false;
  PagedCase c = buildCase(spec);
  const int R = c.numReqs, W = c.maxBlocksPerReq;
  HsPagedAttentionParams base = c.params();
  const size_t outElems = static_cast<size_t>(c.numTokens) * Hq * D;
  // (a) per-head tables equal to the dense rows: the same bits as hsPagedDecodeAttention.
  HS_CHECK(hsPagedDecodeAttention(&base, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto dense = c.dOut.download();
  std::vector<int> headT(static_cast<size_t>(R) * Hkv * W), headSeq(static_cast<size_t>(R) * Hkv);
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < Hkv; ++g) {
      std::copy_n(c.blockTables.begin() + static_cast<size_t>(r) * W, W, headT.begin() + (static_cast<size_t>(r) * Hkv + g) * W);
      headSeq[static_cast<size_t>(r) * Hkv + g] = c.seqLens[r];
    }
  std::vector<int> flags(R);
  for (int r = 0; r < R; ++r) flags[r] = r % 2;
  auto dHeadT = toDevice(headT), dHeadSeq = toDevice(headSeq), dFlags = toDevice(flags);
  HsSparseDecodeParams sp{};
  sp.base = base;
  sp.headBlockTables = dHeadT.ptr;
  sp.headSeqLens = dHeadSeq.ptr;
  sp.headTableStride = W;
  sp.rowFlags = dFlags.ptr;
  c.dOut.poison();
  HS_CHECK(hsSparseDecodeAttention(&sp, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto same = c.dOut.download();
  long diffBits = 0;
  for (size_t i = 0; i < outElems; ++i) diffBits += same[i] != dense[i] ? 1 : 0;
  // (b) per-head subsets of each request's pages (the tail last), every row flagged.
  Rng rng(31 + D);
  std::vector<std::vector<std::vector<std::pair<int, int>>>> keys(R, std::vector<std::vector<std::pair<int, int>>>(Hkv));
  for (int r = 0; r < R; ++r) {
    const int pages = (c.seqLens[r] + bs - 1) / bs;
    for (int g = 0; g < Hkv; ++g) {
      std::vector<int> pick;
      for (int p = 0; p + 1 < pages; ++p)
        if (rng.below(2) == 0) pick.push_back(p);
      if (pages > 0) pick.push_back(pages - 1);
      const size_t item = static_cast<size_t>(r) * Hkv + g;
      std::fill_n(headT.begin() + item * W, W, 0);
      for (size_t j = 0; j < pick.size(); ++j) {
        const int b = c.blockTables[static_cast<size_t>(r) * W + pick[j]];
        headT[item * W + j] = b;
        const int n = pick[j] == pages - 1 ? c.seqLens[r] - (pages - 1) * bs : bs;
        for (int o = 0; o < n; ++o) keys[r][g].emplace_back(b, o);
      }
      headSeq[item] = static_cast<int>(keys[r][g].size());
    }
  }
  dHeadT.upload(headT);
  dHeadSeq.upload(headSeq);
  sp.rowFlags = nullptr;
  c.dOut.poison();
  HS_CHECK(hsSparseDecodeAttention(&sp, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto got = c.dOut.download();
  std::vector<double> ref(outElems, 0.0), row;
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < Hq; ++h) {
      refRowAttention(c, r, h, h / (Hq / Hkv), keys[r][h / (Hq / Hkv)], row);
      std::copy(row.begin(), row.end(), ref.begin() + (static_cast<size_t>(r) * Hq + h) * D);
    }
  double num = 0, den = 0;
  long nonFinite = 0;
  for (size_t i = 0; i < outElems; ++i) {
    const double g = bf16ToFloat(got[i]);
    if (!std::isfinite(g)) {
      ++nonFinite;
      continue;
    }
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  // (c) a mixed batch: only flagged rows written, at the rows tokenRow names (reversed order).
  std::vector<int> tokenRow(R);
  for (int r = 0; r < R; ++r) tokenRow[r] = R - 1 - r;
  auto dTok = toDevice(tokenRow);
  dFlags.upload(flags);
  sp.rowFlags = dFlags.ptr;
  sp.tokenRow = dTok.ptr;
  sp.onlyFlaggedRows = 1;
  // q rows must follow the rows: permute qkv accordingly.
  std::vector<uint16_t> qkvPerm(c.qkv.size());
  for (int r = 0; r < R; ++r)
    std::copy_n(c.qkv.begin() + static_cast<size_t>(r) * c.stride, c.stride,
                qkvPerm.begin() + static_cast<size_t>(tokenRow[r]) * c.stride);
  c.dQkv.upload(qkvPerm);
  c.dOut.poison(0x3c);
  HS_CHECK(hsSparseDecodeAttention(&sp, 0));
  HS_CHECK(cudaDeviceSynchronize());
  const auto mixed = c.dOut.download();
  long badMixed = 0;
  const size_t rowElems = static_cast<size_t>(Hq) * D;
  for (int r = 0; r < R; ++r)
    for (size_t e = 0; e < rowElems; ++e) {
      const uint16_t v = mixed[static_cast<size_t>(tokenRow[r]) * rowElems + e];
      const uint16_t want = flags[r] ? got[static_cast<size_t>(r) * rowElems + e] : 0x3c3c;
      badMixed += v != want ? 1 : 0;
    }
  c.dQkv.upload(c.qkv);
  const bool ok = diffBits == 0 && nonFinite == 0 && rel < 1e-2 && badMixed == 0;
  std::printf("%-52s dense-equal bit diffs=%ld per-head relErr=%.2e nonFinite=%ld mixed diffs=%ld %s\n", name,
              diffBits, rel, nonFinite, badMixed, ok ? "ok" : "FAIL");
  tally.record(ok, name);
}

}  // namespace hs_test
