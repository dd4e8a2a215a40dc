/**
 * The text of `hisparse plan`: every term of the arithmetic with its value, so the figures can
 * be checked by hand.
 */
import { DIGEST_ELEMENT_BYTES, type KVCacheGroupSpec } from "../core/kv/kv_cache_interface.js";
import type { DensePlan, HiSparsePlan, HiSparsePoolPlan, PlanInput } from "./plan.js";

const GIB = 2 ** 30;

/** Bytes as "12.34 GiB" / "1.50 MiB" / "512 KiB" / "96 B". */
export function formatBytes(b: number): string {
  if (b >= GIB) return `${(b / GIB).toFixed(2)} GiB`;
  if (b >= 2 ** 20) return `${(b / 2 ** 20).toFixed(2)} MiB`;
  if (b >= 1024) return `${(b / 1024).toFixed(2)} KiB`;
  return `${b} B`;
}

/**
 * A parameter count in the unit that fits: "8.03 B", "5.18 M", "3.20 K", or the count itself
 * below a thousand ("512"), so a tiny model's figure never reads "0.00 B".
 */
export function formatParameterCount(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(2)} K`;
  return `${Math.round(n)}`;
}

/** An integer with thousands separators ("131,072"). */
export function formatInt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

/** Where the KV budget came from (GPU size minus weights and reserve, or given). */
export interface BudgetSource {
  gpuMemBytes?: number;
  gpuMemoryUtilization?: number;
  weightBytes?: number;
  numParameters?: number;
  weightElementBytes?: number;
  reserveBytes?: number;
  /** Ranks the weights are split over (absent: 1, the whole model on one GPU). */
  tensorParallelSize?: number;
  /** With ranks: the model's weights by placement (config/parameter_count.ts WeightSplit), parameters. */
  weightSplit?: { routedExperts: number; sharded: number; replicated: number };
}

/** "− weights N parameters × e B = X", with one rank's share "(routed + sharded) / tp + replicated". */
function weightsLine(s: BudgetSource): string {
  const w = s.weightSplit;
  const total = `${formatInt(s.numParameters ?? 0)} parameters × ${s.weightElementBytes} B = ${formatBytes(s.weightBytes ?? 0)}`;
  if (w === undefined || s.tensorParallelSize === undefined) return `  − weights ${total}`;
  return (
    `  − weights per rank = ceil((routed experts ${formatInt(w.routedExperts)} + TP-sharded ${formatInt(w.sharded)}) / ${s.tensorParallelSize})` +
    ` + replicated ${formatInt(w.replicated)} = ${total}`
  );
}

/** Lines of the budget section. */
export function budgetLines(kvBudgetBytes: number, s: BudgetSource): string[] {
  if (s.gpuMemBytes === undefined) return [`KV cache budget (given)        ${formatBytes(kvBudgetBytes)}`];
  return [
    "GPU memory",
    `  ${formatBytes(s.gpuMemBytes)} × ${s.gpuMemoryUtilization} utilization = ${formatBytes(s.gpuMemBytes * (s.gpuMemoryUtilization ?? 1))}`,
    weightsLine(s),
    `  − reserve (activations, CUDA graphs, allocator) = ${formatBytes(s.reserveBytes ?? 0)}`,
    `  = KV cache budget ${formatBytes(kvBudgetBytes)} (${formatInt(kvBudgetBytes)} B)`,
  ];
}

/**
 * One group's bytes per token, with its row: "2 (K, V) × 32 layers × 8 KV heads × 128 head_dim
 * × 2 B" (GQA), "MLA latent (512 + 64) × 1 B = 576 B/layer × 78 layers" (MLA),
 * "indexer keys 128 × 1 B = 128 B/layer × 78 layers" (DSA).
 */
export function groupTokenTerm(g: KVCacheGroupSpec): string {
  const s = g.spec;
  const L = g.layers.length;
  const scale = (perToken: number) =>
    s.bytesPerToken > perToken ? ` + ${s.bytesPerToken - perToken} B scales` : "";
  switch (s.kind) {
    case "full_attention":
      return `2 (K, V) × ${L} layers × ${s.numKvHeads} KV heads × ${s.headDim} head_dim × ${s.elementBytes} B${scale(2 * s.numKvHeads * s.headDim * s.elementBytes)}`;
    case "mla_attention":
      return `MLA latent (${s.kvLoraRank} + ${s.qkRopeHeadDim}) × ${s.elementBytes} B${scale((s.kvLoraRank + s.qkRopeHeadDim) * s.elementBytes)} = ${formatInt(s.bytesPerToken)} B/layer × ${L} layers`;
    case "indexer_key":
      return `indexer keys ${s.indexHeadDim} × ${s.elementBytes} B${scale(s.indexHeadDim * s.elementBytes)} = ${formatInt(s.bytesPerToken)} B/layer × ${L} layers`;
    case "page_digest":
      return `${g.name} 0 B (per page: ${L} layers × ${formatInt(s.bytesPerPage)} B)`;
  }
}

/** Digest element types by their bytes, from core DIGEST_ELEMENT_BYTES (CUDA's dtypes; f32 on the CPU). */
const DIGEST_DTYPE_BY_BYTES: ReadonlyMap<number, string> = new Map([
  ...Object.entries(DIGEST_ELEMENT_BYTES.cuda).map(([dtype, bytes]) => [bytes, dtype] as const),
  [DIGEST_ELEMENT_BYTES.cpu, "f32"],
]);

/**
 * One group's bytes per page: "mla latent 76 layers × 16 tokens × 576 B", "quest digest 30 layers
 * × 8,192 B (4 × min/max of 4 tokens, fp8)".
 */
function groupPageTerm(g: KVCacheGroupSpec, blockSize: number): string {
  const s = g.spec;
  const L = g.layers.length;
  if (s.kind === "page_digest") {
    const perPage = s.bytesPerPage / (2 * s.numKvHeads * s.headDim * s.elementBytes); // sub-page digests
    const dtype = DIGEST_DTYPE_BY_BYTES.get(s.elementBytes) ?? `${s.elementBytes} B`;
    return `${g.name} ${L} layers × ${formatInt(s.bytesPerPage)} B (${perPage} × min/max of ${blockSize / perPage} tokens, ${dtype})`;
  }
  if (s.bytesPerToken === 0) return `${g.name} ${L} layers × ${formatInt(s.bytesPerPage)} B`;
  const page = s.bytesPerPage > 0 ? ` + ${formatInt(s.bytesPerPage)} B` : "";
  return `${g.name} ${L} layers × (${blockSize} tokens × ${formatInt(s.bytesPerToken)} B${page})`;
}

/** " (one rank of TP 8)" when the plan is one rank's, else "". */
function rankNote(p: PlanInput): string {
  const tp = p.tensorParallelSize ?? 1;
  return tp > 1 ? `, per rank of --tensor-parallel-size ${tp}` : "";
}

/** Lines of the dense section. */
export function denseLines(p: PlanInput, d: DensePlan): string[] {
  const terms = d.groups.map(groupTokenTerm);
  return [
    `Dense (every page of every request on the GPU${rankNote(p)})`,
    `  KV per token   = ${terms.join(" + ")} = ${formatInt(d.kvBytesPerToken)} B`,
    `  KV per block   = ${p.blockSize} tokens × ${formatInt(d.kvBytesPerToken)} B = ${formatBytes(d.kvBytesPerBlock)}`,
    `  GPU blocks     = floor(${formatInt(p.kvBudgetBytes)} B / ${formatInt(d.kvBytesPerBlock)} B) = ${formatInt(d.numGpuBlocks)}`,
    `  per request    = ceil(${formatInt(p.contextTokens)} / ${p.blockSize}) = ${formatInt(d.pagesPerRequest)} blocks = ${formatBytes(d.pagesPerRequest * d.kvBytesPerBlock)}`,
    `  max requests   = floor(${formatInt(d.numGpuBlocks)} / ${formatInt(d.pagesPerRequest)}) = ${formatInt(d.maxConcurrent)}` +
      `   (without paging: floor(budget / (${formatInt(p.contextTokens)} × ${formatInt(d.kvBytesPerToken)} B)) = ${formatInt(d.maxConcurrentUnpaged)})`,
  ];
}

/**
 * One host pool's lines of a HiSparse section.
 * @param perPage what each host page keeps on the GPU (DSA: "indexer keys").
 */
export function poolLines(
  title: string,
  pool: HiSparsePoolPlan,
  h: HiSparsePlan,
  suffix: string,
  how: string[] = [],
  perPage = "dense layers + digests",
): string[] {
  const lines = [
    title,
    ...how,
    `    host pool      ${formatBytes(pool.hostPoolBytes)} = ${formatInt(pool.numHostBlocks)} pages; their ${perPage} on the GPU: ${formatBytes(pool.numHostBlocks * h.deviceBytesPerHostBlock)}`,
    `    GPU blocks     = floor((budget − ${formatBytes(pool.numHostBlocks * h.deviceBytesPerHostBlock)}) / ${formatBytes(h.mainBytesPerBlock)}) = ${formatInt(pool.numGpuBlocks)}`,
    `    by host pool   = floor(${formatInt(pool.numHostBlocks)} / ${formatInt(h.pagesPerRequest)}) = ${formatInt(pool.maxByHost)}`,
    pool.numGpuBlocks >= pool.prefillDeviceBlocks
      ? `    by GPU pool    = floor((${formatInt(pool.numGpuBlocks)} − ${formatInt(pool.prefillDeviceBlocks)} of one ${pool.prefillDeviceBlocks < h.pagesPerRequest ? "streaming" : "dense"} prefill) / ${formatInt(h.devicePagesPerRequest)}) + 1 = ${formatInt(pool.maxByDevice)}`
      : `    by GPU pool    = 0 (${formatInt(pool.numGpuBlocks)} blocks < the ${formatInt(pool.prefillDeviceBlocks)} pages of one dense prefill)`,
  ];
  for (const r of pool.refusals) lines.push(`    the engine would refuse this: ${r}`);
  lines.push(`    max requests   = ${formatInt(pool.maxConcurrent)}${suffix}`);
  return lines;
}

/** Lines of the HiSparse section. */
export function hisparseLines(p: PlanInput, h: HiSparsePlan, dense: DensePlan): string[] {
  const c = p.hisparse;
  const ratio = (n: number) =>
    dense.maxConcurrent > 0 && n > 0 ? ` (${(n / dense.maxConcurrent).toFixed(1)}× dense)` : "";
  const given =
    c.hostPoolBytes === null
      ? "  with the default host pool (2 × the GPU pool's pages; set --host-pool-gib):"
      : "  with --host-pool-gib:";
  const offloadable = h.groups.filter((g) => g.offloadable).map((g) => groupPageTerm(g, p.blockSize));
  const resident = h.groups.filter((g) => !g.offloadable).map((g) => groupPageTerm(g, p.blockSize));
  return [
    `HiSparse (topk ${c.topk}, hot buffer ${c.deviceBufferTokens}, sink ${c.sinkTokens}, window ${c.windowTokens}, dense layers [${c.denseLayers.join(", ")}]${rankNote(p)})`,
    `  sparse layers  = ${p.model.numHiddenLayers} − ${h.numDenseLayers} dense = ${h.numSparseLayers}`,
    `  GPU block      = ${offloadable.join(" + ")} = ${formatBytes(h.mainBytesPerBlock)}`,
    c.hostKvCacheDtype === "fp8"
      ? `  host page      = the same sparse-layer rows in fp8 (host_kv_cache_dtype, 1 B an element) = ${formatBytes(h.hostBytesPerBlock)}`
      : `  host page      = the same sparse-layer rows = ${formatBytes(h.hostBytesPerBlock)}`,
    `  GPU per page   = ${resident.length > 0 ? resident.join(" + ") : "0"} = ${formatBytes(h.deviceBytesPerHostBlock)} (digests ${formatBytes(h.digestBytesPerPage)})`,
    `  per request    = ${formatInt(h.pagesPerRequest)} pages; on the GPU ceil((${c.sinkTokens} + ${c.windowTokens} + ${c.deviceBufferTokens}) / ${p.blockSize}) + 1 = ${formatInt(h.devicePagesPerRequest)} blocks`,
    `                 = ${formatInt(h.devicePagesPerRequest)} × ${formatBytes(h.mainBytesPerBlock)} + ${formatInt(h.pagesPerRequest)} × ${formatBytes(h.deviceBytesPerHostBlock)} = ${formatBytes(h.deviceBytesPerRequest)} of GPU memory (dense: ${formatBytes(dense.pagesPerRequest * dense.kvBytesPerBlock)})`,
    `  prefill        = all ${formatInt(h.pagesPerRequest)} pages in GPU blocks while a request prefills (dense attention; also a recompute after preemption),`,
    `                   one request at a time; it shrinks to ${formatInt(h.devicePagesPerRequest)} blocks when it decodes`,
    ...poolLines(given, h.given, h, ratio(h.given.maxConcurrent)),
    ...poolLines(
      `  with the best host pool for this context: --host-pool-gib ${(h.best.hostPoolBytes / GIB).toFixed(2)}`,
      h.best,
      h,
      ratio(h.best.maxConcurrent),
      bestLines(p, h),
    ),
    `  decode-only   = floor(${formatInt(p.kvBudgetBytes)} B / (${formatInt(h.pagesPerRequest)} × ${formatInt(h.deviceBytesPerHostBlock)} B + ${formatInt(h.devicePagesPerRequest)} × ${formatInt(h.mainBytesPerBlock)} B)) = ${formatInt(h.decodeOnly)}${ratio(h.decodeOnly)}`,
    "                  (no prefill on this GPU: a P/D decode instance, as SGLang HiSparse and vLLM's calculator count; not what this engine runs)",
  ];
}

/**
 * How the best host pool is found: the most N with N × (P × h + d × m) + (P − d) × m <= budget,
 * then N × P host pages, at least ceil(budget / (m + h)) (plan.ts HiSparsePlan.best).
 */
function bestLines(p: PlanInput, h: HiSparsePlan): string[] {
  const [P, d, m, hb] = [
    h.pagesPerRequest,
    h.devicePagesPerRequest,
    h.mainBytesPerBlock,
    h.deviceBytesPerHostBlock,
  ];
  return [
    `    N              = floor((${formatInt(p.kvBudgetBytes)} B − (${formatInt(P)} − ${formatInt(d)}) × ${formatInt(m)} B) / (${formatInt(P)} × ${formatInt(hb)} B + ${formatInt(d)} × ${formatInt(m)} B)) = ${formatInt(h.bestN)}`,
    `                   (N requests' host pages and sparse GPU blocks, plus one dense prefill's extra ${formatInt(P - d)} blocks)`,
    `    host pages     = max(${formatInt(h.bestN)} × ${formatInt(P)}, ceil(budget / (${formatInt(m)} B + ${formatInt(hb)} B)) = ${formatInt(h.bestMinHostBlocks)}) = ${formatInt(h.best.numHostBlocks)}`,
  ];
}
