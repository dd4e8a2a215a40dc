/**
 * `hisparse eval ppl`: perplexity measured through the engine's real decode path, so sparse
 * attention is measured as it decodes.
 *
 * Protocol: the text is tokenized (no special tokens) and cut into consecutive, non-overlapping
 * windows of `ctx` tokens (the tail shorter than `ctx` is dropped). For each window the first
 * `prefixTokens` tokens are the prompt (one prefill); the other `ctx − prefixTokens` tokens are
 * forced one decode step at a time (`SamplingParams.forcedTokenIds`, `ignoreEos`,
 * `logprobs: 0`), each step reporting log p(forced token | everything before it) under the raw
 * logits. Perplexity = exp(−Σ logprob / number of scored tokens) over all windows. Every window
 * runs in one batch. The prefix's own tokens are not scored (the engine returns no prompt
 * logprobs), so the figure is the perplexity of the last ctx − prefixTokens positions.
 */
import type { LLM } from "../engine/llm.js";

/** What a run asks for. */
export interface PplOptions {
  /** Tokens per window (prefix + scored). */
  ctx: number;
  /** Prompt tokens of each window; the rest are scored. */
  prefixTokens: number;
  /** Windows at most (from the start of the text); null = all. */
  maxWindows: number | null;
}

/** Result of one variant. */
export interface PplResult {
  /** Σ −log p over scored tokens, nats. */
  nll: number;
  numScoredTokens: number;
  numWindows: number;
  /** exp(nll / numScoredTokens). */
  perplexity: number;
  /** Per window: nll and scored tokens. */
  windows: { nll: number; numScoredTokens: number }[];
}

/** Error for a text or setting that cannot be evaluated; one sentence for the user. */
export class PplError extends Error {
  override name = "PplError";
}

/**
 * Reasons a run cannot be scored by an engine of `maxModelLen` tokens (empty when it can):
 * --prefix-tokens in [1, ctx − 1], --max-windows >= 1, and one window (prompt + forced tokens =
 * ctx) within the engine's length. Checked before any engine starts.
 * @param maxModelLenSource how the user sets the length, e.g. "--max-model-len (200)".
 */
export function pplOptionReasons(o: PplOptions, maxModelLen: number, maxModelLenSource: string): string[] {
  const r: string[] = [];
  if (!(Number.isInteger(o.prefixTokens) && o.prefixTokens >= 1 && o.prefixTokens < o.ctx))
    r.push(`--prefix-tokens must be in [1, --ctx − 1], got ${o.prefixTokens} with --ctx ${o.ctx}`);
  if (o.maxWindows !== null && !(o.maxWindows >= 1))
    r.push(`--max-windows must be >= 1, got ${o.maxWindows}`);
  if (o.ctx > maxModelLen) r.push(`--ctx (${o.ctx}) must be <= ${maxModelLenSource}`);
  return r;
}

/**
 * Cuts token ids into windows of `ctx` tokens.
 * @throws PplError when ctx <= prefixTokens or prefixTokens < 1, or the text is shorter than ctx.
 */
export function pplWindows(ids: readonly number[], o: PplOptions): number[][] {
  if (!(Number.isInteger(o.prefixTokens) && o.prefixTokens >= 1 && o.prefixTokens < o.ctx))
    throw new PplError(
      `--prefix-tokens must be in [1, --ctx − 1], got ${o.prefixTokens} with --ctx ${o.ctx}`,
    );
  const n = Math.min(Math.floor(ids.length / o.ctx), o.maxWindows ?? Number.POSITIVE_INFINITY);
  if (n < 1) throw new PplError(`the text has ${ids.length} tokens, fewer than one --ctx window of ${o.ctx}`);
  return Array.from({ length: n }, (_, w) => ids.slice(w * o.ctx, (w + 1) * o.ctx));
}

/**
 * Scores every window with forced decoding (see the protocol above).
 * @param onProgress called as windows finish: (windows done, windows)
 * @throws Error when the engine returns fewer logprobs than forced tokens.
 */
export async function runPpl(
  llm: Pick<LLM, "generate">,
  windows: readonly number[][],
  prefixTokens: number,
  onProgress?: (done: number, total: number) => void,
): Promise<PplResult> {
  const prompts = windows.map((w) => ({ promptTokenIds: w.slice(0, prefixTokens) }));
  const params = windows.map((w) => {
    const forced = w.slice(prefixTokens);
    return { temperature: 0, maxTokens: forced.length, ignoreEos: true, logprobs: 0, forcedTokenIds: forced };
  });
  const outs = await llm.generate(prompts, params, { onProgress });
  const perWindow = outs.map((o, i) => {
    const lps = o.outputs[0]?.logprobs ?? [];
    const expected = params[i]!.forcedTokenIds.length;
    if (lps.length !== expected)
      throw new Error(
        `window ${i}: the engine returned ${lps.length} logprobs for ${expected} forced tokens`,
      );
    return { nll: -lps.reduce((a, l) => a + l.sampledLogprob, 0), numScoredTokens: expected };
  });
  const nll = perWindow.reduce((a, w) => a + w.nll, 0);
  const numScoredTokens = perWindow.reduce((a, w) => a + w.numScoredTokens, 0);
  return {
    nll,
    numScoredTokens,
    numWindows: windows.length,
    perplexity: Math.exp(nll / numScoredTokens),
    windows: perWindow,
  };
}
