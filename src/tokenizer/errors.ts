/** A tokenizer that cannot be loaded or used; the message is one sentence for the user. */
export class TokenizerError extends Error {
  override name = "TokenizerError";
}
