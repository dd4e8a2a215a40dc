/**
 * The compute backend interface: tensor handles and the ops of the decoder forward. The model
 * code (models/decoder.ts and its blocks) is written once against it; `cpu/` implements it in TypeScript (the
 * numerical oracle), `cuda/` through the native addon.
 *
 * Conventions for every op:
 * - Shapes are row-major; `[T, H]` means T rows of H contiguous elements.
 * - T is the number of tokens in the step (all requests' scheduled tokens, concatenated in
 *   request order), B the number of rows that produce logits.
 * - Activations use `backend.activationDtype` (f32 on CPU, bf16 on CUDA); accumulation is fp32.
 * - Ops that return a tensor allocate it from the backend's step workspace, which is recycled at
 *   `resetWorkspace()`: a tensor returned by an op is valid until the next `resetWorkspace()`.
 *   Weights, KV caches and tensors made by `upload`/`allocate` live until `dispose()`.
 * - All calls are synchronous. The worker runs on its own thread (worker/), so blocking here does
 *   not block the server's event loop.
 * - Ops throw `Error` on shape or dtype mismatches (a programming error, not user input).
 */

import type { MoeRoutingRule } from "../config/moe_config.js";
import type { ExtensionData } from "../core/extension_data.js";
import { KV_CACHE_DTYPE_BYTES } from "../core/kv/kv_cache_dtype.js";
import type { WeightFill } from "./weight_fill.js";

export type { WeightFill } from "./weight_fill.js";

/** Element types of tensors. "i32" is for ids, positions, slot mappings and block tables. */
/**
 * Tensor element types. "fp8" (OCP FP8 E4M3, core/kv/kv_cache_dtype.ts) is a storage type of KV
 * caches only (`--kv-cache-dtype fp8`): reshapeAndCache quantizes into it, attention dequantizes.
 */
export type DType = "f32" | "bf16" | "f16" | "i32" | "fp8";

/** Bytes per element of each dtype (KV dtypes: core/kv/kv_cache_dtype.ts KV_CACHE_DTYPE_BYTES). */
export const DTYPE_BYTES: Record<DType, number> = {
  f32: 4,
  bf16: 2,
  f16: 2,
  i32: 4,
  fp8: KV_CACHE_DTYPE_BYTES.fp8,
};

/** A backend-owned tensor. Backends cast to their own concrete type. */
export interface Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
}

/** Host-side raw weight data as read from a checkpoint (element bits in a typed array). */
export interface HostTensorData {
  /** f32 values, or bf16/f16 bit patterns. */
  data: Float32Array | Uint16Array;
  dtype: "f32" | "bf16" | "f16";
  shape: number[];
}

/**
 * Bytes of a file that hold one weight (or one part of a fused weight), for
 * {@link Backend.loadWeightFiles}: `byteLength` bytes of `dtype` elements at byte `position` of
 * the open file `fd`, written from element `elemOffset` of `tensor` on (converted as writeWeight
 * converts host data).
 */
export interface WeightFileRange {
  /** An open file descriptor (fs.openSync) and its path (for messages). */
  fd: number;
  path: string;
  position: number;
  byteLength: number;
  dtype: HostTensorData["dtype"];
  tensor: Tensor;
  elemOffset: number;
}

/**
 * Layout of the fused QKV projection output `[T, (numHeads + 2*numKvHeads) * headDim]`: per
 * token, the q heads, then the k heads, then the v heads (vLLM QKVParallelLinear order).
 */
export interface QkvLayout {
  numHeads: number;
  numKvHeads: number;
  headDim: number;
}

/**
 * Where each token of the step sits and what it attends to (vLLM FlashAttentionMetadata).
 * Device tensors are i32; the same values are kept on the host for backends and selectors that
 * need them there.
 */
export interface AttentionMetadata {
  numReqs: number;
  /** Total tokens in the step (T). */
  numTokens: number;
  /** [numReqs + 1] prefix sums of per-request query lengths. */
  queryStartLoc: Tensor;
  /** [numReqs] context length of each request after this step (cached + new tokens). */
  seqLens: Tensor;
  /** [numReqs, maxBlocksPerReq] device block ids of each request's pages (row-padded with 0). */
  blockTables: Tensor;
  /** [T] flat KV slot of each new token: blockId * blockSize + offset (PAD_SLOT_ID = skip). */
  slotMapping: Tensor;
  maxQueryLen: number;
  maxSeqLen: number;
  /** Host copies of the four tensors above. */
  host: {
    queryStartLoc: Int32Array;
    seqLens: Int32Array;
    blockTables: Int32Array;
    maxBlocksPerReq: number;
    slotMapping: Int32Array;
    /** [T] absolute position of each token. */
    positions: Int32Array;
  };
  /**
   * Per-step metadata of optional attention features, one typed entry per feature (HiSparse:
   * host slot mapping, dense-layer tables, the sparse rows); set by the worker's extensions,
   * read by their AttentionBackend through the feature's ExtensionKey.
   */
  extensions?: ExtensionData;
}

/**
 * Block tables given per (request, kv head) instead of per request, for
 * {@link Backend.sparsePagedAttention}: each GQA group of a request reads its own list of blocks
 * (HiSparse: the pages its selector chose, resolved to device blocks, in position order, the
 * partial tail page last). Row (r, g) holds `ceil(seqLens[r, g] / blockSize)` valid entries.
 */
export interface PerHeadBlockTables {
  /** i32 [numReqs, numKvHeads, maxBlocks] device block ids (row-padded with 0). */
  blockTables: Tensor;
  /** i32 [numReqs, numKvHeads] tokens each (request, kv head) attends over, this step's included. */
  seqLens: Tensor;
  maxBlocks: number;
  /** Host copies of the two tensors above. */
  host: { blockTables: Int32Array; seqLens: Int32Array };
}

/** Geometry of the paged KV cache: one tensor per layer, [numBlocks, 2, blockSize, numKvHeads, headDim]. */
export interface KvCacheSpec {
  numLayers: number;
  numBlocks: number;
  blockSize: number;
  numKvHeads: number;
  headDim: number;
  dtype: DType;
}

/** Device memory report in bytes. */
export interface MemoryInfo {
  free: number;
  total: number;
}

/**
 * Per-row sampling settings for a device sampler. The random number of each row is drawn on the
 * host from the request's own generator (worker/sampler.ts), so the CPU and CUDA samplers pick
 * the same token from the same distribution. The rule, for rows with temperature > 0:
 *   p = softmax(logits / temperature) in fp32;
 *   keep token i iff p_i >= the k-th largest p (top-k; ties at the boundary are kept),
 *     and p_i >= minP * max(p), and p_i >= tP, where tP is the largest value such that the
 *     tokens with p >= tP hold at least topP of the mass (top-p; ties kept);
 *   walk the kept tokens in ascending token id, accumulating p; pick the first token whose
 *   running sum exceeds uniform * (sum of kept p); if rounding leaves none, the last kept token.
 * These threshold forms need no sort, so a GPU computes them with reductions and one scan.
 */
export interface DeviceSamplingRows {
  /** [B] temperature per row; rows with temperature 0 take the argmax (lowest id on ties). */
  temperature: Float32Array;
  /** [B] top-k per row; 0 disables. */
  topK: Int32Array;
  /** [B] top-p per row; 1 disables. */
  topP: Float32Array;
  /** [B] min-p per row; 0 disables. */
  minP: Float32Array;
  /** [B] uniform random number in [0, 1) per row. */
  uniform: Float32Array;
}

/** An instantiated device graph (opaque; made by BackendGraphs.capture). */
export interface GraphHandle {
  readonly id: number;
}

/**
 * Optional capability: record a sequence of ops once and replay it with one launch (CUDA graphs).
 * Rules for the recorded function: every input it reads must live in persistent tensors (written
 * with writeTensor before each replay), no host reads (toHost), no allocation of persistent
 * tensors, no staging. The workspace tensors it returns or creates are the graph's outputs: after
 * a replay they hold the new results and stay valid until the next resetWorkspace(). Persistent
 * tensors that a graph reads must outlive it.
 */
export interface BackendGraphs {
  /**
   * Runs `fn` once under capture (its ops are recorded, not executed) and instantiates the graph.
   * Run the same sequence eagerly once first (warm-up), as vLLM does. @throws Error when fn throws
   * or does something that cannot be captured; nothing is left half-captured.
   */
  capture(fn: () => void): GraphHandle;
  /** Launches the graph on the backend's stream (asynchronous, like every op). */
  replay(g: GraphHandle): void;
  /** Frees the graph. */
  dispose(g: GraphHandle): void;
}

export interface Backend {
  readonly name: "cpu" | "cuda";
  /** Human-readable device name (e.g. "NVIDIA H200", "CPU (2 threads)"). */
  readonly deviceName: string;
  /** Dtype of activations and of the KV cache by default. */
  readonly activationDtype: DType;

  // ---- memory --------------------------------------------------------------------------------
  /** Uploads a weight (converted to the backend's weight dtype); lives until dispose(). */
  uploadWeight(src: HostTensorData): Tensor;
  /**
   * A persistent weight tensor in the backend's weight dtype (CPU f32, CUDA bf16) whose contents
   * are undefined until written by writeWeight / fillWeight / loadWeightFiles (models/
   * weight_loader.ts fills fused weights part by part, each part into its row range).
   */
  allocateWeight(shape: readonly number[]): Tensor;
  /**
   * Writes host data into elements [elemOffset, elemOffset + numel(src.shape)) of a weight made by
   * allocateWeight, converted as uploadWeight converts. @throws Error when the range leaves it.
   */
  writeWeight(t: Tensor, elemOffset: number, src: HostTensorData): void;
  /**
   * Writes elements [0, count) of a generated fill (weight_fill.ts: constant or counter-based table
   * lookup) into elements [elemOffset, elemOffset + count) of a weight, with the values that
   * writeWeight would store for the fill's host copy (generateFill). CUDA runs the rule on the
   * device (no host data). `first` (default 0): the fill's element written first, so that a
   * tensor-parallel shard takes elements [first, first + count) of the HF tensor's rule.
   * @throws Error when the range leaves the tensor.
   */
  fillWeight(t: Tensor, elemOffset: number, count: number, fill: WeightFill, first?: number): void;
  /**
   * Optional: streams byte ranges of open files into weights (CUDA: parallel reads into pinned,
   * multi-buffered staging overlapped with host-to-device copies, dtype cast on the device) and
   * returns when every byte is in place. `onBytes(done, total)` reports the range bytes placed so
   * far. Backends without it receive the data through writeWeight.
   * @throws Error naming the file when a read fails or a file ends early.
   */
  loadWeightFiles?(ranges: readonly WeightFileRange[], onBytes?: (done: number, total: number) => void): void;
  /** Uploads host data as a persistent tensor of the given dtype. */
  upload(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor;
  /** Copies host i32/f32 data into a workspace tensor (valid until resetWorkspace()). */
  stage(data: Float32Array | Int32Array, shape: readonly number[], dtype: DType): Tensor;
  /** Allocates the paged KV cache: one zeroed tensor per layer. */
  allocateKvCache(spec: KvCacheSpec): Tensor[];
  /**
   * Copies host data into an existing tensor with the same element count (i32 tensors take an
   * Int32Array, the others a Float32Array, converted to the tensor's dtype). Asynchronous: the
   * caller may reuse `data` at once, and every later op sees the new values. This is how inputs
   * of a captured graph are updated.
   */
  writeTensor(t: Tensor, data: Float32Array | Int32Array): void;
  /** Reads a tensor back as f32 (i32 tensors as Int32Array). Synchronous. */
  toHost(t: Tensor): Float32Array | Int32Array;
  /** Recycles every workspace tensor returned by ops since the last call. */
  resetWorkspace(): void;
  /** Free/total device memory (CPU: the process's view of system memory). */
  memoryInfo(): MemoryInfo;
  /** Frees a persistent tensor. */
  free(t: Tensor): void;
  /**
   * Optional: runs `fn` and then releases every workspace tensor it created except the one it
   * returns (which may be moved, so use the returned handle). Lets a model bound its workspace to
   * about one layer's activations (e.g. one scope per decoder layer). `consumed`: a tensor fn reads
   * for the last time (the previous layer's output); the backend may reclaim it with the scope.
   * Backends without a bump workspace omit it.
   */
  workspaceScope?<T extends Tensor>(fn: () => T, consumed?: Tensor): T;
  /** Optional capability: CUDA graph capture and replay (absent on CPU). */
  readonly graphs?: BackendGraphs;
  /**
   * Optional capability of backends whose tensors live in host memory (CPU): a live view of a
   * tensor's elements (writes go to the tensor), valid while the tensor is. Lets host-side
   * reference implementations (HiSparse's CPU selector, resolver and host tier) read and write
   * tensors without copies. Absent on CUDA.
   */
  hostView?(t: Tensor): Float32Array | Int32Array;
  /** Releases everything the backend holds. */
  dispose(): void;

  // ---- ops -----------------------------------------------------------------------------------
  /**
   * out[t] = table[ids[t] - vocabStart]. ids: i32 [T]; table: [V, H] -> [T, H]. `vocabStart`
   * (vocab-parallel embedding, default 0): the table is the shard of rows [vocabStart,
   * vocabStart + V); ids outside it give zero rows (another rank's tokens, summed in by the
   * all-reduce that follows). Without it every id must be in [0, V).
   */
  embedding(ids: Tensor, table: Tensor, vocabStart?: number): Tensor;
  /** out = x / sqrt(mean(x^2) + eps) * weight, per row. x: [T, H]; weight: [H] -> [T, H]. */
  rmsNorm(x: Tensor, weight: Tensor, eps: number): Tensor;
  /**
   * In place, fused: residual += x; x = rmsNorm(residual) * weight (vLLM fused_add_rms_norm).
   * x, residual: [T, H]; weight: [H].
   */
  fusedAddRmsNorm(x: Tensor, residual: Tensor, weight: Tensor, eps: number): void;
  /** y = x @ weight^T + bias. x: [T, K]; weight: [N, K]; bias: [N] | null -> [T, N] (outDtype, default activation). */
  linear(x: Tensor, weight: Tensor, bias: Tensor | null, outDtype?: DType): Tensor;
  /**
   * In place on the q and k parts of a fused qkv tensor: per head, RMSNorm over headDim with
   * qWeight / kWeight ([headDim]) (Qwen3 q_norm/k_norm).
   */
  qkNorm(qkv: Tensor, layout: QkvLayout, qWeight: Tensor, kWeight: Tensor, eps: number): void;
  /**
   * In place rotary embedding on the q and k parts of qkv ([T, (Hq+2Hkv)*D]), HF "rotate_half"
   * (NeoX) style over the first R dims of each head, R = cosSinCache's width (R = D for full
   * rotary; R < D is partial rotary, e.g. GLM-4.5's R = D/2): for i < R/2, (x_i, x_{i+R/2})
   * rotated by angle pos * invFreq_i; dims [R, D) are left as they are.
   * cosSinCache: f32 [maxPositions, R], R even and <= D, cos in [:, :R/2] and sin in [:, R/2:].
   * positions: i32 [T].
   */
  rotaryEmbedding(qkv: Tensor, layout: QkvLayout, positions: Tensor, cosSinCache: Tensor): void;
  /**
   * Optional fusion, equal bit for bit to `qkNorm(qkv, layout, qWeight, kWeight, eps);
   * rotaryEmbedding(qkv, layout, positions, cosSinCache)` (Qwen3's attention prologue in one
   * kernel where the backend can).
   */
  qkNormRotaryEmbedding?(
    qkv: Tensor,
    layout: QkvLayout,
    qWeight: Tensor,
    kWeight: Tensor,
    eps: number,
    positions: Tensor,
    cosSinCache: Tensor,
  ): void;
  /** out = silu(x[:, :I]) * x[:, I:]. x: [T, 2I] -> [T, I]. */
  siluAndMul(x: Tensor): Tensor;
  /**
   * Optional fusion, equal bit for bit to siluAndMul(linear(x, weight, bias)) (the gated MLP's
   * gate_up projection and activation in one kernel where the backend can). weight: [2I, K]
   * (gate rows, then up rows); bias: [2I] | null; x: [T, K] -> [T, I] (activation dtype).
   */
  linearSiluAndMul?(x: Tensor, weight: Tensor, bias: Tensor | null): Tensor;
  /**
   * Optional fusion, equal bit for bit to `qkv = linear(x, weight, bias); rotaryEmbedding(qkv,
   * layout, positions, cosSinCache); return qkv` (the attention's q/k/v projection and RoPE in
   * one kernel where the backend can). x: [T, K]; weight: [(Hq + 2Hkv) * D, K] -> [T, (Hq + 2Hkv) * D].
   */
  linearRotaryEmbedding?(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | null,
    layout: QkvLayout,
    positions: Tensor,
    cosSinCache: Tensor,
  ): Tensor;
  /** Writes the k and v parts of qkv into kvCache at slotMapping (vLLM reshape_and_cache). */
  reshapeAndCache(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    slotMapping: Tensor,
    blockSize: number,
  ): void;
  /**
   * Causal paged attention over each request's cached KV (which includes this step's tokens,
   * written by reshapeAndCache first). Token j of request r (absolute position
   * seqLen_r - queryLen_r + j) attends to positions [0, that position]. Softmax scale
   * 1/sqrt(headDim); GQA: q head h uses kv head floor(h / (numHeads/numKvHeads)).
   * qkv: [T, (Hq+2Hkv)*D] -> [T, Hq*D].
   */
  pagedAttention(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
  ): Tensor;
  /**
   * Optional (HiSparse): pagedAttention with per-(request, kv head) block tables and sequence
   * lengths (`tables`) instead of `meta.blockTables` / `meta.seqLens`; `meta.queryStartLoc` gives
   * the query tokens. Kv head g of request r attends over the first `tables.seqLens[r, g]` slots
   * of its row; query token j of the request's qLen sits at slot seqLens[r, g] - qLen + j and
   * attends to slots [0, that slot] (for a decode, qLen = 1: every listed slot). When every row
   * equals the request's dense row and seqLen, the result equals pagedAttention's bit for bit.
   * qkv: [T, (Hq+2Hkv)*D] -> [T, Hq*D].
   */
  sparsePagedAttention?(
    qkv: Tensor,
    layout: QkvLayout,
    kvCache: Tensor,
    meta: AttentionMetadata,
    tables: PerHeadBlockTables,
    blockSize: number,
  ): Tensor;
  /** out[b] = x[indices[b]]. x: [T, H]; indices: i32 [B] -> [B, H]. */
  gatherRows(x: Tensor, indices: Tensor): Tensor;
  /**
   * Optional device sampler: greedy / temperature / top-k / top-p over logits [B, V] f32.
   * Returns the sampled ids, or null when the backend has no device sampler (the worker then
   * samples on the host).
   */
  sampleOnDevice?(logits: Tensor, rows: DeviceSamplingRows): Int32Array | null;
  /**
   * Optional capability: the mixture-of-experts ops ({@link BackendMoeOps}). Models with MoE
   * layers refuse to load on a backend without it.
   */
  readonly moe?: BackendMoeOps;
  /**
   * Optional capability: multi-head latent attention and the DSA indexer ({@link BackendMlaOps}).
   * MLA models (DeepSeek-V3 / V3.2, GLM-5) refuse to load on a backend without it.
   */
  readonly mla?: BackendMlaOps;
}

/** Selected experts of every token (output of {@link BackendMoeOps.route}). */
export interface MoeRouting {
  /** i32 [T, k] expert ids of each token, ascending within the row (no repeats). */
  topkIds: Tensor;
  /** f32 [T, k] the weight of each selected expert (same order as topkIds). */
  topkWeights: Tensor;
}

/** Tokens grouped by expert (output of {@link BackendMoeOps.permute}). */
export interface MoePermutation {
  /**
   * [P, H] (activation dtype) the token rows, expert 0's first: expert e's rows are
   * [expertOffsets[e], expertOffsets[e+1]). The order within a segment is the backend's (the CPU
   * backend keeps ascending (token, slot); a GPU may place rows with atomics): no result depends
   * on it, since every row is computed on its own and unpermute finds rows by slotToRow. P >= T*k
   * is the backend's choice and a function of (T, k, E) only, so it is fixed inside a captured
   * graph: the CPU backend uses P = T*k; a GPU backend may pad each expert's segment to its GEMM
   * tile (P <= T*k + E*(tile-1)). Padding rows hold unspecified values; ops may compute on them
   * but never return them (unpermute reads only rows named by slotToRow).
   */
  hidden: Tensor;
  /** i32 [E + 1] segment starts in `hidden`; expertOffsets[0] = 0, expertOffsets[E] <= P. */
  expertOffsets: Tensor;
  /** i32 [T, k] the row of `hidden` that holds (token t, slot j) of the routing. */
  slotToRow: Tensor;
}

/**
 * Mixture-of-experts ops (vLLM fused_moe's stages: routing, moe_align / permute, grouped GEMMs,
 * un-permute). A MoE layer runs, with x [T, H] its normed input:
 *   logits = linear(x, routerWeight [E, H], null, "f32")            // [T, E] f32
 *   r      = moe.route(logits, rule, correctionBias)                // [T, k] ids + weights
 *   p      = moe.permute(x, r.topkIds, E)                           // [P, H] grouped by expert
 *   h      = siluAndMul(moe.groupedLinear(p.hidden, gateUp [E, 2I, H], p.expertOffsets))  // [P, I]
 *            (or moe.groupedGateUpSilu(p.hidden, gateUp, p.expertOffsets), the same fused)
 *   y      = moe.groupedLinear(h, down [E, H, I], p.expertOffsets)  // [P, H]
 *   out    = moe.unpermute(y, p.slotToRow, r.topkWeights, shared)   // [T, H]
 * Every shape depends on T (and the model) only and every count lives in device tensors, so a
 * step needs no host round trip and the sequence can be captured in a CUDA graph. Each token's
 * result depends only on its own row (batch invariance): routing is per row, the grouped GEMMs
 * compute each row on its own, and unpermute sums a token's k rows in slot order.
 */
export interface BackendMoeOps {
  /**
   * Routing (HF Qwen3MoeTopKRouter; DeepseekV3TopkRouter / Glm4MoeTopkRouter "noaux_tc"), per row
   * of logits, in fp32:
   *   s = softmax(logits) (rule.scoring "softmax") or sigmoid(logits) ("sigmoid");
   *   c = s + correctionBias (selection scores; c = s without a bias);
   *   numGroups > 1: the E experts form numGroups consecutive groups; a group's score is the sum
   *     of its two largest c; experts outside the topkGroup best groups get c = -inf (DeepSeek's
   *     reference Gate; HF writes 0.0 there, which differs only when a chosen group has fewer
   *     than k experts with c > 0);
   *   the k = rule.topK experts of largest c (ties: the lower expert id first; the same rule for
   *     groups), then sorted by ascending id;
   *   w = s of those experts (the bias never enters the weights); rule.renormalize:
   *     w /= (sum(w) + 1e-20); finally w *= rule.routedScalingFactor.
   * logits: f32 [T, E]; correctionBias: f32 [E] or null (required iff rule.correctionBias).
   * @throws Error on shapes or a rule that cannot pick k experts.
   */
  route(logits: Tensor, rule: MoeRoutingRule, correctionBias: Tensor | null): MoeRouting;
  /**
   * Groups token rows by expert (vLLM moe_align + permute): row (t, j) of the routing is a copy
   * of x[t] placed in expert topkIds[t, j]'s segment; expert counts stay on the device.
   * x: [T, H]; topkIds: i32 [T, k] with ids in [0, numExperts).
   * @throws Error on shapes or an id outside [0, numExperts).
   */
  permute(x: Tensor, topkIds: Tensor, numExperts: number): MoePermutation;
  /**
   * Per-expert matmul: out[r] = x[r] @ weight[e]^T for every row r of expert e's segment
   * [expertOffsets[e], expertOffsets[e+1]) (one grouped GEMM launch; empty segments cost
   * nothing). Rows outside every segment are padding (unspecified values). x: [P, K];
   * weight: [E, N, K] (HF 5.x packed expert layout: gate_up_proj [E, 2I, H] with gate rows
   * first, down_proj [E, H, I]); expertOffsets: i32 [E + 1] -> [P, N].
   */
  groupedLinear(x: Tensor, weight: Tensor, expertOffsets: Tensor): Tensor;
  /**
   * Optional fusion, equal bit for bit to siluAndMul(groupedLinear(x, gateUp, expertOffsets))
   * (the CUDA backend applies silu_and_mul in the GEMM's epilogue: the [P, 2I] product never
   * reaches memory and a MoE layer saves a launch, which counts at decode batch sizes).
   * x: [P, H]; gateUp: [E, 2I, H] (gate rows first) -> [P, I].
   */
  readonly groupedGateUpSilu?: (x: Tensor, gateUp: Tensor, expertOffsets: Tensor) => Tensor;
  /**
   * Weighted sum of each token's expert rows, in slot order, then the shared-expert output:
   *   out[t] = (sum_j topkWeights[t, j] * y[slotToRow[t, j]]) + shared[t]
   * accumulated in fp32 (the CPU backend rounds each product and partial sum to f32, as HF's
   * index_add_ does); shared omitted when null. y: [P, H]; slotToRow: i32 [T, k]; topkWeights:
   * f32 [T, k]; shared: [T, H] or null -> [T, H].
   */
  unpermute(y: Tensor, slotToRow: Tensor, topkWeights: Tensor, shared: Tensor | null): Tensor;
  /**
   * Optional small-batch path (decode): the whole block for a few tokens in a few launches, with
   * no permutation (see {@link MoeSmallBatchOps}).
   */
  readonly smallBatch?: MoeSmallBatchOps;
}

/** The weights of one MoE block, as the small-batch path takes them. */
export interface MoeLayerWeights {
  /** [E, H] the router (`mlp.gate.weight`). */
  router: Tensor;
  /** f32 [E] or null (required iff the rule has a correction bias). */
  correctionBias: Tensor | null;
  /** [E, 2I, H] gate rows first. */
  gateUp: Tensor;
  /** [E, H, I]. */
  down: Tensor;
  /** The shared experts' fused gate_up [2Is, H] and down [H, Is], or null (no shared experts). */
  shared: { gateUp: Tensor; down: Tensor } | null;
}

/**
 * A MoE block for T <= maxTokens tokens without the permutation (the CUDA backend: router GEMV +
 * routing, gate_up + silu_and_mul and down GEMVs over the distinct experts hit, and a
 * deterministic weighted sum over each token's slots; native/kernels/moe_decode.h):
 *   forward(x, w, rule) = unpermute(down(siluAndMul(gateUp(permute(x)))), weights) + shared(x)
 * with logits = linear(x, router, null, "f32") routed by the rule, equal to the op sequence of
 * {@link BackendMoeOps} within bf16 tolerance (its dot products sum in another order), and equal
 * bit for bit for a token whatever the other tokens of the batch (T <= maxTokens).
 */
export interface MoeSmallBatchOps {
  /** Largest T forward takes. */
  readonly maxTokens: number;
  /**
   * Whether forward takes this block (dtypes and sizes within the kernels' limits); reserves what
   * forward needs. Called at load (never while a graph is being captured).
   */
  prepare(w: MoeLayerWeights, rule: MoeRoutingRule): boolean;
  /** x: [T, H], 1 <= T <= maxTokens -> [T, H]. @throws Error on shapes, dtypes or an unprepared block. */
  forward(x: Tensor, w: MoeLayerWeights, rule: MoeRoutingRule): Tensor;
}

/** Dimensions of one MLA attention layer (HF DeepseekV3Config names; config/mla_config.ts). */
export interface MlaDims {
  /** Query heads Hq (`num_attention_heads`). */
  numHeads: number;
  /** N: per-head q/k dims without RoPE (`qk_nope_head_dim`). */
  qkNopeHeadDim: number;
  /** R: per-head q dims with RoPE, and the shared rotary key dims (`qk_rope_head_dim`). */
  qkRopeHeadDim: number;
  /** Vd: per-head value dims (`v_head_dim`). */
  vHeadDim: number;
  /** C: rank of the compressed KV (`kv_lora_rank`); a latent row is C + R elements. */
  kvLoraRank: number;
  /** Softmax scale (MlaConfig.softmaxScale: (N + R)^-0.5, YaRN mscale^2 for DeepSeek). */
  softmaxScale: number;
}

/**
 * The heads a strided rotary call rotates: for head h in [0, count), the R = cosSin-width columns
 * starting at offset + h * stride of every row (e.g. the rope part of each query head of
 * q_b_proj's output: offset N, stride N + R, count Hq; a latent row's k_pe: offset 0, count 1).
 */
export interface RotarySpan {
  offset: number;
  stride: number;
  count: number;
}

/** Scales of the DSA indexer's logits (HF DeepseekV32Indexer). */
export interface IndexerScales {
  /** On each q.k dot product before the ReLU: index_head_dim^-0.5 (`softmax_scale`). */
  softmaxScale: number;
  /** On each head weight (weights_proj output): index_n_heads^-0.5. */
  headWeightScale: number;
}

/**
 * Multi-head latent attention (DeepSeek-V3, arXiv 2412.19437 §2.1) and the DeepSeek sparse
 * attention lightning indexer (DeepSeek-V3.2, GLM-5) as backend ops. One MLA layer runs, with x
 * its normed input [T, H] and A the fused down projection [q_a | kv_a | wk | weights_proj]
 * (models/attention_mla.ts; q_proj instead of q_a when there is no q-LoRA):
 *   a     = linear(x, A)                                   // [T, qL + C + R (+ Di + Hi)]
 *   qr    = rmsNorm(mla.sliceColumns(a, 0, qL), q_a_layernorm)          // [T, qL]
 *   q     = linear(qr, q_b_proj)                          // [T, Hq * (N + R)]
 *   mla.rotaryStrided(q, {offset N, stride N + R, count Hq}, ...)
 *   kvc   = rmsNorm(mla.sliceColumns(a, qL, C), kv_a_layernorm)           // [T, C]
 *   kpe   = mla.sliceColumns(a, qL + C, R); mla.rotaryStrided(kpe, {0, R, 1}, ...)
 *   mla.writeRows(kvc, latentCache, 0, slotMapping); mla.writeRows(kpe, latentCache, C, ...)
 *   DSA: iq = linear(qr, wq_b); mla.rotaryStrided(iq, {0, Di, Hi}, ...) (first R dims of each
 *        head); ik = mla.layerNorm(mla.sliceColumns(a, qL + C + R, Di), k_norm); rotary on
 *        ik's first R; mla.writeRows(ik, indexKeyCache, 0, ...);
 *        logits = mla.indexerLogits(iq, mla.sliceColumns(a, ..., Hi), indexKeyCache, ...);
 *        sel = mla.topkIndices(logits, positions, index_topk)            // [T, K]
 *   o     = mla.attention(q, latentCache, kv_b_proj, meta, dims, sel or null)  // [T, Hq * Vd]
 *   out   = linear(o, o_proj)
 * Every shape depends on T, the model and fixed arguments (`width`, `k`) only, and every count
 * lives in device tensors (positions, metadata), so a step needs no host round trip and the
 * sequence can be captured in a CUDA graph. Each token's result depends only on its own row
 * and its request's cache rows (batch invariance).
 *
 * Caches: the latent cache of a layer is [numBlocks, blockSize, C + R] (one row per token: the
 * normed compressed KV, then the rotated k_pe), the indexer key cache of a full DSA layer
 * [numBlocks, blockSize, Di]; both are indexed by the step's block tables and slot mapping, the
 * same block ids for both (config/mla_config.ts mlaKvCacheGeometry).
 */
export interface BackendMlaOps {
  /**
   * A zeroed paged row cache [numBlocks, blockSize, rowWidth] (a latent or indexer key group of
   * one layer) that lives until free()/dispose().
   * @throws Error when dtype is not one the backend stores caches in.
   */
  allocatePagedRows(numBlocks: number, blockSize: number, rowWidth: number, dtype: DType): Tensor;
  /** out = x[:, start : start + width]. x: [T, W] -> [T, width]. */
  sliceColumns(x: Tensor, start: number, width: number): Tensor;
  /**
   * LayerNorm per row (torch.nn.LayerNorm, biased variance):
   *   (x - mean) / sqrt(var + eps) * weight + bias. x: [T, n]; weight, bias: [n] -> [T, n].
   */
  layerNorm(x: Tensor, weight: Tensor, bias: Tensor, eps: number): Tensor;
  /**
   * In place RoPE of the heads `span` names (R = cosSinCache's width, even): per row t, angle_i =
   * positions[t] * invFreq_i (cos/sin from the table, [maxPositions, R], cos in [:, :R/2]):
   * - interleaved (DeepSeek's layout, `rope_interleave`): pairs (x[2i], x[2i+1]) rotated in
   *   place; HF's apply_rotary_pos_emb_interleave computes the same rotation but stores the
   *   rotated evens first and the odds after them, a permutation applied to q and k alike that
   *   leaves every q.k product unchanged;
   * - half (NeoX, rotate_half): pairs (x[i], x[i + R/2]).
   * Rotation: (a, b) -> (a cos - b sin, b cos + a sin).
   * x: [T, W]; positions: i32 [T]. @throws Error for a position outside the table or a span
   * outside the row.
   */
  rotaryStrided(
    x: Tensor,
    span: RotarySpan,
    positions: Tensor,
    cosSinCache: Tensor,
    interleaved: boolean,
  ): void;
  /**
   * cache[slot, dstColumn : dstColumn + W] = src[t] for each token t with slot = slotMapping[t]
   * (block slot / blockSize, offset slot % blockSize; PAD_SLOT_ID skipped): vLLM's
   * concat_and_cache_mla as two calls (the normed compressed KV at column 0, k_pe at C), and the
   * indexer key write. src: [T, W]; cache: [numBlocks, blockSize, rowWidth] with
   * dstColumn + W <= rowWidth; slotMapping: i32 [T]. @throws Error for a slot outside the cache.
   */
  writeRows(src: Tensor, cache: Tensor, dstColumn: number, slotMapping: Tensor): void;
  /**
   * Causal MLA attention over each request's cached latent rows (this step's rows written first).
   * Query token t of request r sits at position p = seqLen_r - queryLen_r + j and attends to the
   * positions P_t: [0, p] (topkIndices null: dense), or the non-negative entries of
   * topkIndices[t] (DSA; each <= p, no repeats, e.g. mla.topkIndices' output; -1 = no entry).
   * Position i reads latent row l_i = [c_i (C) | kpe_i (R)] at block blockTables[r, i / bs],
   * offset i % bs. With W_UK[h] = kv_b_proj rows [h(N+Vd), h(N+Vd) + N) and W_UV[h] the next Vd
   * rows, per q head h:
   *   s_i = softmaxScale * (q_nope[t,h] . (W_UK[h] c_i) + q_pe[t,h] . kpe_i),  i in P_t
   *   out[t, h] = sum_i softmax(s)_i * (W_UV[h] c_i)
   * The two forms of it compute the same values: expanded (k_nope and v per row, as HF; the CPU
   * backend, and what a prefill kernel does) and absorbed (q_lat[h] = W_UK[h]^T q_nope[t,h],
   * s_i = scale * (q_lat . c_i + q_pe . kpe_i), o_lat = sum_i p_i c_i, out = W_UV[h] o_lat:
   * attention as MQA over C + R wide rows, what a decode kernel does; kernels/mla.ts has both).
   * q: [T, Hq * (N + R)] after RoPE; latentCache: [numBlocks, blockSize, C + R];
   * kvBProj: [Hq * (N + Vd), C]; topkIndices: i32 [T, K] or null -> [T, Hq * Vd].
   * @throws Error on inconsistent metadata or a selected position outside [0, p].
   */
  attention(
    q: Tensor,
    latentCache: Tensor,
    kvBProj: Tensor,
    meta: AttentionMetadata,
    dims: MlaDims,
    blockSize: number,
    topkIndices: Tensor | null,
  ): Tensor;
  /**
   * DSA indexer logits over the paged index keys (HF DeepseekV32Indexer, without its fp8 and
   * Hadamard steps, which HF also skips: the Hadamard transform preserves dot products). Query
   * token t of request r at position p, for each position i <= p with key k_i (indexKeyCache at
   * blockTables[r, i / bs], offset i % bs):
   *   logits[t, i] = sum_h (headWeights[t, h] * headWeightScale) * relu(softmaxScale * (q[t, h] . k_i))
   * and -inf for i > p (and every i >= width). q: [T, Hi * Di] after RoPE; headWeights: [T, Hi]
   * (weights_proj output); indexKeyCache: [numBlocks, blockSize, Di]; width: columns of the
   * result, >= the step's longest seqLen (a graph passes a fixed width, e.g. max_model_len)
   * -> f32 [T, width]. A backend may fuse this op with topkIndices (and never materialise the
   * logits) as long as the selection is the same. @throws Error when width < meta.maxSeqLen.
   */
  indexerLogits(
    q: Tensor,
    headWeights: Tensor,
    indexKeyCache: Tensor,
    meta: AttentionMetadata,
    blockSize: number,
    scales: IndexerScales,
    width: number,
  ): Tensor;
  /**
   * Causal top-k per row: among the candidates i in [0, positions[t]] of row t, the
   * min(k, positions[t] + 1) largest logits[t, i], written in ascending i, the rest of the row
   * -1. Order: larger value first; NaN counts as -inf and -0 as +0; ties: the lower position
   * first (the rule of the Quest selector and its CUDA radix select, hisparse_select.cu).
   * logits: f32 [T, width] with width > max positions; positions: i32 [T] -> i32 [T, k].
   */
  topkIndices(logits: Tensor, positions: Tensor, k: number): Tensor;
}
