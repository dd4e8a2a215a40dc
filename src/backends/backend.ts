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
import type { BackendMlaOps } from "./backend_mla.js";

export type { BackendMlaOps, IndexerScales, MlaDims, RotarySpan } from "./backend_mla.js";

/** Element types of tensors. "i32" is for ids, positions, slot mappings and block tables. */
export type DType = "f32" | "bf16" | "f16" | "i32";

/** Bytes per element of each dtype. */
export const DTYPE_BYTES: Record<DType, number> = { f32: 4, bf16: 2, f16: 2, i32: 4 };

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
   * about one layer's activations (e.g. one scope per decoder layer). Backends without a bump
   * workspace omit it.
   */
  workspaceScope?<T extends Tensor>(fn: () => T): T;
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
  /** out[t] = table[ids[t]]. ids: i32 [T]; table: [V, H] -> [T, H]. */
  embedding(ids: Tensor, table: Tensor): Tensor;
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
  /** out = silu(x[:, :I]) * x[:, I:]. x: [T, 2I] -> [T, I]. */
  siluAndMul(x: Tensor): Tensor;
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
   * Optional capability: multi-head latent attention and the DSA indexer ({@link BackendMlaOps},
   * backend_mla.ts).
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
   * Weighted sum of each token's expert rows, in slot order, then the shared-expert output:
   *   out[t] = (sum_j topkWeights[t, j] * y[slotToRow[t, j]]) + shared[t]
   * accumulated in fp32 (the CPU backend rounds each product and partial sum to f32, as HF's
   * index_add_ does); shared omitted when null. y: [P, H]; slotToRow: i32 [T, k]; topkWeights:
   * f32 [T, k]; shared: [T, H] or null -> [T, H].
   */
  unpermute(y: Tensor, slotToRow: Tensor, topkWeights: Tensor, shared: Tensor | null): Tensor;
}
