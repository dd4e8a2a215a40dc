// A paged-attention problem for the tests and the benchmark: random bf16 q and KV scattered over
// random non-contiguous blocks, host copies, device buffers, the launch parameters, and a CPU
// reference in double precision.
#pragma once

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "../kernels/attention.h"
#include "test_common.h"

namespace hs_test {

/** Shape and contents of one problem. qLens[r] == 1 for every r makes a decode batch. */
struct CaseSpec {
  std::string name;
  int numHeads;
  int numKvHeads;
  int headDim;
  int blockSize;
  std::vector<int> qLens;    // [numReqs] query tokens per request
  std::vector<int> seqLens;  // [numReqs] context length after the step (>= qLens[r], or 0 with qLen 0/1)
  int maxModelLen;
  uint64_t seed;
  /** NaN in every cache slot no request owns (tails of last pages, free blocks) and in qkv's k/v. */
  bool poison = true;
  /** Extra free blocks (fraction of the used ones) mixed into the pool. */
  double spareBlocks = 0.25;
};

/** Built problem: host data, device copies, and the attention parameters. */
struct PagedCase {
  CaseSpec spec;
  int numReqs = 0;
  int numTokens = 0;
  int stride = 0;  // qkv row stride (elements)
  int maxBlocksPerReq = 0;
  int numBlocks = 0;
  std::vector<uint16_t> qkv;    // [T, stride] bf16 bits
  std::vector<uint16_t> cache;  // [numBlocks, 2, blockSize, Hkv, D] bf16 bits
  std::vector<int> queryStartLoc, seqLens, blockTables;
  DeviceBuffer<uint16_t> dQkv, dCache, dOut;
  DeviceBuffer<int> dQsl, dSeqLens, dBlockTables;
  DeviceBuffer<unsigned char> dWorkspace;

  /** Element offset of (block, kv=0|1, slot, kv head, 0) in the cache. */
  size_t cacheIndex(int block, int kv, int slot, int head) const {
    return (((static_cast<size_t>(block) * 2 + kv) * spec.blockSize + slot) * spec.numKvHeads + head) *
           spec.headDim;
  }

  /** Launch parameters over the device buffers. */
  HsPagedAttentionParams params() const {
    HsPagedAttentionParams p{};
    p.qkv = reinterpret_cast<const __nv_bfloat16*>(dQkv.ptr);
    p.qkvRowStride = stride;
    p.kvCache = reinterpret_cast<const __nv_bfloat16*>(dCache.ptr);
    p.out = reinterpret_cast<__nv_bfloat16*>(dOut.ptr);
    p.queryStartLoc = dQsl.ptr;
    p.seqLens = dSeqLens.ptr;
    p.blockTables = dBlockTables.ptr;
    p.maxBlocksPerReq = maxBlocksPerReq;
    p.numReqs = numReqs;
    p.numTokens = numTokens;
    p.numHeads = spec.numHeads;
    p.numKvHeads = spec.numKvHeads;
    p.headDim = spec.headDim;
    p.blockSize = spec.blockSize;
    p.scale = 1.0f / std::sqrt(static_cast<float>(spec.headDim));
    p.maxModelLen = spec.maxModelLen;
    p.workspace = dWorkspace.ptr;
    p.workspaceBytes = dWorkspace.bytes();
    return p;
  }

  /** Assigns random distinct blocks to the requests and refreshes the host block tables. */
  void assignBlocks(Rng& rng) {
    std::vector<int> perm(numBlocks);
    for (int i = 0; i < numBlocks; ++i) perm[i] = i;
    for (int i = numBlocks - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
    blockTables.assign(static_cast<size_t>(numReqs) * maxBlocksPerReq, 0x3fffffff);  // never read
    int next = 0;
    for (int r = 0; r < numReqs; ++r) {
      const int pages = (seqLens[r] + spec.blockSize - 1) / spec.blockSize;
      for (int i = 0; i < pages; ++i) blockTables[static_cast<size_t>(r) * maxBlocksPerReq + i] = perm[next++];
    }
  }

  /** Fills the owned cache slots with random bf16 (and the rest with NaN or random data). */
  void fillCache(Rng& rng) {
    const size_t tokenElems = static_cast<size_t>(spec.numKvHeads) * spec.headDim;
    if (spec.poison) {
      std::fill(cache.begin(), cache.end(), kBf16NaN);
    } else {
      for (auto& v : cache) v = randomBf16(rng, 0.05, 1.0);
    }
    for (int r = 0; r < numReqs; ++r)
      for (int pos = 0; pos < seqLens[r]; ++pos) {
        const int block = blockTables[static_cast<size_t>(r) * maxBlocksPerReq + pos / spec.blockSize];
        for (int kv = 0; kv < 2; ++kv) {
          uint16_t* dst = cache.data() + cacheIndex(block, kv, pos % spec.blockSize, 0);
          for (size_t e = 0; e < tokenElems; ++e) dst[e] = randomBf16(rng, 0.05, 1.0);
        }
      }
  }

  /** Copies the host tables (seqLens, block tables, query starts) to the device. */
  void uploadTables() {
    dQsl.upload(queryStartLoc);
    dSeqLens.upload(seqLens);
    dBlockTables.upload(blockTables);
  }
};

/** Builds a problem: blocks, data, device buffers (output poisoned with NaN), workspace. */
inline PagedCase buildCase(const CaseSpec& spec) {
  PagedCase c;
  c.spec = spec;
  c.numReqs = static_cast<int>(spec.qLens.size());
  c.stride = (spec.numHeads + 2 * spec.numKvHeads) * spec.headDim;
  c.queryStartLoc.assign(c.numReqs + 1, 0);
  for (int r = 0; r < c.numReqs; ++r) c.queryStartLoc[r + 1] = c.queryStartLoc[r] + spec.qLens[r];
  c.numTokens = c.queryStartLoc[c.numReqs];
  c.seqLens = spec.seqLens;
  c.maxBlocksPerReq = std::max(1, (spec.maxModelLen + spec.blockSize - 1) / spec.blockSize);
  int used = 0;
  for (int r = 0; r < c.numReqs; ++r) used += (c.seqLens[r] + spec.blockSize - 1) / spec.blockSize;
  c.numBlocks = used + static_cast<int>(used * spec.spareBlocks) + 2;
  Rng rng(spec.seed);
  c.assignBlocks(rng);
  c.cache.resize(static_cast<size_t>(c.numBlocks) * 2 * spec.blockSize * spec.numKvHeads * spec.headDim);
  c.fillCache(rng);
  c.qkv.resize(static_cast<size_t>(std::max(c.numTokens, 1)) * c.stride);
  const int qElems = spec.numHeads * spec.headDim;
  for (int t = 0; t < c.numTokens; ++t)
    for (int e = 0; e < c.stride; ++e)
      c.qkv[static_cast<size_t>(t) * c.stride + e] =
          e < qElems ? randomBf16(rng, 0.05, 2.0) : (spec.poison ? kBf16NaN : randomBf16(rng, 0.05, 1.0));
  c.dQkv = DeviceBuffer<uint16_t>(c.qkv.size());
  c.dQkv.upload(c.qkv);
  c.dCache = DeviceBuffer<uint16_t>(c.cache.size());
  c.dCache.upload(c.cache);
  c.dOut = DeviceBuffer<uint16_t>(static_cast<size_t>(std::max(c.numTokens, 1)) * qElems);
  c.dOut.poison();
  c.dQsl = DeviceBuffer<int>(c.queryStartLoc.size());
  c.dSeqLens = DeviceBuffer<int>(c.seqLens.size());
  c.dBlockTables = DeviceBuffer<int>(c.blockTables.size());
  c.uploadTables();
  int maxQ = 1;
  for (int q : spec.qLens) maxQ = std::max(maxQ, q);
  const size_t ws = std::max(hsPagedAttentionWorkspaceBytes(std::max(c.numReqs, 1), c.numTokens, spec.numHeads,
                                                            spec.headDim, spec.maxModelLen, spec.blockSize),
                             hsPagedPrefillWorkspaceBytes(c.numReqs, c.numTokens, spec.numHeads, spec.numKvHeads,
                                                          spec.headDim, maxQ, c.maxBlocksPerReq * spec.blockSize));
  c.dWorkspace = DeviceBuffer<unsigned char>(ws);
  c.dWorkspace.poison();
  return c;
}

/**
 * CPU reference in double: out[t, h*D + d] for every token of every request (zeros for rows
 * without keys), following Backend.pagedAttention. Threads over tokens.
 */
inline std::vector<double> referenceAttention(const PagedCase& c) {
  const CaseSpec& s = c.spec;
  const int G = s.numHeads / s.numKvHeads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.headDim));
  std::vector<double> out(static_cast<size_t>(c.numTokens) * s.numHeads * s.headDim, 0.0);
  std::vector<std::pair<int, int>> work;  // (request, j)
  for (int r = 0; r < c.numReqs; ++r)
    for (int j = 0; j < s.qLens[r]; ++j) work.emplace_back(r, j);
  auto run = [&](size_t begin, size_t step) {
    std::vector<double> scores, q(s.headDim), acc(s.headDim);
    for (size_t w = begin; w < work.size(); w += step) {
      const int r = work[w].first;
      const int j = work[w].second;
      const int t = c.queryStartLoc[r] + j;
      const int qpos = c.seqLens[r] - s.qLens[r] + j;
      const int nKeys = std::min(qpos + 1, c.seqLens[r]);
      if (nKeys <= 0) continue;
      scores.resize(nKeys);
      for (int h = 0; h < s.numHeads; ++h) {
        const int kvh = h / G;
        for (int d = 0; d < s.headDim; ++d)
          q[d] = bf16ToFloat(c.qkv[static_cast<size_t>(t) * c.stride + h * s.headDim + d]);
        double mx = -1e300;
        for (int k = 0; k < nKeys; ++k) {
          const int block = c.blockTables[static_cast<size_t>(r) * c.maxBlocksPerReq + k / s.blockSize];
          const uint16_t* kp = c.cache.data() + c.cacheIndex(block, 0, k % s.blockSize, kvh);
          double dot = 0;
          for (int d = 0; d < s.headDim; ++d) dot += q[d] * bf16ToFloat(kp[d]);
          scores[k] = dot * scale;
          mx = std::max(mx, scores[k]);
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int k = 0; k < nKeys; ++k) {
          const double p = std::exp(scores[k] - mx);
          sum += p;
          const int block = c.blockTables[static_cast<size_t>(r) * c.maxBlocksPerReq + k / s.blockSize];
          const uint16_t* vp = c.cache.data() + c.cacheIndex(block, 1, k % s.blockSize, kvh);
          for (int d = 0; d < s.headDim; ++d) acc[d] += p * bf16ToFloat(vp[d]);
        }
        double* o = out.data() + (static_cast<size_t>(t) * s.numHeads + h) * s.headDim;
        for (int d = 0; d < s.headDim; ++d) o[d] = acc[d] / sum;
      }
    }
  };
  const unsigned n = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < n; ++i) threads.emplace_back(run, i, n);
  for (auto& th : threads) th.join();
  return out;
}

/** Comparison of a device output with the reference over the tokens covered by requests. */
struct Comparison {
  double relErr = 0;     // ||gpu - ref||_2 / ||ref||_2 over all covered rows
  double worstRow = 0;   // max over (token, head) rows of the same ratio (short rows dominate relErr)
  double maxAbs = 0;     // max |gpu - ref|
  long nonFinite = 0;    // unwritten (NaN) or non-finite elements
  long zeroRowErr = 0;   // elements of rows without keys that are not exactly 0
  /** Passes with relErr < tol and every row's own ratio < 2 * tol. */
  bool ok(double tol) const { return nonFinite == 0 && zeroRowErr == 0 && relErr < tol && worstRow < 2 * tol; }
};

/** Compares dOut (downloaded) with `ref`. */
inline Comparison compareOutput(const PagedCase& c, const std::vector<double>& ref) {
  const std::vector<uint16_t> got = c.dOut.download();
  const int rowElems = c.spec.numHeads * c.spec.headDim;
  Comparison cmp;
  double num = 0, den = 0;
  for (int r = 0; r < c.numReqs; ++r)
    for (int j = 0; j < c.spec.qLens[r]; ++j) {
      const int t = c.queryStartLoc[r] + j;
      const bool noKeys = std::min(c.seqLens[r] - c.spec.qLens[r] + j + 1, c.seqLens[r]) <= 0;
      double rowNum = 0, rowDen = 0;
      for (int e = 0; e < rowElems; ++e) {
        const size_t i = static_cast<size_t>(t) * rowElems + e;
        const double g = bf16ToFloat(got[i]);
        if (!std::isfinite(g)) {
          ++cmp.nonFinite;
          continue;
        }
        if (noKeys && g != 0.0) ++cmp.zeroRowErr;
        const double d = g - ref[i];
        rowNum += d * d;
        rowDen += ref[i] * ref[i];
        cmp.maxAbs = std::max(cmp.maxAbs, std::fabs(d));
        if ((e + 1) % c.spec.headDim == 0) {  // end of one head's row
          num += rowNum;
          den += rowDen;
          if (rowDen > 0) cmp.worstRow = std::max(cmp.worstRow, std::sqrt(rowNum / rowDen));
          rowNum = rowDen = 0;
        }
      }
    }
  cmp.relErr = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return cmp;
}

}  // namespace hs_test
