import type { HostKvTier } from "../../attention/sparse/hot_buffer.js";
import type { Tensor } from "../../backends/backend.js";

/** Geometry of the host tier. */
export interface HostKvCacheSpec {
  numSparseLayers: number;
  numHostBlocks: number;
  blockSize: number;
  numKvHeads: number;
  headDim: number;
}

/**
 * The host tier on the CPU backend: per sparse layer an f32 array laid out as the device cache,
 * [numHostBlocks, 2, blockSize, Hkv, D], so a page mirror is one contiguous copy and a head slice
 * is 2 x blockSize rows of D values. On CUDA this is pinned host memory, mirrored by D2H copies
 * on a side stream and read by the resolver's gather kernel.
 */
export class CpuHostKvCache implements HostKvTier {
  /** Per sparse layer, [numHostBlocks, 2, blockSize, Hkv, D]. */
  readonly layers: Float32Array[];
  readonly sliceBytes: number;
  /** Elements of one page of one layer (K and V). */
  private readonly pageElems: number;

  /**
   * @param view host view of a device tensor's f32 elements (Backend.hostView).
   * @throws Error when the host tier cannot be allocated.
   */
  constructor(
    readonly spec: HostKvCacheSpec,
    private readonly view: (t: Tensor) => Float32Array,
  ) {
    const { numSparseLayers, numHostBlocks, blockSize, numKvHeads, headDim } = spec;
    this.pageElems = 2 * blockSize * numKvHeads * headDim;
    this.sliceBytes = 2 * blockSize * headDim * 4;
    try {
      this.layers = Array.from(
        { length: numSparseLayers },
        () => new Float32Array(numHostBlocks * this.pageElems),
      );
    } catch (e) {
      const gib = (numSparseLayers * numHostBlocks * this.pageElems * 4) / 2 ** 30;
      throw new Error(
        `the host KV pool (${gib.toFixed(2)} GiB) could not be allocated (${(e as Error).message})`,
      );
    }
  }

  /** Bytes of one page across the sparse layers (what a mirror copies). */
  get pageBytes(): number {
    return this.spec.numSparseLayers * this.pageElems * 4;
  }

  /**
   * Eager mirror of sparse layer `sparseLayer`: copies device block blockIds[i] of `kvCache`
   * to host block hostBlockIds[i], for every i.
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
    for (let i = 0; i < blockIds.length; i++) {
      const b = blockIds[i]! * n;
      dst.set(src.subarray(b, b + n), hostBlockIds[i]! * n);
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
    for (let i = 0; i < blockIds.length; i++) {
      const h = hostBlockIds[i]! * n;
      dst.set(src.subarray(h, h + n), blockIds[i]! * n);
    }
  }

  loadHeadSlice(sparseLayer: number, hostBlockId: number, g: number, kvCache: Tensor, blockId: number): void {
    const { blockSize: bs, numKvHeads: Hkv, headDim: D } = this.spec;
    const src = this.layers[sparseLayer]!;
    const dst = this.view(kvCache);
    const s0 = hostBlockId * this.pageElems + g * D;
    const d0 = blockId * this.pageElems + g * D;
    // Rows (k/v, offset) of the page, 2 * blockSize of them, each Hkv * D apart.
    for (let r = 0; r < 2 * bs; r++) {
      const o = r * Hkv * D;
      dst.set(src.subarray(s0 + o, s0 + o + D), d0 + o);
    }
  }
}
