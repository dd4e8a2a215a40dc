import type { TokenDecoder } from "./tokenizer.js";

/** Replacement character a decoder emits for incomplete or invalid UTF-8 bytes. */
export const REPLACEMENT_CHAR = "\uFFFD";
/**
 * Prompt tokens kept as decoding context before the first output token
 * (vLLM INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET).
 */
export const INITIAL_DETOKENIZATION_OFFSET = 5;

/** Options of {@link IncrementalDetokenizer}. */
export interface IncrementalDetokenizerOptions {
  /** Prompt ids; their last few tokens give the first output token its context (e.g. a leading space). */
  promptTokenIds?: readonly number[];
  /** Drop special tokens from the text (vLLM's default for outputs: true). */
  skipSpecialTokens: boolean;
}

/**
 * Turns a stream of token ids into a stream of text (vLLM detokenize_incrementally,
 * vllm/transformers_utils/detokenizer_utils.py). It keeps two offsets into the token list:
 * `prefixOffset` starts a short window of context tokens and `readOffset` ends the part whose
 * text was already emitted. Each new token decodes the window twice, [prefix, read) and
 * [prefix, end); the difference is the new text. Decoding a window (not single tokens) keeps
 * decoders that depend on neighbours (SentencePiece's leading "▁", byte-level and byte-fallback
 * tokens that split one UTF-8 character) right. While the new text ends in U+FFFD the character
 * is still incomplete: nothing is emitted and the offsets stay, so the next token re-decodes
 * the pending bytes. At the end `flush()` emits what is left, so the concatenated output equals
 * the decode of all output tokens (in the prompt's context).
 */
export class IncrementalDetokenizer {
  /** Context and output ids the windows index into (special tokens removed when skipping). */
  private readonly tokens: number[];
  private prefixOffset: number;
  private readOffset: number;
  /** Decode of tokens[prefixOffset, readOffset). */
  private prefixText: string;
  private emitted = "";
  private readonly skipSpecialTokens: boolean;

  constructor(
    private readonly tokenizer: TokenDecoder,
    opts: IncrementalDetokenizerOptions,
  ) {
    this.skipSpecialTokens = opts.skipSpecialTokens;
    const prompt = opts.promptTokenIds ?? [];
    this.tokens = this.skipSpecialTokens ? prompt.filter((id) => !tokenizer.isSpecialToken(id)) : [...prompt];
    this.readOffset = this.tokens.length;
    this.prefixOffset = Math.max(this.readOffset - INITIAL_DETOKENIZATION_OFFSET, 0);
    this.prefixText = this.decodeWindow(this.prefixOffset, this.readOffset);
  }

  /** All text emitted so far. */
  get output(): string {
    return this.emitted;
  }

  /**
   * Appends one generated token.
   * @returns the text this token completes ("" while a character is pending, or for a skipped
   *   special token).
   */
  push(tokenId: number): string {
    if (this.skipSpecialTokens && this.tokenizer.isSpecialToken(tokenId)) return "";
    this.tokens.push(tokenId);
    const newText = this.decodeWindow(this.prefixOffset, this.tokens.length);
    if (newText.length <= this.prefixText.length || newText.endsWith(REPLACEMENT_CHAR)) return "";
    return this.advance(newText);
  }

  /** Appends several tokens; returns the concatenated new text. */
  pushMany(tokenIds: readonly number[]): string {
    let out = "";
    for (const id of tokenIds) out += this.push(id);
    return out;
  }

  /**
   * Ends the stream: emits the text still held back (a character left incomplete by the last
   * token appears as U+FFFD, as in a full decode).
   */
  flush(): string {
    if (this.readOffset === this.tokens.length) return "";
    const newText = this.decodeWindow(this.prefixOffset, this.tokens.length);
    if (newText.length <= this.prefixText.length) return "";
    return this.advance(newText);
  }

  /** Emits newText minus the window's prefix text and moves the window to the new tokens. */
  private advance(newText: string): string {
    const delta = newText.slice(this.prefixText.length);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.tokens.length;
    this.prefixText = this.decodeWindow(this.prefixOffset, this.readOffset);
    this.emitted += delta;
    return delta;
  }

  private decodeWindow(start: number, end: number): string {
    return this.tokenizer.decode(this.tokens.slice(start, end), {
      skipSpecialTokens: this.skipSpecialTokens,
    });
  }
}
