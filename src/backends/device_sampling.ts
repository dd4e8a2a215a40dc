/** The device sampler's per-row settings and sampling rule (Backend.sampleOnDevice, backend.ts). */

/**
 * Per-row sampling settings for a device sampler. The random number of each row is drawn on the
 * host from the request's own generator (worker/sampler.ts), so the CPU and CUDA samplers pick
 * the same token from the same distribution. The rule, for rows with temperature > 0:
 *   p = softmax(logits / temperature) in fp32;
 *   keep token i iff p_i >= the k-th largest p (top-k; ties at the boundary are kept),
 *     and p_i >= minP * max(p), and p_i >= tP, where tP is the largest value such that the
 *     tokens with p >= tP hold at least topP of the mass (top-p; ties kept);
 *   walk the kept tokens in ascending token id, accumulating p; pick the first token whose
 *   running sum exceeds uniform * (sum of kept p); if rounding leaves none, the last kept token.
 * These threshold forms need no sort, so a GPU computes them with reductions and one scan.
 */
export interface DeviceSamplingRows {
  /** [B] temperature per row; rows with temperature 0 take the argmax (lowest id on ties). */
  temperature: Float32Array;
  /** [B] top-k per row; 0 disables. */
  topK: Int32Array;
  /** [B] top-p per row; 1 disables. */
  topP: Float32Array;
  /** [B] min-p per row; 0 disables. */
  minP: Float32Array;
  /** [B] uniform random number in [0, 1) per row. */
  uniform: Float32Array;
}
