/** What a tensor is, which decides its `--load-format dummy` values (dummy.ts). */
export type DummyTensorKind = "matrix" | "bias" | "norm";

/**
 * Name, shape and kind of one HF tensor of a model (the lists of dummy.ts llamaWeightSpecs and
 * of the blocks that add their own: moe_mlp.ts, attention_mla.ts, dsa_indexer.ts). Its own file,
 * so that the blocks and dummy.ts import it without an import cycle.
 */
export interface WeightSpec {
  name: string;
  shape: number[];
  kind: DummyTensorKind;
}
