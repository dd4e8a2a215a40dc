/**
 * The Quest budget split and digest granularity by default (HiSparseConfig's derived knobs):
 * how much of topk the sinks and the recent window take, and how many tokens one min/max digest
 * covers. Measured on ref-small (bench/results/hisparse_quest_quality_cpu.md) and ref-base
 * (bench/results/gpu_session3_20261202_h200.md).
 */

/**
 * Largest default sinks: 64 tokens = 4 pages of 16 (the default at the default topk; smaller
 * budgets get less, {@link defaultSinkTokens}). StreamingLLM (arXiv 2309.17453) shows that about 4
 * initial tokens absorb the excess attention mass; a page-granular selector keeps whole pages, and
 * the first pages also hold the chat template and system prompt, which every answer depends on.
 */
export const DEFAULT_SINK_TOKENS = 64;
/**
 * Largest default recent window: 256 tokens = 1/8 of the default budget ({@link
 * defaultWindowTokens}). Recent tokens carry most of the attention mass for local coherence
 * (StreamingLLM), and Quest keeps the current page always; 1/8 leaves 7/8 of the budget to
 * query-aware selection.
 */
export const DEFAULT_WINDOW_TOKENS = 256;
/** Default sinks and window as fractions of topk: 1/16 and 1/8 ({@link defaultSinkTokens}). */
export const SINK_BUDGET_DIVISOR = 16;
export const WINDOW_BUDGET_DIVISOR = 8;

/** `x` rounded down to whole pages of `bs` tokens, at least `lo` and at most `hi` tokens. */
function pagesBetween(x: number, bs: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, Math.floor(x / bs) * bs));
}

/**
 * The budget split when window_tokens is not given: topk / 8 in whole pages, at least one page,
 * at most {@link DEFAULT_WINDOW_TOKENS}. A fixed split ate small budgets: topk 256 with sinks 64
 * and window 128 left four 16-token pages to Quest, and ref-small lost 7.5 passkey points at 2K
 * (bench/results/hisparse_quest_quality_cpu.md); topk 2048 keeps 64 + 256.
 * @param topk tokens; bs the block size
 */
export function defaultWindowTokens(topk: number, bs: number): number {
  return pagesBetween(topk / WINDOW_BUDGET_DIVISOR, bs, bs, DEFAULT_WINDOW_TOKENS);
}

/**
 * Sinks when sink_tokens is not given: topk / 16 in whole pages, at least one page, at most
 * {@link DEFAULT_SINK_TOKENS}, and no more than the budget leaves beside the window.
 * @param topk tokens; windowTokens the final window; bs the block size
 */
export function defaultSinkTokens(topk: number, windowTokens: number, bs: number): number {
  const s = pagesBetween(topk / SINK_BUDGET_DIVISOR, bs, bs, DEFAULT_SINK_TOKENS);
  return Math.max(0, Math.min(s, Math.floor((topk - windowTokens) / bs) * bs));
}
/**
 * Tokens per Quest digest when digest_tokens is not given: the block size (one min/max digest per
 * page). Measured on the H200 (ref-base, topk = context / 8, bench/results/gpu_session4_20261202_h200.md):
 * - page digests (bf16, this default): perplexity +7.3% / +4.1% of dense at 4K / 8K, passkey no
 *   loss; Quest throughput at 32K (Llama-3.1-8B shape) 3.20x `off`'s peak, auto B=1 1.003x;
 * - `{"digest_tokens":4,"digest_dtype":"fp8"}` (four outward-rounded sub-page digests, a page
 *   scoring as its best one): perplexity +0.65% / +0.55%, passkey no loss, but 1.62x `off`'s peak
 *   and auto B=1 0.975x: scoring four digests per page (questScoreKernel, sub-pages in series)
 *   costs more per step than the quality buys until that kernel is faster; device bytes per host
 *   page 368 KiB against 248 KiB (608 KiB with bf16 sub-page digests).
 * So the sub-page setting is opt-in.
 * @param blockSize tokens per page
 */
export function defaultDigestTokens(blockSize: number): number {
  return blockSize;
}

/**
 * The digest granularity a set-up uses at the engine's block size: `digest_tokens` when given,
 * else {@link defaultDigestTokens} of it. The resolved config's own default was made
 * for the block size known at resolution (16 when resolved before the engine's), so an engine with
 * another --block-size must not read it as if given. A config without `givenKeys` (built by
 * hand) is taken as given.
 */
export function digestTokensFor(
  c: { digestTokens: number; givenKeys?: readonly string[] },
  blockSize: number,
): number {
  // A config built by hand (no givenKeys) means what it says.
  return c.givenKeys === undefined || c.givenKeys.includes("digest_tokens")
    ? c.digestTokens
    : defaultDigestTokens(blockSize);
}
