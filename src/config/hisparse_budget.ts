/**
 * The Quest budget split and digest granularity by default (HiSparseConfig's derived knobs):
 * how much of topk the sinks and the recent window take, and how many tokens one min/max digest
 * covers. Measured on ref-small: bench/results/hisparse_quest_quality_cpu.md.
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
 * page, 2 / blockSize of K's bytes in bf16). `digest_tokens` 4 at 16-token pages keeps four
 * sub-page digests per page and scores a page as its best one: a tighter bound that ranks pages
 * nearly as 4-token pages do (ref-small, sink 64 / window 128: perplexity +15.7% vs +30.1% of
 * dense, bench/results/hisparse_quest_quality_cpu.md), at 4x the digest memory (1/2 of K's bytes in
 * bf16), which costs HiSparse capacity; so it is opt-in until digests are stored in fp8.
 * @param blockSize tokens per page
 */
export function defaultDigestTokens(blockSize: number): number {
  return blockSize;
}

/**
 * The digest granularity a set-up uses at the engine's block size: `digest_tokens` when given,
 * else the block size ({@link defaultDigestTokens}). The resolved config's own default was made
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
