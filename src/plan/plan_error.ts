/** Error for settings that cannot be planned; one sentence for the user. */
export class PlanError extends Error {
  override name = "PlanError";
}
