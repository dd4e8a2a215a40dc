/** Error for a model directory the engine cannot use; the message is one sentence for the user. */
export class ModelConfigError extends Error {
  override name = "ModelConfigError";
}
