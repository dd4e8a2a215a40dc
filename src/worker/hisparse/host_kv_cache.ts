import type { HostKvTier } from "../../attention/sparse/hot_buffer.js";
import type { Tensor } from "../../backends/backend.js";
import { E4M3_VALUES, floatToE4m3 } from "../../backends/fp8.js";
import { DEFAULT_KV_CACHE_SCALE } from "../../core/kv/kv_cache_dtype.js";
import type { KvCacheScales } from "../../core/kv/kv_cache_scales.js";

/** Geometry of the host tier. */
export interface HostKvCacheSpec {
  numSparseLayers: number;
  numHostBlocks: number;
  blockSize: number;
  numKvHeads: number;
  headDim: number;
  /**
   * `host_kv_cache_dtype` fp8 (config/hisparse_config.ts): pages are held as e4m3 codes, 1 byte an
   * element, with per-tensor K and V scales (vLLM's k_scale / v_scale; DEFAULT_KV_CACHE_SCALE
   * when absent). Absent or false: the device cache's f32 values. `scalesOf` (fp8 device caches)
   * gives sparse layer i's scales at each copy instead, so that host pages hold the very codes
   * of the device cache (`--calculate-kv-scales` scales per layer, fixed after the first batch).
   */
  fp8?: { kScale?: number; vScale?: number; scalesOf?: (sparseLayer: number) => KvCacheScales } | false;
}

/** One sparse layer's host pages: f32 values, or e4m3 codes. */
type HostPages = Float32Array | Uint8Array;

/**
 * The host tier on the CPU backend: per sparse layer an array laid out as the device cache,
 * [numHostBlocks, 2, blockSize, Hkv, D], so a page mirror is one contiguous copy and a head slice
 * is 2 x blockSize rows of D values. On CUDA this is pinned host memory, mirrored by a kernel on a
 * side stream and read by the resolver's gather kernel (head-major there, the same values).
 * With fp8 pages (the CPU oracle of HS_HOST_KV_FP8, native/kernels/hisparse_copy.cuh) a mirror
 * stores e4m3(x * (1 / scale)) (src/backends/fp8.ts, the kernels' exact rounding) and every read
 * back (load, loadHeadSlice) writes code value * scale: the values an fp8 KV cache reads
 * (backends/fp8.ts roundToE4m3), in a quarter of the f32 bytes (half of bf16's on CUDA).
 */
export class CpuHostKvCache implements HostKvTier {
  /** Per sparse layer, [numHostBlocks, 2, blockSize, Hkv, D]: f32 values, or e4m3 codes (fp8). */
  readonly layers: HostPages[];
  /** Bytes of one (page, sparse layer, kv head) slice as held here: what a miss moves. */
  readonly sliceBytes: number;
  /** Elements of one page of one layer (K and V). */
  private readonly pageElems: number;
  /** Bytes per held element: 4 (f32) or 1 (fp8). */
  private readonly elementBytes: number;
  /** fp8: scale and 1 / scale of K rows and of V rows; null for f32 pages. */
  private readonly quant: FpQuant | null;
  /** fp8 with per-layer scales: sparse layer -> its scales (read at each copy). */
  private readonly scalesOf: ((sparseLayer: number) => KvCacheScales) | null;

  /**
   * @param view host view of a device tensor's f32 elements (Backend.hostView).
   * @throws Error when the host tier cannot be allocated, or a scale is not > 0.
   */
  constructor(
    readonly spec: HostKvCacheSpec,
    private readonly view: (t: Tensor) => Float32Array,
  ) {
    const { numSparseLayers, numHostBlocks, blockSize, numKvHeads, headDim } = spec;
    this.pageElems = 2 * blockSize * numKvHeads * headDim;
    const fp8 = spec.fp8 === undefined || spec.fp8 === false ? null : spec.fp8;
    this.elementBytes = fp8 === null ? 4 : 1;
    this.sliceBytes = 2 * blockSize * headDim * this.elementBytes;
    this.scalesOf = fp8?.scalesOf ?? null;
    if (fp8 === null) {
      this.quant = null;
    } else {
      const k = fp8.kScale ?? DEFAULT_KV_CACHE_SCALE;
      const v = fp8.vScale ?? DEFAULT_KV_CACHE_SCALE;
      if (!(k > 0) || !(v > 0)) throw new Error(`fp8 host pages need scales > 0, got k ${k}, v ${v}`);
      // The kernels multiply by the f32 inverse (hsMirrorPages: 1.f / scale).
      this.quant = { k, v, invK: Math.fround(1 / k), invV: Math.fround(1 / v) };
    }
    const n = numHostBlocks * this.pageElems;
    try {
      this.layers = Array.from({ length: numSparseLayers }, () =>
        fp8 === null ? new Float32Array(n) : new Uint8Array(n),
      );
    } catch (e) {
      const gib = (numSparseLayers * n * this.elementBytes) / 2 ** 30;
      throw new Error(
        `the host KV pool (${gib.toFixed(2)} GiB) could not be allocated (${(e as Error).message})`,
      );
    }
  }

  /** Bytes of one page across the sparse layers (what a mirror copies). */
  get pageBytes(): number {
    return this.spec.numSparseLayers * this.pageElems * this.elementBytes;
  }

  /**
   * Eager mirror of sparse layer `sparseLayer`: copies device block blockIds[i] of `kvCache`
   * to host block hostBlockIds[i], for every i (quantising to e4m3 with fp8 pages).
   */
  mirror(
    sparseLayer: number,
    kvCache: Tensor,
    blockIds: readonly number[],
    hostBlockIds: readonly number[],
  ): void {
    const src = this.view(kvCache);
    const dst = this.layers[sparseLayer]!;
    const n = this.pageElems;
    const q = this.quantOf(sparseLayer);
    for (let i = 0; i < blockIds.length; i++) {
      const b = blockIds[i]! * n;
      const h = hostBlockIds[i]! * n;
      if (q === null) (dst as Float32Array).set(src.subarray(b, b + n), h);
      else quantise(q, src, b, dst as Uint8Array, h, n);
    }
  }

  /**
   * The reverse of {@link mirror} (prefix-cache hits on host-resident pages): copies host block
   * hostBlockIds[i] of sparse layer `sparseLayer` into device block blockIds[i] of `kvCache`.
   */
  load(
    sparseLayer: number,
    kvCache: Tensor,
    blockIds: readonly number[],
    hostBlockIds: readonly number[],
  ): void {
    const src = this.layers[sparseLayer]!;
    const dst = this.view(kvCache);
    const n = this.pageElems;
    const { blockSize: bs, numKvHeads: Hkv, headDim: D } = this.spec;
    const rowElems = Hkv * D;
    const q = this.quantOf(sparseLayer);
    for (let i = 0; i < blockIds.length; i++) {
      const h = hostBlockIds[i]! * n;
      const b = blockIds[i]! * n;
      if (q === null) {
        dst.set((src as Float32Array).subarray(h, h + n), b);
        continue;
      }
      for (let r = 0; r < 2 * bs; r++)
        dequantise(src as Uint8Array, h + r * rowElems, dst, b + r * rowElems, rowElems, r < bs ? q.k : q.v);
    }
  }

  loadHeadSlice(sparseLayer: number, hostBlockId: number, g: number, kvCache: Tensor, blockId: number): void {
    const { blockSize: bs, numKvHeads: Hkv, headDim: D } = this.spec;
    const src = this.layers[sparseLayer]!;
    const dst = this.view(kvCache);
    const s0 = hostBlockId * this.pageElems + g * D;
    const d0 = blockId * this.pageElems + g * D;
    const q = this.quantOf(sparseLayer);
    // Rows (k/v, offset) of the page, 2 * blockSize of them, each Hkv * D apart.
    for (let r = 0; r < 2 * bs; r++) {
      const o = r * Hkv * D;
      if (q === null) dst.set((src as Float32Array).subarray(s0 + o, s0 + o + D), d0 + o);
      else dequantise(src as Uint8Array, s0 + o, dst, d0 + o, D, r < bs ? q.k : q.v);
    }
  }

  /** The fp8 scales of a sparse layer's pages (its device cache's with `scalesOf`), null for f32. */
  private quantOf(sparseLayer: number): FpQuant | null {
    if (this.quant === null || this.scalesOf === null) return this.quant;
    const { kScale: k, vScale: v } = this.scalesOf(sparseLayer);
    // The kernels multiply by the f32 inverse (hsMirrorPages: 1.f / scale).
    return { k, v, invK: Math.fround(1 / k), invV: Math.fround(1 / v) };
  }
}

/** fp8 pages: scale and 1 / scale of K rows and of V rows. */
interface FpQuant {
  k: number;
  v: number;
  invK: number;
  invV: number;
}

/** e4m3 codes of one page: K rows (the first half) with 1 / kScale, V rows with 1 / vScale. */
function quantise(q: FpQuant, src: Float32Array, s0: number, dst: Uint8Array, d0: number, n: number): void {
  const half = n / 2;
  for (let i = 0; i < n; i++) dst[d0 + i] = floatToE4m3(src[s0 + i]! * (i < half ? q.invK : q.invV));
}

/** n values code * scale from codes at s0 into dst at d0. */
function dequantise(
  src: Uint8Array,
  s0: number,
  dst: Float32Array,
  d0: number,
  n: number,
  scale: number,
): void {
  for (let i = 0; i < n; i++) dst[d0 + i] = E4M3_VALUES[src[s0 + i]!]! * scale;
}
