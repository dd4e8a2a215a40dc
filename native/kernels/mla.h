// Launchers of the multi-head latent attention (MLA) and DSA lightning-indexer kernels
// (Backend.mla, src/backends/backend.ts; CPU oracle src/backends/cpu/kernels/{mla,dsa}.ts).
// Conventions of kernels.h: device pointers, row-major shapes, asynchronous on `stream`,
// cudaErrorInvalidValue without a launch for unsupported sizes or dtypes, fp32 accumulation.
// Every grid depends only on the sizes passed in (padded token count, model dims, static bounds:
// maxContext, width, k), never on device data; request lengths, block tables and selections are
// read from device memory, so a whole MLA layer replays inside the decode CUDA graph.
//
// Data flow of one MLA layer on CUDA (q after RoPE [T, Hq * (N + R)], kvBProj [Hq * (N + Vd), C]):
//   hsMlaWriteRows (kvc at column 0, kpe at C) -> latent cache [numBlocks, bs, C + R]
//   hsMlaAbsorbQuery: qAbs f32 [T, Hq, C + R] = [W_UK[h]^T q_nope[t, h] | q_pe[t, h]]
//   hsMlaAttention:   oLat f32 [T, Hq, C] = softmax(scale * qAbs . row_i) . c_i over the causal
//                     rows (or the DSA top-k rows), split-KV with a merge for short batches
//   hsMlaOutProject:  out [T, Hq * Vd] = W_UV[h] oLat[t, h]
// This is the absorbed form (DeepSeek-V3 paper §2.1.2, FlashMLA's decode form): MQA over one
// shared C + R wide "KV head", for decode and short query runs. Long prefill chunks take the
// expanded form instead (src/backends/cuda/mla_prefill.ts): hsMlaGatherLatent (a request's rows
// into a contiguous bf16 buffer, k_pe into each head's key), kv_b_proj by cuBLAS to k_nope / v per
// head, S = scale Q K^T by strided-batched cuBLAS GEMMs, hsMlaPrefillSoftmax (causal / top-k
// mask, P in bf16), O = P V by cuBLAS.
// DSA: hsMlaIndexerLogits (f32 [T, width]) then hsMlaTopk (i32 [T, k], the CPU oracle's order).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest C + R (latent row) the attention kernel handles: DeepSeek-V3 / GLM-5's 512 + 64. */
#define HS_MLA_MAX_ROW 576
/** Largest C (kv_lora_rank) the attention, absorb and output kernels handle. */
#define HS_MLA_MAX_RANK 512
/** Largest indexer head count (index_n_heads) of hsMlaIndexerLogits. */
#define HS_MLA_MAX_INDEX_HEADS 64
/** Largest indexer head dim (index_head_dim). */
#define HS_MLA_MAX_INDEX_DIM 256

/** out[t, :] = x[t, start : start + width]; elemBytes per element. x: [T, rowWidth]. */
cudaError_t hsMlaSliceColumns(const void* x, void* out, int numTokens, int rowWidth, int start, int width,
                              int elemBytes, cudaStream_t stream);

/**
 * cache[slot, dstColumn + e] = src[t, e] for e < width, slot = slotMapping[t] (skipped when < 0,
 * PAD_SLOT_ID, or >= numSlots). src: [T, width] of srcDtype; cache: [numSlots, rowWidth] of
 * cacheDtype (f32 | bf16; bf16 rounds to nearest even).
 */
cudaError_t hsMlaWriteRows(const void* src, int srcDtype, void* cache, int cacheDtype, const int32_t* slotMapping,
                           int numTokens, int width, int rowWidth, int dstColumn, int numSlots, cudaStream_t stream);

/**
 * In place RoPE of `count` heads of rotDim columns at offset + h * stride of every row
 * (Backend.mla.rotaryStrided): pairs (2i, 2i+1) when interleaved, else (i, i + rotDim/2);
 * (a, b) -> (a cos - b sin, b cos + a sin), fp32, one rounding to the row's dtype. A position
 * outside [0, maxPositions) leaves its row unchanged (the CPU backend throws).
 * x: [T, rowWidth] of dtype (f32 | bf16); positions: i32 [T]; cosSin: f32 [maxPositions, rotDim].
 */
cudaError_t hsMlaRotaryStrided(void* x, int dtype, const int32_t* positions, const float* cosSin, int numTokens,
                               int rowWidth, int offset, int stride, int count, int rotDim, int maxPositions,
                               int interleaved, cudaStream_t stream);

/**
 * torch.nn.LayerNorm per row (biased variance, fp32 two-pass): out = T((x - mean) * rstd * w + b).
 * x, out: [T, n] of xDtype; weight, bias: [n] of wDtype (f32 | bf16).
 */
cudaError_t hsMlaLayerNorm(const void* x, const void* weight, const void* bias, void* out, int numTokens, int n,
                           float eps, int xDtype, int wDtype, cudaStream_t stream);

/**
 * qAbs[t, h] = [W_UK[h]^T q_nope[t, h] (C, fp32) | q_pe[t, h] (R)], W_UK[h] = kvBProj rows
 * [h (N + Vd), h (N + Vd) + N). q: [T, Hq * (N + R)] of qDtype (f32 | bf16); kvBProj: bf16
 * [Hq * (N + Vd), C]; qAbs: f32 [T, Hq, C + R]. Requires C <= HS_MLA_MAX_RANK.
 */
cudaError_t hsMlaAbsorbQuery(const void* q, int qDtype, const void* kvBProj, float* qAbs, int numTokens,
                             int numHeads, int nopeDim, int ropeDim, int vDim, int rank, cudaStream_t stream);

/**
 * out[t, h * Vd + v] = sum_c W_UV[h][v, c] oLat[t, h, c] (fp32, one rounding), W_UV[h] =
 * kvBProj rows [h (N + Vd) + N, (h + 1)(N + Vd)). oLat: f32 [T, Hq, C]; out: [T, Hq * Vd] of
 * outDtype (f32 | bf16).
 */
cudaError_t hsMlaOutProject(const float* oLat, const void* kvBProj, void* out, int outDtype, int numTokens,
                            int numHeads, int nopeDim, int vDim, int rank, cudaStream_t stream);

/** Arguments of hsMlaAttention (device pointers; T = numTokens, Hq = numHeads). */
typedef struct HsMlaAttentionParams {
  /** f32 [T, Hq, C + R] absorbed queries (hsMlaAbsorbQuery). */
  const float* qAbs;
  /** [numBlocks, blockSize, C + R] latent rows of cacheDtype (f32 | bf16). */
  const void* latentCache;
  int cacheDtype;
  /** f32 [T, Hq, C] attention output in latent space (sum_i p_i c_i). */
  float* oLat;
  /**
   * i32 [numReqs + 1] query start of each request; token t of the launch is token t +
   * queryStartLoc[0] of that numbering (0 for a whole step; a run of requests r0.. passes the
   * step's arrays offset by r0, and qAbs / oLat / topkIndices offset by its first token).
   */
  const int32_t* queryStartLoc;
  /** i32 [numReqs] context length after this step; query token j of request r sits at seqLen - qLen + j. */
  const int32_t* seqLens;
  /** i32 [numReqs, maxBlocksPerReq] block ids. */
  const int32_t* blockTables;
  int maxBlocksPerReq;
  int numReqs;
  int numTokens;
  int numHeads;
  /** C (kv_lora_rank) and R (qk_rope_head_dim): a latent row is C + R wide. */
  int rank;
  int ropeDim;
  int blockSize;
  float scale;
  /** i32 [T, topkStride] attended positions (-1 = none) or NULL: every causal position. */
  const int32_t* topkIndices;
  int topkStride;
  /** Static bound on the entries a token reads (dense: the block-table width in tokens; DSA: topkStride). */
  int maxContext;
  /** f32 split partials (hsMlaAttentionWorkspaceBytes) or NULL when 0 bytes are needed. */
  void* workspace;
  size_t workspaceBytes;
} HsMlaAttentionParams;

/**
 * Workspace bytes of hsMlaAttention (0 when it runs without splits), enough for either kernel
 * (hsMlaAttentionSimt, hsMlaAttentionTc); maxEntries: topkStride with DSA indices, else maxContext.
 */
size_t hsMlaAttentionWorkspaceBytes(int numTokens, int numHeads, int rank, int maxEntries);

/**
 * Absorbed MLA attention (see the file comment): per token t (request r found by a binary search
 * of queryStartLoc, position p) and head h, s_i = scale * (qAbs[t, h] . row_i) over the attended
 * positions i (dense: [0, p]; DSA: the entries of topkIndices[t] in [0, p]), oLat[t, h] =
 * sum_i softmax(s)_i c_i (c_i = the first C of row_i); no attended position gives zeros.
 * Runs hsMlaAttentionTc when it takes the sizes (bf16 rows, C = 512, R = 64: DeepSeek-V3 /
 * GLM-5; qAbs and latentCache 16-byte aligned), else hsMlaAttentionSimt;
 * HISPARSE_MLA_ATTENTION=simt in the environment (read once) forces the SIMT kernel. Split counts come from (T, Hq, maxContext or topkStride, SM count)
 * only; with more than one split a second kernel merges the partials. The first call raises the
 * kernels' shared-memory limits (make it before capturing a graph).
 */
cudaError_t hsMlaAttention(const HsMlaAttentionParams* p, cudaStream_t stream);

/**
 * The SIMT fp32 kernel of hsMlaAttention (any C <= 512, C + R <= 576, f32 or bf16 rows): grid
 * (T, ceil(Hq / 16), numSplits). The oracle of hsMlaAttentionTc in native/tests/mla_test.cu.
 */
cudaError_t hsMlaAttentionSimt(const HsMlaAttentionParams* p, cudaStream_t stream);

/**
 * The tensor-core kernel of hsMlaAttention (mla_attention_tc.cu): bf16 mma.sync m16n8k16 with
 * fp32 accumulation, 64 heads of one token in the MMA's M dimension, chunks of 32 latent rows in
 * N; the query is rounded to bf16 and the probabilities to bf16 before P . rows, the softmax
 * is fp32. Grid (T, ceil(Hq / 64), numSplits). cudaErrorInvalidValue unless cacheDtype is bf16,
 * C = 512, R = 64 and qAbs and latentCache are 16-byte aligned.
 */
cudaError_t hsMlaAttentionTc(const HsMlaAttentionParams* p, cudaStream_t stream);

/** Arguments of hsMlaIndexerLogits (device pointers; Hi heads of Di). */
typedef struct HsMlaIndexerParams {
  /** [T, Hi * Di] indexer queries after RoPE, of qDtype (f32 | bf16; headWeights the same). */
  const void* q;
  /** [T, Hi] weights_proj output. */
  const void* headWeights;
  int qDtype;
  /** [numBlocks, blockSize, Di] index keys of keyDtype (f32 | bf16). */
  const void* indexKeys;
  int keyDtype;
  /** f32 [T, width] logits. */
  float* logits;
  const int32_t* queryStartLoc;
  const int32_t* seqLens;
  const int32_t* blockTables;
  int maxBlocksPerReq;
  int numReqs;
  int numTokens;
  int numHeads;
  int headDim;
  int blockSize;
  float softmaxScale;
  float headWeightScale;
  int width;
} HsMlaIndexerParams;

/**
 * DSA indexer logits (Backend.mla.indexerLogits): logits[t, i] = sum_h (w[t, h] * headWeightScale)
 * * relu(softmaxScale * (q[t, h] . k_i)) for i <= p (fp32), -inf for i > p. Requires
 * Hi <= HS_MLA_MAX_INDEX_HEADS, Di <= HS_MLA_MAX_INDEX_DIM, Di % 32 == 0, keyDtype == qDtype and
 * 16-byte aligned key rows (and, for the tensor-core kernel, 16-byte aligned query rows, which
 * Di % 32 == 0 gives for a 16-byte aligned q). bf16 with Hi <= 64 and Di in {32, 64, 128}: the tensor-core kernel
 * (mma.sync m16n8k16, fp32 accumulation, heads summed by shuffles; grid (ceil(width / 256), T));
 * otherwise, or with $HISPARSE_MLA_INDEXER=simt, hsMlaIndexerLogitsSimt.
 */
cudaError_t hsMlaIndexerLogits(const HsMlaIndexerParams* p, cudaStream_t stream);

/** The SIMT logits kernel (fp32 FMAs, heads summed in order; grid (ceil(width / 128), T)): the A/B reference. */
cudaError_t hsMlaIndexerLogitsSimt(const HsMlaIndexerParams* p, cudaStream_t stream);

/**
 * Causal top-k per row (Backend.mla.topkIndices): among positions [0, positions[t]] (clamped to
 * width - 1), the min(k, p + 1) largest logits in ascending position order, -1 after them. Order:
 * larger first, NaN as -inf, -0 as +0, ties to the lower position (the CPU oracle's rule). One CTA
 * of 1024 threads per row (mla_topk.cu): value bins over the row's finite range, the threshold
 * bin's order-preserving keys in shared memory for the radix select of radix_select.cuh (the row
 * itself when that bin holds more than 8192 keys), then an ordered output over per-warp runs.
 * logits: f32 [T, width]; positions: i32 [T]; out: i32 [T, k].
 */
cudaError_t hsMlaTopk(const float* logits, const int32_t* positions, int32_t* out, int numTokens, int width, int k,
                      cudaStream_t stream);

/**
 * out[i, :] = bf16(cache[slot(req, i), :]) for i < numRows (the request's first numRows
 * positions, slot through blockTables row req), and when kv is not NULL the row's k_pe (its last
 * rowWidth - rank columns, R) into every head's key: kv[i * kvLd + kvOffset + h * kvStride + c] =
 * out[i, rank + c] for h < kvCount, c < R (other kv columns untouched). A position with
 * i / blockSize >= maxBlocksPerReq gives zeros. cache: [numSlots, rowWidth] of cacheDtype
 * (f32 | bf16); out: bf16 [numRows, rowWidth]; kv: bf16 rows of kvLd.
 * Host source (hostCache not NULL; Hybrid HiSparse for DSA, a prefill beside its own spilled
 * pages): a position whose device block blockTables[req, b] (b = i / blockSize) is negative reads
 * row hostBlockTables[req * hostMaxBlocksPerReq + b] * blockSize + i % blockSize of hostCache
 * instead (mapped pinned host memory, [numHostBlocks, blockSize, rowWidth] of cacheDtype, read
 * over the bus; 16-byte loads when hostCache and rowWidth bytes are 16-byte multiples); a negative
 * host block or b >= hostMaxBlocksPerReq gives zeros, as does a negative device block without a
 * host source. cudaErrorInvalidValue when hostCache is given without hostBlockTables or with
 * hostMaxBlocksPerReq <= 0.
 */
cudaError_t hsMlaGatherLatent(const void* cache, int cacheDtype, const int32_t* blockTables, int maxBlocksPerReq,
                              const void* hostCache, const int32_t* hostBlockTables, int hostMaxBlocksPerReq,
                              int req, int blockSize, int rowWidth, int rank, int numRows, void* out, void* kv,
                              int kvLd, int kvOffset, int kvStride, int kvCount, cudaStream_t stream);

/**
 * Masked softmax of the expanded prefill (one request's tile of numQueries consecutive queries,
 * query i at position firstPos + i): per head h and query i, over keys j of the row
 * scores[h, i, 0:numKeys] (already scaled; rows rowStride >= numKeys apart), attended j: dense (topk == NULL) j <= firstPos + i; DSA the
 * entries topk[i * topkStride + e] with 0 <= j <= firstPos + i (the hsMlaAttention rule; entries
 * must be distinct, as hsMlaTopk's are); both also j < min(keyLimit, numKeys).
 * probs[h, i, j] = bf16(exp(s_j - max) / sum) for attended j, 0 elsewhere (a row with none: all 0).
 * fp32 throughout, fixed reduction order (deterministic). scores: f32 [numHeads, numQueries,
 * rowStride]; probs: bf16, same shape (may not alias scores; columns >= numKeys untouched);
 * topk: i32 [numQueries, topkStride].
 * Grid (numQueries, numHeads), 256 threads.
 */
cudaError_t hsMlaPrefillSoftmax(const float* scores, void* probs, int numHeads, int numQueries, int numKeys,
                                int rowStride, int firstPos, int keyLimit, const int32_t* topk, int topkStride,
                                cudaStream_t stream);

#ifdef __cplusplus
}
#endif
