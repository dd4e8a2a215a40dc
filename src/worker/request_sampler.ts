import type { Backend, DeviceSamplingRows, Tensor } from "../backends/backend.js";
import type { RequestId } from "../core/ids.js";
import type { TokenLogprobs } from "../core/sched/output.js";
import { Generator } from "./generator.js";
import type { CachedRequestState } from "./input_batch.js";
import { logSoftmax, needsHostSampling, Sampler, type SamplerRow, tokenLogprobs } from "./sampler.js";

/**
 * Pads device sampling rows to `B` logits rows (a CUDA graph's padded batch) with greedy rows,
 * which draw no random numbers and whose ids are dropped.
 */
function padRows(r: DeviceSamplingRows, B: number): DeviceSamplingRows {
  const n = r.temperature.length;
  if (B <= n) return r;
  const grow = <T extends Float32Array | Int32Array>(a: T, make: (k: number) => T): T => {
    const out = make(B);
    out.set(a);
    return out;
  };
  return {
    temperature: grow(r.temperature, (k) => new Float32Array(k)),
    topK: grow(r.topK, (k) => new Int32Array(k)),
    topP: grow(r.topP, (k) => new Float32Array(k).fill(1)),
    minP: grow(r.minP, (k) => new Float32Array(k)),
    uniform: grow(r.uniform, (k) => new Float32Array(k)),
  };
}

/** Sampled ids and optional logprobs, one entry per logits row. */
export interface SampledRows {
  tokenIds: Int32Array;
  logprobs: (TokenLogprobs | null)[];
}

/**
 * Samples one token per logits row for the ModelRunner: keeps each seeded request's generator,
 * and uses the backend's device sampler when every row allows it (no penalties, min_tokens or
 * logprobs), else reads the logits back and uses the host {@link Sampler}. Both paths draw the
 * same uniforms, so they pick the same tokens.
 */
export class RequestSampler {
  private readonly sampler: Sampler;
  private readonly generators = new Map<RequestId, Generator>();
  private scratch = new Float64Array(0);

  constructor(
    private readonly backend: Backend,
    private readonly vocabSize: number,
    private readonly eosTokenIds: readonly number[],
    engineSeed: number,
  ) {
    this.sampler = new Sampler(engineSeed);
  }

  /** Drops a finished request's generator. */
  forget(reqId: RequestId): void {
    this.generators.delete(reqId);
  }

  /**
   * Samples one token for each request of `rows` from logits [rows.length, V].
   * @throws Error from the backend when the logits tensor is smaller than rows × V.
   */
  sample(logits: Tensor, rows: readonly CachedRequestState[]): SampledRows {
    const samplerRows = rows.map((r) => this.samplerRow(r));
    const forced = rows.some((r) => r.samplingParams.forcedTokenIds !== null);
    if (this.backend.sampleOnDevice !== undefined && !forced && !samplerRows.some(needsHostSampling)) {
      const ids = this.backend.sampleOnDevice(
        logits,
        padRows(this.sampler.deviceRows(samplerRows), logits.shape[0]!),
      );
      if (ids !== null) return { tokenIds: ids.slice(0, rows.length), logprobs: rows.map(() => null) };
    }
    const host = this.backend.toHost(logits) as Float32Array;
    const out = this.sampler.sample(host, this.vocabSize, samplerRows);
    if (forced) this.applyForcedTokens(host, rows, out.sampledTokenIds, out.logprobs);
    return { tokenIds: out.sampledTokenIds, logprobs: out.logprobs };
  }

  /**
   * Teacher forcing (SamplingParams.forcedTokenIds): replaces the sampled token of each forced
   * row by its next forced token and reports that token's logprob under the raw logits.
   */
  private applyForcedTokens(
    logits: Float32Array,
    rows: readonly CachedRequestState[],
    tokenIds: Int32Array,
    logprobs: (TokenLogprobs | null)[],
  ): void {
    const V = this.vocabSize;
    for (let b = 0; b < rows.length; b++) {
      const r = rows[b]!;
      const forcedIds = r.samplingParams.forcedTokenIds;
      if (forcedIds === null) continue;
      const token = forcedIds[r.outputTokenIds.length];
      if (token === undefined) throw new Error(`request ${r.reqId} ran past its forced tokens`);
      if (this.scratch.length < V) this.scratch = new Float64Array(V);
      const lp = logSoftmax(logits.subarray(b * V, (b + 1) * V), this.scratch);
      tokenIds[b] = token;
      logprobs[b] = tokenLogprobs(lp, V, token, r.samplingParams.logprobs ?? 0);
    }
  }

  private samplerRow(r: CachedRequestState): SamplerRow {
    const seed = r.samplingParams.seed;
    let generator: Generator | null = null;
    if (seed !== null) {
      generator = this.generators.get(r.reqId) ?? new Generator(seed);
      this.generators.set(r.reqId, generator);
    }
    return {
      params: r.samplingParams,
      promptTokenIds: r.promptTokenIds,
      outputTokenIds: r.outputTokenIds,
      eosTokenIds: this.eosTokenIds,
      generator,
    };
  }
}
