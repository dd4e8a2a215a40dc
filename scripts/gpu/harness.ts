/**
 * Model-level helpers for the GPU check scripts: load a checkpoint on a backend and compute the
 * last-position logits of one prompt through the same input preparation as the ModelRunner.
 */
import { DensePagedAttention } from "../../src/attention/backend.js";
import type { Backend, Tensor } from "../../src/backends/backend.js";
import { loadModelConfig, type ModelConfig } from "../../src/config/model_config.js";
import { newExtensionData } from "../../src/core/extension_data.js";
import { asBlockId, asRequestId } from "../../src/core/ids.js";
import { makeSamplingParams } from "../../src/core/sampling_params.js";
import type { SchedulerOutput } from "../../src/core/sched/output.js";
import { LlamaForCausalLM } from "../../src/models/llama.js";
import { SafetensorsCheckpoint } from "../../src/models/safetensors.js";
import {
  type CachedRequestState,
  prepareInputs,
  stageAttentionMetadata,
} from "../../src/worker/input_batch.js";

/** A loaded model with a KV cache big enough for one prompt of `maxLen` tokens. */
export interface Harness {
  config: ModelConfig;
  model: LlamaForCausalLM;
  kvCaches: Tensor[];
  blockSize: number;
  dispose(): void;
}

export function loadHarness(backend: Backend, dir: string, maxLen: number, blockSize = 16): Harness {
  const config = loadModelConfig(dir);
  const src = SafetensorsCheckpoint.open(dir);
  const model = LlamaForCausalLM.load(config, src, backend, Math.max(maxLen, 16));
  src.close();
  const kvCaches = backend.allocateKvCache({
    numLayers: config.numHiddenLayers,
    numBlocks: Math.ceil(maxLen / blockSize),
    blockSize,
    numKvHeads: config.numKeyValueHeads,
    headDim: config.headDim,
    dtype: backend.activationDtype,
  });
  return {
    config,
    model,
    kvCaches,
    blockSize,
    dispose: () => {
      for (const t of kvCaches) backend.free(t);
      model.dispose();
    },
  };
}

/** Last-position logits (f32 [V]) of a one-shot prefill of `ids`. */
export function lastLogits(backend: Backend, h: Harness, ids: number[]): Float32Array {
  const reqId = asRequestId("harness");
  const numBlocks = Math.ceil(ids.length / h.blockSize);
  const state: CachedRequestState = {
    reqId,
    promptTokenIds: ids,
    outputTokenIds: [],
    samplingParams: makeSamplingParams(),
    blockIds: Array.from({ length: numBlocks }, (_, i) => asBlockId(numBlocks - 1 - i)),
    numComputedTokens: 0,
  };
  const so: SchedulerOutput = {
    scheduledNewReqs: [],
    scheduledCachedReqs: { reqIds: [], resumedFromPreemption: [], newBlockIds: [], numComputedTokens: [] },
    numScheduledTokens: new Map([[reqId, ids.length]]),
    totalNumScheduledTokens: ids.length,
    preemptedReqIds: new Set(),
    finishedReqIds: new Set(),
    extensions: newExtensionData(),
  };
  const inp = prepareInputs(new Map([[reqId, state]]), so, h.blockSize);
  backend.resetWorkspace();
  const T = ids.length;
  const meta = stageAttentionMetadata(backend, inp);
  const attention = new DensePagedAttention(backend, h.model.layout, h.blockSize);
  const logits = h.model.forward(
    backend.stage(inp.inputIds, [T], "i32"),
    backend.stage(inp.positions, [T], "i32"),
    { meta, attention, kvCaches: h.kvCaches },
    backend.stage(inp.logitsIndices, [1], "i32"),
  );
  return backend.toHost(logits) as Float32Array;
}

/** ‖a − b‖ / ‖b‖ (METHOD.md "Correct first"); NaN anywhere gives Infinity. */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    const d = a[i]! - b[i]!;
    num += d * d;
    den += b[i]! * b[i]!;
  }
  const r = Math.sqrt(num / den);
  return Number.isFinite(r) ? r : Number.POSITIVE_INFINITY;
}

/** Index of the largest value (lowest index on ties). */
export function argmax(a: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[best]!) best = i;
  return best;
}
