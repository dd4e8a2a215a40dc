/**
 * The KV budget `hisparse plan` derives from a GPU's size (total × utilization − weights −
 * reserve), and the one-sentence error when nothing is left for the KV cache.
 */
import { PlanError } from "./plan_error.js";

/** What the KV budget is derived from when only the GPU's size is given (bytes; utilization a fraction). */
export interface GpuBudgetInput {
  gpuMemBytes: number;
  gpuMemoryUtilization: number;
  weightBytes: number;
  reserveBytes: number;
}

/** Device memory left for the KV cache: total × utilization − weights − reserve (bytes). */
export function kvBudgetFromGpu(o: GpuBudgetInput): number {
  return Math.floor(o.gpuMemBytes * o.gpuMemoryUtilization - o.weightBytes - o.reserveBytes);
}

/** Bytes as GiB with 2 decimals ("0.90 GiB"), for {@link noKvBudgetError}. */
const gib = (b: number): string => `${(b / 2 ** 30).toFixed(2)} GiB`;

/**
 * The error for a GPU budget that leaves nothing for the KV cache ({@link kvBudgetFromGpu} <= 0):
 * one sentence with every term of the subtraction, in GiB with 2 decimals, and the flags that
 * change it, e.g. "no GPU memory is left for the KV cache: 1.00 GiB × 0.9 utilization = 0.90 GiB,
 * minus weights 0.05 GiB and reserve 2.00 GiB, leaves -1.15 GiB; raise --gpu-mem-gib or
 * --gpu-memory-utilization, or lower --reserve-gib".
 * `fp8WeightBytes` (the weights of an FP8 checkpoint, 1 byte each): when given and the budget
 * with them is positive, the sentence also suggests `--weights-dtype fp8` with what it leaves.
 */
export function noKvBudgetError(o: GpuBudgetInput, fp8WeightBytes?: number): PlanError {
  const usable = o.gpuMemBytes * o.gpuMemoryUtilization;
  const fp8Left = fp8WeightBytes === undefined ? 0 : kvBudgetFromGpu({ ...o, weightBytes: fp8WeightBytes });
  return new PlanError(
    `no GPU memory is left for the KV cache: ${gib(o.gpuMemBytes)} × ${o.gpuMemoryUtilization} utilization = ${gib(usable)}, ` +
      `minus weights ${gib(o.weightBytes)} and reserve ${gib(o.reserveBytes)}, leaves ${gib(kvBudgetFromGpu(o))}; ` +
      "raise --gpu-mem-gib or --gpu-memory-utilization, or lower --reserve-gib" +
      (fp8Left > 0
        ? `, or plan an FP8 checkpoint with --weights-dtype fp8 (weights ${gib(fp8WeightBytes!)}, leaves ${gib(fp8Left)})`
        : ""),
  );
}
