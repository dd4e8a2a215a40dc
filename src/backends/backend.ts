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

import type { LayerKvScales } from "../core/kv/kv_cache_scales.js";
import type { AttentionMetadata, KvCacheSpec, PerHeadBlockTables, QkvLayout } from "./attention_types.js";
import type { DeviceSamplingRows } from "./device_sampling.js";
import type { BackendGraphs } from "./graphs.js";
import type { BackendMlaOps } from "./mla_ops.js";
import type { BackendMoeOps } from "./moe_ops.js";
import type { DType, HostTensorData, MemoryInfo, Tensor, WeightFileRange } from "./tensor.js";
import type { WeightFill } from "./weight_fill.js";

// The contract's types live in their areas' files; re-exported here so that every module keeps
// importing the contract from backend.ts alone.
export type { AttentionMetadata, KvCacheSpec, PerHeadBlockTables, QkvLayout } from "./attention_types.js";
export type { DeviceSamplingRows } from "./device_sampling.js";
export type { BackendGraphs, GraphHandle } from "./graphs.js";
export type { BackendMlaOps, IndexerScales, MlaDims, RotarySpan, SpilledRows } from "./mla_ops.js";
export type {
  BackendMoeOps,
  MoeLayerWeights,
  MoePermutation,
  MoeRouting,
  MoeSmallBatchOps,
} from "./moe_ops.js";
export type { DType, HostTensorData, MemoryInfo, Tensor, WeightFileRange } from "./tensor.js";
export { DTYPE_BYTES } from "./tensor.js";
export type { WeightFill } from "./weight_fill.js";

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
   * The k/v scales an fp8 cache layer (from allocateKvCache) stores and reads with now: 1.0, or
   * with `calculateScales` the first batch's (core/kv/kv_cache_scales.ts); null for a cache that
   * is not fp8. The object is the backend's own: read it, do not change it.
   */
  kvCacheScales?(kvCache: Tensor): Readonly<LayerKvScales> | null;
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
