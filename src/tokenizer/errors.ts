/** A tokenizer that cannot be loaded or used; the message is one sentence for the user. */
export class TokenizerError extends Error {
  override name = "TokenizerError";
}

/**
 * A prompt longer than the caller's limit, found without returning its ids: by the length
 * bound (`exact` false: the text was not tokenized, `numTokens` is its fewest possible tokens)
 * or by tokenizing it (`exact` true).
 */
export class PromptTooLongError extends Error {
  override name = "PromptTooLongError";
  constructor(
    /** Tokens of the prompt, or at least this many when not `exact`. */
    readonly numTokens: number,
    readonly exact: boolean,
    /** UTF-8 bytes of the prompt text. */
    readonly numBytes: number,
  ) {
    super(
      exact
        ? `the prompt is ${numTokens} tokens long`
        : `the prompt is ${numBytes} bytes long, so at least ${numTokens} tokens`,
    );
  }
}
