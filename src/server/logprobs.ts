/**
 * Engine log-probabilities -> OpenAI's two logprobs shapes (vllm/entrypoints/openai/
 * serving_completion.py `_create_completion_logprobs`, serving_chat.py `_create_chat_logprobs`).
 */
import type { TokenLogprobs } from "../core/sched/output.js";

/** Logprobs below this are reported as this value: JSON has no -Infinity (vLLM clamps the same way). */
export const MIN_LOGPROB = -9999.0;

/** Text of one token id (e.g. `id => tokenizer.decode([id])`). */
export type TokenText = (id: number) => string;

const clamp = (x: number) => (Number.isFinite(x) ? Math.max(x, MIN_LOGPROB) : MIN_LOGPROB);

/** Legacy completions logprobs (`logprobs: N`): parallel arrays over the generated tokens. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  /** Per token: the top-N tokens and the sampled one (so up to N + 1 entries), text -> logprob. */
  top_logprobs: Record<string, number>[];
  /** Character offset of each token in the completion text. */
  text_offset: number[];
}

/** An empty {@link CompletionLogprobs} to append to. */
export function emptyCompletionLogprobs(): CompletionLogprobs {
  return { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
}

/**
 * Appends the logprobs of some generated tokens.
 * @param tokenIds the generated tokens, parallel to `lps`
 * @param textOffset offset of the first of them in the completion text (chars); returned advanced
 * @returns the offset after the last token
 */
export function appendCompletionLogprobs(
  into: CompletionLogprobs,
  tokenIds: readonly number[],
  lps: readonly TokenLogprobs[],
  text: TokenText,
  textOffset: number,
): number {
  let offset = textOffset;
  for (let i = 0; i < lps.length; i++) {
    const lp = lps[i]!;
    const token = text(tokenIds[i] ?? -1);
    const top: Record<string, number> = {};
    for (let k = 0; k < lp.topTokenIds.length; k++) top[text(lp.topTokenIds[k]!)] = clamp(lp.topLogprobs[k]!);
    top[token] ??= clamp(lp.sampledLogprob);
    into.tokens.push(token);
    into.token_logprobs.push(clamp(lp.sampledLogprob));
    into.top_logprobs.push(top);
    into.text_offset.push(offset);
    offset += token.length;
  }
  return offset;
}

/** Appends the entries of `from` to `into`. */
export function extendCompletionLogprobs(into: CompletionLogprobs, from: CompletionLogprobs): void {
  into.tokens.push(...from.tokens);
  into.token_logprobs.push(...from.token_logprobs);
  into.top_logprobs.push(...from.top_logprobs);
  into.text_offset.push(...from.text_offset);
}

/** One alternative token of chat logprobs. */
export interface ChatTopLogprob {
  token: string;
  logprob: number;
  /** UTF-8 bytes of `token`. */
  bytes: number[];
}

/** One generated token of chat logprobs, with its top alternatives (`top_logprobs` of them). */
export interface ChatTokenLogprob extends ChatTopLogprob {
  top_logprobs: ChatTopLogprob[];
}

/** Chat completions logprobs (`logprobs: true, top_logprobs: N`). */
export interface ChatLogprobs {
  content: ChatTokenLogprob[];
}

function topEntry(token: string, logprob: number): ChatTopLogprob {
  return { token, logprob: clamp(logprob), bytes: [...Buffer.from(token, "utf8")] };
}

/**
 * Chat logprobs entries of some generated tokens.
 * @param tokenIds the generated tokens, parallel to `lps`
 * @param topN how many alternatives to list per token (the request's top_logprobs)
 */
export function chatLogprobEntries(
  tokenIds: readonly number[],
  lps: readonly TokenLogprobs[],
  text: TokenText,
  topN: number,
): ChatTokenLogprob[] {
  return lps.map((lp, i) => {
    const top: ChatTopLogprob[] = [];
    for (let k = 0; k < Math.min(topN, lp.topTokenIds.length); k++) {
      top.push(topEntry(text(lp.topTokenIds[k]!), lp.topLogprobs[k]!));
    }
    return { ...topEntry(text(tokenIds[i] ?? -1), lp.sampledLogprob), top_logprobs: top };
  });
}
