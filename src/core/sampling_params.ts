/**
 * Sampling parameters of one request, with vLLM's names and defaults
 * (vllm/sampling_params.py). Validated by {@link validateSamplingParams}; the HTTP layer maps
 * OpenAI fields onto these.
 */
export interface SamplingParams {
  /** Number of tokens to generate at most (>= 1). */
  maxTokens: number;
  /** Tokens that must be generated before EOS / stop tokens may end the request (>= 0). */
  minTokens: number;
  /** Softmax temperature; 0 means greedy (argmax). */
  temperature: number;
  /** Nucleus sampling mass in (0, 1]; 1 disables. */
  topP: number;
  /** Keep only the k most likely tokens; 0 or -1 disables. */
  topK: number;
  /** Drop tokens whose probability is below minP × the top probability; 0 disables. */
  minP: number;
  /** Seed of this request's own random generator; null draws from the engine's generator. */
  seed: number | null;
  /** Strings that end generation; the matched text is not included in the output. */
  stop: string[];
  /** Token ids that end generation (besides EOS unless ignoreEos). */
  stopTokenIds: number[];
  /** Keep generating past EOS until maxTokens. */
  ignoreEos: boolean;
  /** Multiplicative penalty for tokens already in the prompt or output (1 disables; CTRL paper). */
  repetitionPenalty: number;
  /** Additive penalty for tokens already in the output (OpenAI definition; 0 disables). */
  presencePenalty: number;
  /** Penalty × count of each token in the output (OpenAI definition; 0 disables). */
  frequencyPenalty: number;
  /** Number of top log-probabilities to return per generated token; null for none. */
  logprobs: number | null;
  /** Skip special tokens when detokenizing. */
  skipSpecialTokens: boolean;
  /**
   * hisparse extension for evaluation (not an OpenAI field): the tokens to emit, one per step,
   * instead of sampling ("teacher forcing"). Each step reports the forced token's logprob, so a
   * continuation is scored through the real decode path (sparse attention included). Generation
   * ends after the last forced token. null = sample normally.
   */
  forcedTokenIds: readonly number[] | null;
}

/** Largest finite 32-bit float (2^128 - 2^104): the samplers hold temperatures as f32. */
const F32_MAX = 3.4028234663852886e38;

/** Largest accepted `logprobs` (vLLM's default max_logprobs). */
export const MAX_LOGPROBS = 20;

/** vLLM-compatible defaults: greedy is NOT the default (temperature 1), as in vLLM. */
export function defaultSamplingParams(): SamplingParams {
  return {
    maxTokens: 16,
    minTokens: 0,
    temperature: 1.0,
    topP: 1.0,
    topK: 0,
    minP: 0.0,
    seed: null,
    stop: [],
    stopTokenIds: [],
    ignoreEos: false,
    repetitionPenalty: 1.0,
    presencePenalty: 0.0,
    frequencyPenalty: 0.0,
    logprobs: null,
    skipSpecialTokens: true,
    forcedTokenIds: null,
  };
}

/** Builds full parameters from a partial set, applying defaults. Does not validate. */
export function makeSamplingParams(p: Partial<SamplingParams> = {}): SamplingParams {
  return { ...defaultSamplingParams(), ...p };
}

/**
 * Checks the parameters; returns the list of reasons they are invalid (empty when valid).
 * Each reason names the field, as in vLLM's ValueError messages.
 */
export function validateSamplingParams(p: SamplingParams): string[] {
  const r: string[] = [];
  const isInt = (x: number) => Number.isInteger(x);
  const maxOk = isInt(p.maxTokens) && p.maxTokens >= 1;
  if (!maxOk) r.push(`max_tokens must be an integer >= 1, got ${p.maxTokens}`);
  if (!isInt(p.minTokens) || p.minTokens < 0)
    r.push(`min_tokens must be an integer >= 0, got ${p.minTokens}`);
  // (against a bad max_tokens the comparison says nothing more: its own reason is enough)
  else if (maxOk && p.minTokens > p.maxTokens)
    r.push(`min_tokens (${p.minTokens}) must be <= max_tokens (${p.maxTokens})`);
  if (!Number.isFinite(p.temperature) || p.temperature < 0)
    r.push(`temperature must be >= 0, got ${p.temperature}`);
  // The samplers divide f32 logits by an f32 temperature: a larger value rounds to +Infinity.
  else if (!Number.isFinite(Math.fround(p.temperature)))
    r.push(`temperature must be at most ${F32_MAX} (the largest 32-bit float), got ${p.temperature}`);
  if (!Number.isFinite(p.topP) || p.topP <= 0 || p.topP > 1) r.push(`top_p must be in (0, 1], got ${p.topP}`);
  if (!isInt(p.topK) || p.topK < -1)
    r.push(`top_k must be -1 (disable), 0 (disable) or a positive integer, got ${p.topK}`);
  if (!Number.isFinite(p.minP) || p.minP < 0 || p.minP > 1) r.push(`min_p must be in [0, 1], got ${p.minP}`);
  if (p.seed !== null && !Number.isSafeInteger(p.seed)) r.push(`seed must be a safe integer, got ${p.seed}`);
  if (!Number.isFinite(p.repetitionPenalty) || p.repetitionPenalty <= 0)
    r.push(`repetition_penalty must be > 0, got ${p.repetitionPenalty}`);
  if (!Number.isFinite(p.presencePenalty) || p.presencePenalty < -2 || p.presencePenalty > 2)
    r.push(`presence_penalty must be in [-2, 2], got ${p.presencePenalty}`);
  if (!Number.isFinite(p.frequencyPenalty) || p.frequencyPenalty < -2 || p.frequencyPenalty > 2)
    r.push(`frequency_penalty must be in [-2, 2], got ${p.frequencyPenalty}`);
  if (p.logprobs !== null && (!isInt(p.logprobs) || p.logprobs < 0 || p.logprobs > MAX_LOGPROBS))
    r.push(`logprobs must be an integer in [0, ${MAX_LOGPROBS}], got ${p.logprobs}`);
  if (p.stop.some((s) => typeof s !== "string" || s.length === 0))
    r.push("stop strings must be non-empty strings");
  if (p.stopTokenIds.some((t) => !isInt(t) || t < 0)) r.push("stop_token_ids must be non-negative integers");
  if (p.forcedTokenIds !== null) {
    if (p.forcedTokenIds.length === 0 || p.forcedTokenIds.some((t) => !isInt(t) || t < 0))
      r.push("forced_token_ids must be a non-empty list of non-negative integers");
    else if (p.forcedTokenIds.length !== p.maxTokens)
      r.push(
        `max_tokens (${p.maxTokens}) must equal the number of forced tokens (${p.forcedTokenIds.length})`,
      );
  }
  return r;
}

/** True when sampling reduces to argmax (vLLM: temperature < 1e-5 is greedy). */
export function isGreedy(p: SamplingParams): boolean {
  return p.temperature < GREEDY_TEMPERATURE_EPS;
}

/** Temperatures below this are treated as greedy (vllm/v1/sample/sampler.py uses _SAMPLING_EPS = 1e-5). */
export const GREEDY_TEMPERATURE_EPS = 1e-5;
