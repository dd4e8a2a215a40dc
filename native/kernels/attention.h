// Paged attention kernels for the CUDA backend (plain C ABI).
//
// Two launchers over the paged KV cache of one layer:
//  - hsPagedDecodeAttention: one query token per request, split-KV ("flash-decoding") with
//    tensor cores; the launch configuration depends only on static sizes, so it can be captured
//    in a CUDA graph and replayed while seqLens / blockTables change in device memory.
//  - hsPagedPrefillAttention: the general causal case (chunked prefill, mixed with decodes),
//    FlashAttention-2 style tiling with mma.sync m16n8k16 bf16 / fp32 accumulation.
// Semantics follow `Backend.pagedAttention` in src/backends/backend.ts: token j of request r sits
// at absolute position seqLen_r - queryLen_r + j and attends to keys at positions <= its own;
// q head h uses kv head h / (numHeads / numKvHeads) (GQA); scores are scaled by `scale`.
// Design, figures and expectations: native/kernels/ATTENTION.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Arguments of both attention launchers. All pointers are device pointers, 16-byte aligned; all
 * tensors are row-major and contiguous except `qkv` (row stride `qkvRowStride`).
 * T = numTokens, Hq = numHeads, Hkv = numKvHeads, D = headDim.
 */
typedef struct HsPagedAttentionParams {
  /** [T, qkvRowStride] bf16, per row q heads (Hq*D), then k heads, then v heads; only q is read. */
  const __nv_bfloat16* qkv;
  /** Elements between consecutive token rows of `qkv`: a multiple of 8, normally (Hq + 2*Hkv) * D. */
  int qkvRowStride;
  /** [numBlocks, 2, blockSize, Hkv, D] bf16: per block, K then V (DESIGN.md section 3). */
  const __nv_bfloat16* kvCache;
  /** [T, Hq*D] bf16 output; row t is token t of the step. */
  __nv_bfloat16* out;
  /** [numReqs + 1] i32 prefix sums of per-request query lengths (tokens). Unused by decode. */
  const int* queryStartLoc;
  /** [numReqs] i32 context length (tokens, cached + new) per request; 0 marks a padded row. */
  const int* seqLens;
  /** [numReqs, maxBlocksPerReq] i32 device block ids of each request's pages, in order. */
  const int* blockTables;
  /** Row length of `blockTables` (entries). Positions >= maxBlocksPerReq*blockSize are ignored. */
  int maxBlocksPerReq;
  /** Requests as launched (decode: the padded batch size). */
  int numReqs;
  /** Rows of qkv / out (T). Decode requires numTokens >= numReqs (token i = request i). */
  int numTokens;
  /** Query heads Hq (a multiple of numKvHeads). */
  int numHeads;
  /** KV heads Hkv. */
  int numKvHeads;
  /** Head dimension D: 64 or 128. */
  int headDim;
  /** Tokens per KV block: a power of two >= 8 (16, 32, 64 ... ). */
  int blockSize;
  /** Softmax scale applied to q.k (normally 1/sqrt(D)). */
  float scale;
  /** Static bound on seqLens (tokens); sizes the decode split grid, never read per step. */
  int maxModelLen;
  /**
   * Device scratch for decode split partials, 16-byte aligned (see hsPagedAttentionWorkspaceBytes);
   * may be null when 0 bytes are needed. Not read by prefill.
   */
  void* workspace;
  /** Bytes available at `workspace`. */
  size_t workspaceBytes;
  /**
   * Nonzero: `kvCache` holds fp8 e4m3 bytes ([numBlocks, 2, blockSize, Hkv, D] uint8, fp8.cuh),
   * read as bf16(e4m3 * kScale) for K and bf16(e4m3 * vScale) for V; 0: bf16 (scales unused).
   */
  int kvCacheFp8;
  /** Per-tensor K scale of an fp8 cache (vLLM k_scale; 1.0 by default). */
  float kScale;
  /** Per-tensor V scale of an fp8 cache (vLLM v_scale). */
  float vScale;
} HsPagedAttentionParams;

/**
 * Workspace bytes that suffice for every decode launch with numReqs <= maxNumReqs on the current
 * device (prefill needs none). maxNumTokens is accepted for symmetry and does not change the
 * result. The figure depends on the device's SM count (read with cudaDeviceGetAttribute; 256 is
 * assumed if that fails), numHeads, headDim and maxModelLen. blockSize is validated only.
 * Returns 0 for invalid sizes.
 */
size_t hsPagedAttentionWorkspaceBytes(int maxNumReqs, int maxNumTokens, int numHeads, int headDim,
                                      int maxModelLen, int blockSize);

/**
 * Decode attention: request i has exactly one query token, row i of qkv/out, at position
 * seqLens[i] - 1, attending to all seqLens[i] cached tokens. Split-KV over the context; the grid
 * is (numSplits, Hkv * ceil(G/16), numReqs), numSplits depending only on numReqs, numKvHeads,
 * numHeads, maxModelLen and the SM count. Rows with seqLen 0 are written as zeros.
 * Enqueues 1 or 2 kernels on `s`; no allocation, synchronisation or host copy (graph-capturable).
 * The first call per device and head dim also raises the kernel's shared-memory limit
 * (cudaFuncSetAttribute): make one call (a warm-up step) before capturing graphs.
 * Returns cudaErrorInvalidValue for unsupported sizes, misaligned pointers or a too-small
 * workspace, else the launch status (cudaGetLastError after the launches).
 */
cudaError_t hsPagedDecodeAttention(const HsPagedAttentionParams* p, cudaStream_t s);

/**
 * Workspace bytes hsPagedPrefillAttention uses for split-KV on a launch of these sizes (0: that
 * launch does not split). A launch given less than this runs unsplit (correct, slower when few
 * query tokens attend a long context). maxModelLen: the block-table width in tokens, as in
 * HsPagedAttentionParams.
 */
size_t hsPagedPrefillWorkspaceBytes(int numReqs, int numTokens, int numHeads, int numKvHeads, int headDim,
                                    int maxQueryLen, int maxModelLen);

/**
 * General causal paged attention (chunked prefill; any mix of query lengths, decodes included).
 * maxQueryLen: host-known value >= every request's query length (sizes the grid). Output rows
 * of tokens covered by some request are all written (zeros where a row has no keys); rows not
 * covered by queryStartLoc are left untouched. Not for graph capture (grid depends on
 * maxQueryLen). Split-KV when the grid is small and the workspace holds
 * hsPagedPrefillWorkspaceBytes (a second kernel combines the splits); a smaller or null
 * workspace runs one pass. Same error convention as the decode launcher.
 */
cudaError_t hsPagedPrefillAttention(const HsPagedAttentionParams* p, int maxQueryLen, cudaStream_t s);

/**
 * HiSparse decode attention (Backend.sparsePagedAttention): hsPagedDecodeAttention where a row
 * may read its own block table and length per (request, kv head). `base` holds the dense tables
 * (read by rows without the per-head flag), the sizes, the workspace and maxModelLen (which sizes
 * the split grid as for dense decode, so a row whose per-head tables equal its dense ones gives
 * the dense result bit for bit).
 */
typedef struct HsSparseDecodeParams {
  HsPagedAttentionParams base;
  /** [numReqs, Hkv, headTableStride] i32 device blocks of each (request, kv head), in attention order. */
  const int* headBlockTables;
  /** [numReqs, Hkv] i32 tokens each (request, kv head) attends over (clamped to headTableStride * blockSize). */
  const int* headSeqLens;
  /** Row length of headBlockTables (entries). */
  int headTableStride;
  /** [numReqs] i32, nonzero: the request reads the per-head tables; NULL: every request does. */
  const int* rowFlags;
  /** [numReqs] i32 row of the request's query token in qkv and out (< 0: skip); NULL: row = request. */
  const int* tokenRow;
  /** Nonzero: requests without the flag are not written at all (their rows keep what is in `out`). */
  int onlyFlaggedRows;
} HsSparseDecodeParams;

/**
 * Decode attention with HiSparse per-head tables (see HsSparseDecodeParams); same grid, split
 * policy, workspace and error convention as hsPagedDecodeAttention (graph-capturable). With
 * tokenRow set, numTokens only has to cover the rows named there (it is not checked against numReqs).
 */
cudaError_t hsSparseDecodeAttention(const HsSparseDecodeParams* p, cudaStream_t s);

/**
 * Number of KV splits the decode launcher uses for this launch (static sizes only; exposed for
 * tests, benchmarks and workspace accounting). Returns 0 for invalid sizes.
 */
int hsPagedDecodeNumSplits(const HsPagedAttentionParams* p);

/**
 * Benchmark knob: the smallest decode split (tokens, rounded up to whole 64-key tiles, at most
 * 4096) of the decode launches made after the call, in this process (default 256; a captured
 * graph keeps the value of its capture). tokens <= 0 only reads it. Returns the previous value.
 * Smaller splits give more CTAs at batch 1 (more bandwidth in flight, more partials to merge).
 */
int hsSetDecodeMinSplitTokens(int tokens);

#ifdef __cplusplus
}
#endif
