// Launchers of the HiSparse kernels (plain C ABI, conventions of kernels.h): the Quest digest
// update fused with reshape_and_cache, Quest page selection, the hot-buffer resolver (with the
// swap-in of misses from mapped pinned host memory), the eager mirror of filled pages to the host
// tier, and the generic swap-in gather. DESIGN.md §4 states the algorithm; the CPU oracles are
// src/attention/sparse/quest.ts (QuestSelector) and hot_buffer.ts (LruHotBufferResolver): the
// kernels reproduce their results exactly (same pages, same LRU victims, same digests).
//
// Layouts (bf16 unless named otherwise; Hkv kv heads, D head dim, bs block size):
//   KV cache of a layer      [numBlocks, 2, bs, Hkv, D]            (DESIGN.md §3)
//   digests of a sparse layer [numHostBlocks, S, 2, Hkv, D]: min then max of the keys of each
//   of the page's S = blockSize / digestTokens sub-pages (S = 1: the page's); bf16, or e4m3
//   codes rounded outward (HS_DIGEST_FP8: min toward -inf, max toward +inf)
//   host tier of a layer     [numHostBlocks, Hkv, 2, bs, D]: head-major, so the K and V of one
//                            (page, kv head) are one contiguous 2*bs*D slice (one UVA read burst)
//   per-request tables       [numSlots, tableStride] i32, row = the request's slot (reqSlot[r])
//
// Every grid depends only on the sizes passed in (padded batch, model dims, static bounds); the
// live counts (seqLens, selection sizes, misses) are read from device memory, so every launch can
// be captured in a CUDA graph. Rows whose flag is 0 (or whose slot is -1) are skipped.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Swap-in of KV pages from the host tier: for i < count, copies `bytesPerCopy` bytes from
 * `src + srcOffsets[i]` to `dst + dstOffsets[i]`. `src` is pinned host memory mapped into the
 * device address space (cudaHostAlloc(..., cudaHostAllocMapped); with UVA the host pointer itself
 * works), so the GPU reads it directly over the host link with 16-byte loads: no CPU work and no
 * per-page cudaMemcpyAsync (DESIGN.md §4 step 3; SGLang HiSparse's swap-in kernel).
 * The grid is sized by `maxCopies` (static, graph-capturable); the live count is read from
 * `count` on the device when non-null (the resolver writes it), else it is maxCopies.
 * Requirements: bytesPerCopy a multiple of 16; every offset and both bases 16-byte aligned.
 * dst: device memory; srcOffsets, dstOffsets: int64 [maxCopies] in device memory.
 */
cudaError_t hsSwapInPages(void* dst, const void* src, const int64_t* srcOffsets, const int64_t* dstOffsets,
                          const int32_t* count, int maxCopies, size_t bytesPerCopy, cudaStream_t stream);

/** Digest element types (hsReshapeAndCacheDigest, HsQuestSelectParams.digestDtype): kernels.h HsDtype codes. */
#define HS_DIGEST_BF16 1 /* HS_DTYPE_BF16: the keys' exact min / max */
#define HS_DIGEST_FP8 4  /* HS_DTYPE_FP8: e4m3 codes (scale 1), min rounded down, max rounded up */

/**
 * vLLM reshape_and_cache fused with the Quest digest update (bf16 keys). For each token t:
 * - K and V of qkv row t go to kvCache at slotMapping[t] (skipped when < 0 or out of range), as
 *   hsReshapeAndCache does;
 * - its key (all kv heads) is folded into digest hostSlotMapping[t] / digestTokens (host block
 *   * S + sub-page, S = bs / digestTokens): offset 0 of the sub-page starts the digest over
 *   (min = max = key: the host block may be reused), a later offset updates min / max
 *   element-wise with `v < min` / `v > max` (the CPU oracle's comparisons, so even signed zeros
 *   match). Tokens of one sub-page in one step (a prefill) are folded in token order by the CTA
 *   of the run's first token, so no two CTAs touch one digest.
 *   Skipped when hostSlotMapping[t] < 0 or out of range.
 * bf16 digests are exact here: the keys are bf16, and min / max of bf16 values are bf16 values.
 * fp8 digests (digestDtype HS_DIGEST_FP8) hold e4m3 codes: the stored codes are converted to
 * float, the keys folded in as above, and the result written with the min rounded down and the
 * max rounded up onto the e4m3 grid (fp8.cuh floatToE4m3Down / Up: saturating at +-448, zero
 * as +0), so the box still contains every key and Quest's score stays an upper bound; rounding
 * being monotone, this equals the oracle's rounding after each key, code for code.
 * qkv: [numTokens, rowStride] (k at column numHeads*D, v after it); kvCache: [numBlocks, 2, bs,
 * Hkv, D]; slotMapping, hostSlotMapping: i32 [numTokens]; digests: bf16 or e4m3 [numHostBlocks, S, 2, Hkv, D];
 * digestTokens a divisor of bs (bs: one digest per page).
 * Requirements: Hkv*D and rowStride multiples of 8, numHeads*D a multiple of 8, pointers 16-byte
 * aligned. Grid: numTokens CTAs.
 */
cudaError_t hsReshapeAndCacheDigest(const void* qkv, void* kvCache, const int32_t* slotMapping, void* digests,
                                    const int32_t* hostSlotMapping, int numTokens, int rowStride, int numHeads,
                                    int numKvHeads, int headDim, int blockSize, int digestTokens, int numBlocks,
                                    int numHostBlocks, int digestDtype, cudaStream_t stream);

/** Arguments of hsQuestSelect (device pointers; see the file comment for the tables). */
typedef struct HsQuestSelectParams {
  /** bf16 [*, qkvRowStride]: the q heads (numHeads * D) of each row's query token. */
  const void* qkv;
  int qkvRowStride;
  /** i32 [numReqs] qkv row of request r's query token; NULL: row r. */
  const int32_t* tokenRow;
  /** [numHostBlocks, digestsPerPage, 2, Hkv, D] this sparse layer's digests, of digestDtype. */
  const void* digests;
  /** HS_DIGEST_BF16 (bf16 values) or HS_DIGEST_FP8 (e4m3 codes, read exactly as floats). */
  int digestDtype;
  int numHostBlocks;
  /** i32 [numReqs] context length after this step (tokens, this step's included). */
  const int32_t* seqLens;
  /** i32 [numReqs] nonzero: select for this row; NULL: every row. */
  const int32_t* rowFlags;
  /** i32 [numReqs] the request's row in the tables (< 0: skip). */
  const int32_t* reqSlot;
  /** i32 [numSlots, tableStride] host block of each page (the index of its digest). */
  const int32_t* hostBlockTable;
  /** i32 [numSlots, tableStride] nonzero for pinned pages; NULL: none. */
  const int32_t* pinnedTable;
  int tableStride;
  int numSlots;
  /** Out: i32 [numReqs, Hkv, tableStride] the selected pages of (r, g), ascending. */
  int32_t* selPages;
  /** Out: i32 [numReqs, Hkv] how many (0 for skipped rows). */
  int32_t* selCount;
  /** Scratch: hsQuestSelectScratchBytes bytes, 8-byte aligned. */
  void* scratch;
  size_t scratchBytes;
  int numReqs;
  int numHeads;
  int numKvHeads;
  int headDim;
  int blockSize;
  /** topk / bs, sinkTokens / bs, windowTokens / bs (window >= 1: the tail page is always in it). */
  int budgetPages;
  int sinkPages;
  int windowPages;
  /** Sub-page digests per page (blockSize / digestTokens, >= 1): a page scores as its best one. */
  int digestsPerPage;
  /**
   * Benchmark only (bench/hisparse_throughput.ts --overlap; NULL in the engine): uint8
   * [numSlots, Hkv, tableStride], nonzero where the slot's previous selection (this layer) took
   * the page. When set, each such page that is not forced is kept with probability overlapP (a
   * hash of the query and the page decides), ranking above every scored page, and the kernels
   * rewrite the flags with this selection. Sets how much a step's selection overlaps the last.
   */
  uint8_t* prevSelected;
  /** Probability in [0, 1] of keeping a previously selected page (read only with prevSelected). */
  float overlapP;
} HsQuestSelectParams;

/** Scratch bytes hsQuestSelect needs: one 64-bit sort key per (request, kv head, page). */
size_t hsQuestSelectScratchBytes(int numReqs, int numKvHeads, int tableStride);

/**
 * Quest page selection per (request, kv head), exactly the rule of QuestSelector (quest.ts):
 * with numPages = ceil(seqLen / bs) <= budgetPages, every page; else the sink pages
 * (p < sinkPages), the window pages (p >= numPages - windowPages), the pinned pages, then the
 * k = budgetPages - #forced highest scores of the other pages, ties to the lower page (none when
 * k <= 0). Score (Quest, arXiv 2406.10774, the largest per-head bound of the GQA group, as
 * quest.ts questScore): for each q head h of the group, with qPos = max(q[h, i], 0) and
 * qNeg = min(q[h, i], 0) (q > 0 ? q : 0 and q > 0 ? 0 : q),
 *   s_h = sum over i of (qPos * max[i] + qNeg * min[i]);  score = max over h in order of s_h
 * (with digestsPerPage S > 1, the largest such score of the page's S sub-page digests, in order),
 * in float32 with the oracle's operation order (lanes of 8 dims summed in order, then a butterfly
 * over the lanes; no fused multiply-add), so the scores, and so the selections, are the oracle's
 * bit for bit. Selection is a radix select over order-preserving 64-bit keys of the scores (-0
 * taken as +0). Two kernels: scoring, grid (CTAs per item, Hkv, numReqs) with CTAs per item
 * bounded by the pages of the table and by about 4 waves in all, each CTA looping over the row's
 * live pages, L = ceil(D / 8) (rounded to a power of two) lanes per page, a page's sub-pages
 * 4 (or 2) at a time when 4 (2) divides S (same sums, the order of a max only); selection, grid
 * (Hkv, numReqs); 256 threads each.
 * Requirements: D a multiple of 8 and <= 256, Hq a multiple of Hkv, (Hq / Hkv) * 8L * 8 bytes of
 * queries within 48 KiB of shared memory, scratch as sized above.
 */
cudaError_t hsQuestSelect(const HsQuestSelectParams* p, cudaStream_t stream);

/**
 * Tests and benchmarks only: caps the scoring CTAs per (kv head, request) at `maxCtasPerItem`
 * (0 restores the default rule), process-wide, so the tests reach the grid-stride loop and the
 * benchmark can compare grid shapes. Not part of the addon.
 */
void hsQuestSetScoreCtaCap(int maxCtasPerItem);

/**
 * Tests and benchmarks only: caps the sub-pages a scoring warp takes at once (1, 2 or 4; 0
 * restores the default, the largest of 4, 2, 1 dividing digestsPerPage), process-wide, so the
 * benchmark can time one-at-a-time scoring against the default in one binary. Not part of the addon.
 */
void hsQuestSetScoreChunkCap(int maxSubPagesAtOnce);

/** Host tier element types (HsResolveParams.hostKvDtype, hsMirrorPages): the cache's bf16, or fp8 e4m3. */
#define HS_HOST_KV_BF16 0
#define HS_HOST_KV_FP8 1

/** Arguments of hsResolve (device pointers; see the file comment for the tables). */
typedef struct HsResolveParams {
  /** i32 [numReqs, Hkv, selStride] / [numReqs, Hkv]: hsQuestSelect's output. */
  const int32_t* selPages;
  const int32_t* selCount;
  int selStride;
  /** i32 [numReqs] nonzero: resolve this row; NULL: every row. */
  const int32_t* rowFlags;
  /** i32 [numReqs] context length after this step. */
  const int32_t* seqLens;
  /** i32 [numReqs] the request's row in the tables (< 0: skip). */
  const int32_t* reqSlot;
  /** i32 [numSlots, tableStride] device block of each page, < 0 when INACTIVE. */
  const int32_t* blockTable;
  /** i32 [numSlots, tableStride] host block of each page. */
  const int32_t* hostBlockTable;
  int tableStride;
  int numSlots;
  /** i32 [numSlots, numHot] each request's hot-buffer blocks (LRU slot s = hotBlocks[., s]). */
  const int32_t* hotBlocks;
  int numHot;
  /** LRU state, i32 [numSlots, numLayers, Hkv, numHot]: page held by each slot (-1 empty), last use. */
  int32_t* lruPage;
  int32_t* lruLastUse;
  /** i32 [numSlots, numLayers, Hkv]: resolve rounds so far (the "step" of lastUse). */
  int32_t* lruTick;
  /** This launch's sparse layer and the number of sparse layers. */
  int layer;
  int numLayers;
  /** i32 [numSlots, tableStride]: number of (layer, kv head) slots holding each page. */
  int32_t* heldCount;
  /** i32 [numSlots]: pages with heldCount > 0 (SPARSE pages) of each request. */
  int32_t* heldPages;
  /** Out: i32 [numReqs, Hkv, selStride] device block of each selected page. */
  int32_t* headBlockTables;
  /** Out: i32 [numReqs, Hkv] tokens (r, g) attends over: full selected pages + the tail's tokens. */
  int32_t* headSeqLens;
  /** u64 [3], accumulated: hits, misses, errors (a selection without its tail page, or more misses than free slots). */
  unsigned long long* counters;
  /** bf16 [numBlocks, 2, bs, Hkv, D] this layer's cache (misses land in hot blocks here). */
  void* kvCache;
  int numBlocks;
  /** bf16 [numHostBlocks, Hkv, 2, bs, D] this layer's host tier, device-visible (mapped pinned). */
  const void* hostKv;
  int numHostBlocks;
  int numReqs;
  int numKvHeads;
  int headDim;
  int blockSize;
  /**
   * The split resolver's plan (NULL: the fused copy, each CTA copying its own misses): i32
   * [numReqs, Hkv, min(numHot, selStride)] host block and hot block of each miss in order, i32
   * [numReqs, Hkv] their count (0 for rows not resolved). hsResolve then runs the SM-wide copy
   * pass over it.
   */
  int32_t* missSrc;
  int32_t* missDst;
  int32_t* missCount;
  /** Element type of hostKv: HS_HOST_KV_BF16 (the cache's) or HS_HOST_KV_FP8 (split path only). */
  int hostKvDtype;
  /** Per-tensor scales of an fp8 host tier (vLLM k_scale / v_scale; 1.0 by default). */
  float kScale;
  float vScale;
} HsResolveParams;

/**
 * The hot-buffer resolver of one sparse layer (DESIGN.md §4 step 3; SGLang HiSparse's swap-in
 * kernel; CPU oracle LruHotBufferResolver with HotBufferLru). Plan: one CTA per (kv head, request):
 * 1. the round starts: tick = ++lruTick;
 * 2. hits: every LRU slot looks its page up in the (ascending) selection by binary search; a
 *    selected INACTIVE page found there is a hit: its slot is marked used (lastUse = tick);
 * 3. each selected page gets its own block when ACTIVE, its slot's hot block on a hit, else it is
 *    a miss; the m-th miss (selection order) takes the m-th slot not used in this round in
 *    (lastUse, slot) order (empty slots have lastUse -1), which is exactly the sequence of
 *    victims of the oracle's one-at-a-time LRU inserts;
 * 4. headSeqLens = (#selected - 1) * bs + the tail page's tokens.
 * Copy: each miss's K and V slice of kv head g (2*bs*D contiguous elements in the host tier) is
 * read from mapped pinned host memory with 16-byte loads and written to the hot block's head-g
 * rows (dequantised from fp8 when hostKvDtype is HS_HOST_KV_FP8): no CPU work, no cudaMemcpy.
 * With missSrc/missDst/missCount set (the split resolver), the plan writes the miss list and a
 * second launch copies every miss of the layer with an SM-wide grid (a few CTAs per SM, 4 loads
 * in flight per thread), so batch 1 reaches the link's speed; with them NULL (the fused
 * resolver, bf16 only) each plan CTA copies its own misses (Hkv * numReqs CTAs in all).
 * Counts hits and misses; counts an error (and points the page at a hot block, so nothing reads
 * out of bounds) when the last selected page is not the tail or misses outnumber free slots.
 * Requirements: numHot <= 4096, D a multiple of 8 (16 for an fp8 host tier), 16-byte aligned
 * kvCache and hostKv. Plan grid (Hkv, numReqs), 256 threads.
 */
cudaError_t hsResolve(const HsResolveParams* p, cudaStream_t stream);

/**
 * Eager mirror of filled pages to the host tier, every layer in one launch: for i < count and
 * layer l < numLayers, copies device block blockIds[i] of kvCaches[l] ([numBlocks, 2, bs, Hkv, D])
 * to host block hostBlockIds[i] of hostTiers[l] ([numHostBlocks, Hkv, 2, bs, D], mapped pinned
 * memory written over the host link), transposing to the head-major host layout. Entries out of
 * range are skipped. hostKvDtype HS_HOST_KV_FP8: the host tier holds e4m3 codes, stored =
 * e4m3(x / scale) with the per-tensor kScale (K rows) and vScale (V rows) of every layer (D a
 * multiple of 16); hsLoadPages dequantises them back. kvCaches, hostTiers: u64 [numLayers] device arrays of addresses; blockIds,
 * hostBlockIds: i32 [count]. Grid (count, numLayers), 256 threads. Issue it on a side stream
 * after an event of the compute stream (the worker does).
 */
cudaError_t hsMirrorPages(const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                          const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                          int blockSize, int numBlocks, int numHostBlocks, int hostKvDtype,
                          float kScale, float vScale, cudaStream_t stream);

/**
 * The reverse of hsMirrorPages (same arguments): copies host block hostBlockIds[i] of every layer
 * into device block blockIds[i], back to the token-major device layout (prefix-cache hits on
 * host-resident pages, before the prefill that reads them). Issue it on the compute stream after
 * the mirrors it may overlap (the worker waits for the side stream first).
 */
cudaError_t hsLoadPages(const uint64_t* kvCaches, const uint64_t* hostTiers, const int32_t* blockIds,
                        const int32_t* hostBlockIds, int count, int numLayers, int numKvHeads, int headDim,
                        int blockSize, int numBlocks, int numHostBlocks, int hostKvDtype,
                        float kScale, float vScale, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ---- DSA models: token-granular hot rows (issue 15) -------------------------------------------------
// Layouts (bf16 unless named otherwise; W = kv_lora_rank + qk_rope_head_dim, bs block size):
//   latent cache of a layer       [numBlocks, bs, W]          (one row per token, device slot = block*bs+off)
//   host tier of a layer          [numHostBlocks, bs, W]      (mapped pinned; host slot = hostBlock*bs+off)
//   per-request tables            [numSlots, tableStride] i32 as above; hot blocks [numSlots, numHotBlocks]
//   hot rows of a request         numHotRows = numHotBlocks * bs; hot row h = hotBlocks[., h / bs] * bs + h % bs
// CPU oracle: src/attention/sparse/dsa.ts LruHotRowResolver (+ HotBufferLru keyed by token position).

/** Arguments of hsRowResolve (device pointers). */
typedef struct HsRowResolveParams {
  /** i32 [T, K] the indexer's top-k (Backend.mla.topkIndices: ascending positions, -1 after the last). */
  const int32_t* topk;
  int K;
  /** i32 [numReqs] top-k row of each row's query token; NULL: row r reads top-k row r (a decode batch). */
  const int32_t* tokenRow;
  /** i32 [numReqs] nonzero: resolve this row; NULL: every row. */
  const int32_t* rowFlags;
  /** i32 [numReqs] the request's row in the tables (< 0: skip). */
  const int32_t* reqSlot;
  /** i32 [numReqs] context length after this step (entries must be below it). */
  const int32_t* seqLens;
  /** i32 [numSlots, tableStride] device block of each page, < 0 when INACTIVE; host block of each page. */
  const int32_t* blockTable;
  const int32_t* hostBlockTable;
  int tableStride;
  int numSlots;
  /** i32 [numSlots, numHotBlocks] each request's hot-buffer blocks. */
  const int32_t* hotBlocks;
  int numHotBlocks;
  /** LRU state, i32 [numSlots, numSources, numHotBlocks * bs]: position held by each hot row (-1 empty), last use. */
  int32_t* lruPos;
  int32_t* lruLastUse;
  /** i32 [numSlots, numSources]: resolve rounds so far. */
  int32_t* lruTick;
  /** This launch's indexer (index among the indexers whose selections have hot rows) and their count. */
  int source;
  int numSources;
  /** i32 [numSlots, tableStride]: (indexer, hot row) slots holding a row of each page; i32 [numSlots]: pages with one (SPARSE). */
  int32_t* heldCount;
  int32_t* heldPages;
  /**
   * Out, the view Backend.mla.attention reads for the resolved rows (attention/sparse/dsa_attention.ts):
   * i32 [numReqs, K] position j * bs + offset of entry j (-1: none), i32 [numReqs, K] the block of
   * entry j (its table row), i32 [numReqs] K * bs. Rows not resolved are left as they are.
   */
  int32_t* viewTopk;
  int32_t* viewTable;
  int32_t* viewSeqLens;
  /** Out: i32 [numReqs, K] host slot and device slot of each miss in order, i32 [numReqs] their count (hsRowCopy's plan). */
  int32_t* missSrc;
  int32_t* missDst;
  int32_t* missCount;
  /** u64 [3], accumulated: hits, misses, errors (an entry outside the context, more misses than free rows, a bad table entry). */
  unsigned long long* counters;
  int numReqs;
  int blockSize;
  int numBlocks;
  int numHostBlocks;
} HsRowResolveParams;

/**
 * The row resolver of one indexer (one CTA per row; the plan of every layer that shares the
 * indexer; misses are copied by hsRowCopy, once per layer):
 * 1. the round starts: tick = ++lruTick[slot, source];
 * 2. hits: each hot row looks its position up in the (ascending) selection by binary search; a
 *    selected position of an INACTIVE page found there is a hit (lastUse = tick);
 * 3. each entry resolves to its own device slot when its page is ACTIVE (the newest rows: the
 *    tail page is always ACTIVE), to its hot row on a hit, else it is a miss; the m-th miss
 *    (selection order) takes the m-th hot row not used in this round in (lastUse, row) order
 *    (empty rows have lastUse -1): exactly the victims of the oracle's one-at-a-time LRU
 *    inserts. The order is found without sorting every row: a binary search over lastUse finds
 *    the threshold v where the victims end, the rows below v (fewer than the misses) are ranked
 *    pairwise, the rows at v taken in row order;
 * 4. the view for attention and the miss list (host slot -> hot-row device slot) are written.
 * Graph-capturable (grid from numReqs; live counts in device memory). Shared memory:
 * (2 * numHotRows + 3 * K + K / 32 + 48) * 4 bytes.
 */
cudaError_t hsRowResolve(const HsRowResolveParams* p, cudaStream_t stream);

/**
 * One layer's copy pass of an hsRowResolve plan: for each resolved row r and miss m <
 * missCount[r], the rowBytes bytes of host slot missSrc[r, m] of `hostRows` (this layer's mapped
 * pinned host tier, [numHostBlocks * bs, rowBytes]) are read with 16-byte loads straight over the
 * host link and stored at device slot missDst[r, m] of `cache` ([numBlocks * bs, rowBytes]).
 * Layers sharing an indexer issue one pass each (the next one may run on a side stream while
 * the current layer computes: exact prefetch, the plan is known). rowBytes a multiple of 16,
 * both bases 16-byte aligned; slots outside the pools are skipped (hsRowResolve counted them).
 */
cudaError_t hsRowCopy(void* cache, const void* hostRows, const int32_t* missSrc, const int32_t* missDst,
                      const int32_t* missCount, const int32_t* rowFlags, int numReqs, int K, size_t rowBytes,
                      int numDeviceSlots, int numHostSlots, cudaStream_t stream);


/** Arguments of hsRowViewMerge (device pointers; the step's rows, R = numReqs, T = numTokens). */
typedef struct HsRowViewMergeParams {
  /** i32 [T, K] the indexer's top-k; i32 [R, tableStride] the step's block tables; i32 [R] its lengths. */
  const int32_t* topk;
  const int32_t* blockTables;
  const int32_t* seqLens;
  /** hsRowResolve's row rule: i32 [R] flags (NULL: every row), request slots, top-k row of each row (NULL: r). */
  const int32_t* rowFlags;
  const int32_t* reqSlot;
  const int32_t* tokenRow;
  /** hsRowResolve's view: i32 [R, K] positions, [R, K] table columns, [R] lengths. */
  const int32_t* viewTopk;
  const int32_t* viewTable;
  const int32_t* viewSeqLens;
  /** Out: i32 [T, K], [R, outStride], [R]. */
  int32_t* outTopk;
  int32_t* outTables;
  int32_t* outSeqLens;
  int numReqs;
  int numTokens;
  int K;
  int tableStride;
  /** >= max(K, tableStride). */
  int outStride;
  int numSlots;
} HsRowViewMergeParams;

/**
 * The metadata Backend.mla.attention reads for a step whose rows are partly resolved by
 * hsRowResolve (a batch mixing sparse decodes with resident decodes, prefill chunks or padding):
 * resolved rows get their view (table columns, length K * bs, and the view positions written over
 * their token's top-k row), every other row its own table (zero-padded to outStride), length and
 * top-k. Two stream-ordered kernels; graph-capturable. CPU oracle: DsaHiSparseAttention.sparseView
 * (src/attention/sparse/dsa_attention.ts).
 */
cudaError_t hsRowViewMerge(const HsRowViewMergeParams* a, cudaStream_t stream);


/** Arguments of hsRowSelectionOverlap (device pointers; benchmarks only). */
typedef struct HsRowSelectionOverlapParams {
  /** i32 [T, K] the indexer's top-k; out: i32 [T, K] its copy with resolved rows rewritten. */
  const int32_t* topk;
  int32_t* out;
  int K;
  /** hsRowResolve's row rule: i32 [R] flags (NULL: every row), request slots, top-k row of each row (NULL: r). */
  const int32_t* rowFlags;
  const int32_t* reqSlot;
  const int32_t* tokenRow;
  /** i32 [R] context length after the step. */
  const int32_t* seqLens;
  /** i32 [numSlots, numSources, K] each request's previous selection per indexer; [numSlots, numSources] its context length. */
  int32_t* prevSelection;
  int32_t* prevSeqLen;
  int source;
  int numSources;
  int numSlots;
  int numReqs;
  int numTokens;
  /** Probability of keeping each previous entry. */
  float p;
} HsRowSelectionOverlapParams;

/**
 * Benchmark-only selection overlap of DSA models: out = topk, then for each resolved row its
 * token's row is rewritten to the previous selection's entries kept with probability p (hash of
 * slot, indexer, context length, entry) plus the model's entries not kept, until the model's
 * count, ascending; a request's first step (context not one token longer than the stored one)
 * keeps the model's. The previous selection is updated. A copy and one CTA per row; graph-capturable.
 */
cudaError_t hsRowSelectionOverlap(const HsRowSelectionOverlapParams* p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
