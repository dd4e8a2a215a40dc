/**
 * Shared pieces of the GPU tests (test/native/*.test.ts): skip logic, a seeded RNG, bf16 inputs
 * and the error measures of .library/device/METHOD.md ("Correct first": relative error of norms
 * against a float64 reference, NaN never passes, outputs poisoned before each run).
 */
import assert from "node:assert/strict";
import { loadAddon } from "../../src/backends/cuda/addon.js";
import { CudaBackend, type CudaBackendOptions } from "../../src/backends/cuda/cuda_backend.js";
import { roundBf16 } from "../../src/backends/cuda/half.js";

/** Lowest compute capability the addon runs on. */
const MIN_CC = 9;

/**
 * Reason to skip the GPU tests here (no addon, no driver, no device, older GPU), or false when
 * they can run. Never throws.
 */
export function gpuSkip(): string | false {
  try {
    const addon = loadAddon();
    const probe = addon.probe();
    if (!probe.ok) return `no CUDA device: ${probe.error || "none found"}`;
    const p = addon.deviceProperties(0);
    if (p.major < MIN_CC) return `${p.name} (sm_${p.major}${p.minor}) is older than sm_90`;
    return false;
  } catch (err) {
    return (err as Error).message;
  }
}

/** A backend sized for tests (256 MiB workspace, 16 MiB staging: chunked uploads get exercised). */
export function makeBackend(options: CudaBackendOptions = {}): CudaBackend {
  return new CudaBackend({ workspaceBytes: 256 * 2 ** 20, stagingBytes: 16 * 2 ** 20, ...options });
}

/** mulberry32: small seeded PRNG, uniform in [0, 1). */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Standard normal (Box-Muller). */
  normal(): number {
    const u = Math.max(this.next(), 1e-12);
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.next());
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo));
  }
  /** A random permutation of 0..n-1. */
  permutation(n: number): number[] {
    const p = Array.from({ length: n }, (_, i) => i);
    for (let i = n - 1; i > 0; i--) {
      const j = this.int(0, i + 1);
      [p[i], p[j]] = [p[j]!, p[i]!];
    }
    return p;
  }
}

/** n normal values * scale, rounded to bf16 (the values a bf16 tensor holds; never all zero). */
export function randBf16(rng: Rng, n: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = roundBf16(rng.normal() * scale);
  return out;
}

/** n normal values * scale in f32. */
export function randF32(rng: Rng, n: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.normal() * scale;
  return out;
}

/** ||out - ref|| / ||ref|| in float64; Infinity when out has a NaN (unwritten poisoned element). */
export function relErr(out: ArrayLike<number>, ref: ArrayLike<number>): number {
  assert.equal(out.length, ref.length, "length mismatch");
  let num = 0;
  let den = 0;
  for (let i = 0; i < ref.length; i++) {
    const o = out[i]!;
    if (Number.isNaN(o)) return Number.POSITIVE_INFINITY;
    const d = o - ref[i]!;
    num += d * d;
    den += ref[i]! * ref[i]!;
  }
  return den === 0 ? Math.sqrt(num) : Math.sqrt(num / den);
}

/** Asserts relErr(out, ref) < tol, with the failing value in the message. */
export function assertClose(out: ArrayLike<number>, ref: ArrayLike<number>, tol: number, what: string): void {
  const e = relErr(out, ref);
  assert.ok(e < tol, `${what}: relative error ${e.toExponential(3)} >= ${tol}`);
}

/** Asserts element-wise equality (bit-exact copies), reporting the first difference. */
export function assertSame(out: ArrayLike<number>, ref: ArrayLike<number>, what: string): void {
  assert.equal(out.length, ref.length, `${what}: length`);
  for (let i = 0; i < ref.length; i++) {
    if (!Object.is(out[i], ref[i])) assert.fail(`${what}: element ${i} is ${out[i]}, expected ${ref[i]}`);
  }
}

/** Bf16 tolerance: a few roundings of 2^-9 relative each. */
export const BF16_TOL = 1e-2;
/** f32 tolerance: fp32 arithmetic with different summation order. */
export const F32_TOL = 1e-5;
