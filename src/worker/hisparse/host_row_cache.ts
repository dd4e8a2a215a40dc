import type { HostRowTier } from "../../attention/sparse/dsa.js";
import type { Tensor } from "../../backends/backend.js";

/** Geometry of the host tier of latent rows. */
export interface HostRowCacheSpec {
  numSparseLayers: number;
  numHostBlocks: number;
  blockSize: number;
  /** Elements of one latent row (kvLoraRank + qkRopeHeadDim). */
  rowWidth: number;
}

/**
 * The host tier of an MLA model's latent rows on the CPU backend (DSA HiSparse): per sparse
 * layer an f32 array laid out as the device cache, [numHostBlocks, blockSize, C + R], so a page
 * mirror is one contiguous copy and a recalled row one copy of C + R values. The rows are the
 * same on every tensor-parallel rank (one latent row serves all heads), so one host copy per node
 * can serve every rank. On CUDA this is pinned host memory read by the resolver's gather kernel.
 */
export class CpuHostRowCache implements HostRowTier {
  /** Per sparse layer, the rows [numHostBlocks, blockSize, rowWidth] as a backend tensor (SpilledRows.hostRows). */
  readonly tensors: Tensor[];
  /** Per sparse layer, host views of {@link tensors}. */
  readonly layers: Float32Array[];
  readonly rowBytes: number;
  /** Elements of one page of one layer. */
  private readonly pageElems: number;

  /**
   * @param view host view of a device tensor's f32 elements (Backend.hostView).
   * @param allocate a zeroed f32 row tensor [numBlocks, blockSize, rowWidth] of the backend
   *   (BackendMlaOps.allocatePagedRows: on the CPU backend it is host memory).
   * @throws Error when the host tier cannot be allocated.
   */
  constructor(
    readonly spec: HostRowCacheSpec,
    private readonly view: (t: Tensor) => Float32Array,
    allocate: (numBlocks: number, blockSize: number, rowWidth: number) => Tensor,
  ) {
    const { numSparseLayers, numHostBlocks, blockSize, rowWidth } = spec;
    this.pageElems = blockSize * rowWidth;
    this.rowBytes = rowWidth * 4;
    try {
      this.tensors = Array.from({ length: numSparseLayers }, () =>
        allocate(numHostBlocks, blockSize, rowWidth),
      );
      this.layers = this.tensors.map((t) => view(t));
    } catch (e) {
      const gib = (numSparseLayers * numHostBlocks * this.pageElems * 4) / 2 ** 30;
      throw new Error(
        `the host latent-row pool (${gib.toFixed(2)} GiB) could not be allocated (${(e as Error).message})`,
      );
    }
  }

  /** Bytes of one page across the sparse layers (what a mirror copies). */
  get pageBytes(): number {
    return this.spec.numSparseLayers * this.pageElems * 4;
  }

  /** Eager mirror of sparse layer `sparseLayer`: device block blockIds[i] -> host block hostBlockIds[i]. */
  mirror(
    sparseLayer: number,
    latentCache: Tensor,
    blockIds: readonly number[],
    hostBlockIds: readonly number[],
  ): void {
    const src = this.view(latentCache);
    const dst = this.layers[sparseLayer]!;
    const n = this.pageElems;
    for (let i = 0; i < blockIds.length; i++) {
      const b = blockIds[i]! * n;
      dst.set(src.subarray(b, b + n), hostBlockIds[i]! * n);
    }
  }

  loadRows(sparseLayer: number, src: Int32Array, dst: Int32Array, latentCache: Tensor): void {
    const W = this.spec.rowWidth;
    const from = this.layers[sparseLayer]!;
    const to = this.view(latentCache);
    for (let i = 0; i < src.length; i++) {
      const s = src[i]! * W;
      to.set(from.subarray(s, s + W), dst[i]! * W);
    }
  }
}
