/**
 * Tensor parallelism settings and the shape rules of vLLM's Megatron layout
 * (vllm/config/parallel.py ParallelConfig, vllm/model_executor/layers/linear.py): which models a
 * `--tensor-parallel-size` can split, and which slice of each dimension one rank holds.
 */
import { FAMILY_TRAITS } from "../config/family_traits.js";
import type { ModelConfig } from "../config/model_config.js";
import { kvHeadsPerRank } from "./kv/kv_cache_interface.js";

/** One rank of a tensor-parallel group. */
export interface TensorParallelRank {
  /** 0-based rank; rank 0 is the driver (its sampled tokens are the engine's). */
  rank: number;
  /** Ranks in the group (`--tensor-parallel-size`). */
  size: number;
}

/**
 * Why `config` cannot be split over `tp` ranks (empty when it can, always for tp = 1): the
 * family's sharding rule (FamilyTraits.tensorParallel: MoE and MLA families have none yet), then
 * every split dimension must divide: attention heads, KV heads (split, or replicated when fewer
 * than the ranks, core/kv kvHeadsPerRank) and the MLP's intermediate size.
 */
export function tensorParallelReasons(config: ModelConfig, tp: number): string[] {
  if (tp === 1) return [];
  const refusal = FAMILY_TRAITS[config.family].tensorParallel;
  if (refusal !== undefined) return [`--tensor-parallel-size ${tp}: ${refusal}`];
  const r: string[] = [];
  const { numAttentionHeads: Hq, numKeyValueHeads: Hkv, intermediateSize: I } = config;
  if (Hq % tp !== 0)
    r.push(`the model's ${Hq} attention heads cannot be split over ${tp} ranks (not a multiple)`);
  try {
    kvHeadsPerRank(Hkv, tp);
  } catch (e) {
    r.push(`the model's ${(e as Error).message}`);
  }
  if (I % tp !== 0)
    r.push(`the model's intermediate_size ${I} cannot be split over ${tp} ranks (not a multiple)`);
  return r;
}

/** The slice [start, start + count) of a dimension of `total` one rank holds (total divisible by size). */
export function shardOf(total: number, p: TensorParallelRank): { start: number; count: number } {
  const count = total / p.size;
  return { start: p.rank * count, count };
}

/**
 * The KV heads one rank holds: heads [start, start + count), count = kvHeadsPerRank; when there
 * are fewer KV heads than ranks each rank holds the one head its query heads read
 * (head floor(rank * numKvHeads / size)), replicated on size / numKvHeads ranks.
 */
export function kvHeadShard(numKvHeads: number, p: TensorParallelRank): { start: number; count: number } {
  const count = kvHeadsPerRank(numKvHeads, p.size);
  if (numKvHeads >= p.size) return { start: p.rank * count, count };
  return { start: Math.floor((p.rank * numKvHeads) / p.size), count: 1 };
}

/**
 * Whether the vocabulary is split over the ranks (vocab-parallel embedding and LM head, logits
 * gathered): when it divides evenly; else both tables are replicated on every rank (vLLM pads
 * the vocabulary instead; a replicated table costs vocab x hidden per rank, no padding rows).
 */
export function vocabIsSharded(vocabSize: number, tp: number): boolean {
  return vocabSize % tp === 0;
}
