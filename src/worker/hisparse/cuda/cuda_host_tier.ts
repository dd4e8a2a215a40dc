import { totalmem } from "node:os";
import type { DeviceHostTier } from "../../../attention/sparse/cuda/cuda_hot_buffer.js";
import type { Tensor } from "../../../backends/backend.js";
import type { CudaBackend, PinnedHostMemory } from "../../../backends/cuda/cuda_backend.js";
import type { DevicePtr } from "../../../backends/cuda/device_ptr.js";
import {
  BF16_HOST_KV,
  type HostKvFormat,
  loadPages,
  type MirrorInputs,
  mirrorPages,
} from "../../../backends/cuda/hisparse_ops.js";
import type { SideStream } from "../../../backends/cuda/side_stream.js";
import type { CudaTensor } from "../../../backends/cuda/tensor.js";

/**
 * Largest share of the machine's RAM that the default host pool (no --host-pool-gib) pins. The
 * default of the memory plan (HOST_POOL_DEFAULT_RATIO x the device pool's pages) would ask a GPU
 * with more device memory than the host has RAM for more pinned memory than exists.
 */
export const DEFAULT_HOST_POOL_MAX_RAM_FRACTION = 0.5;

/** The default host pool's cap in bytes for one rank: every rank pins its own host tier, the ranks share the cap. */
export function defaultHostPoolMaxBytes(tensorParallelSize: number): number {
  return Math.floor((totalmem() * DEFAULT_HOST_POOL_MAX_RAM_FRACTION) / tensorParallelSize);
}

/** Geometry of the host tier. */
export interface CudaHostTierSpec {
  numSparseLayers: number;
  numHostBlocks: number;
  blockSize: number;
  numKvHeads: number;
  headDim: number;
  /** Element type of the pages (`host_kv_cache_dtype`); absent: bf16, the cache's. */
  format?: HostKvFormat;
}

/** Bytes of one host element per format. */
const HOST_ELEMENT_BYTES: Readonly<Record<HostKvFormat["dtype"], number>> = { bf16: 2, fp8: 1 };

/**
 * The host tier on CUDA (DESIGN.md §4): per sparse layer, pinned host memory mapped into the
 * device address space, laid out head-major ([numHostBlocks, Hkv, 2, blockSize, D] bf16, or fp8
 * e4m3 codes with `host_kv_cache_dtype` fp8: the mirror kernel quantises, the resolver's copy and
 * the load dequantise, so a miss moves half the bytes) so that the resolver kernel reads one
 * contiguous slice per (page, kv head) with 16-byte UVA loads.
 * Eager mirrors: after a step's forward, the pages it filled are copied device -> host by one
 * kernel (every sparse layer) on a side stream that starts after the forward (event); the next
 * step's forward waits for it on the device (`beforeForward`), so a spilled block is never
 * rewritten while its mirror still reads it. Spills copy nothing: the scheduler only drops
 * device blocks of mirrored pages.
 */
export class CudaHostKvTier implements DeviceHostTier {
  /** Per sparse layer, the pinned memory. */
  readonly layers: PinnedHostMemory[] = [];
  /** Bytes of one (page, sparse layer, kv head) slice: K and V of blockSize tokens. */
  readonly sliceBytes: number;
  /** Bytes of one page over every sparse layer (what a mirror copies). */
  readonly pageBytes: number;
  /** How the pages are held (element type, scales). */
  readonly format: HostKvFormat;
  private readonly side: SideStream;
  /** i32 [2 * numSparseLayers]: cache and host addresses as (low, high) words. */
  private readonly cachePtrs: Tensor;
  private readonly hostPtrs: Tensor;
  /** Mirror arguments (persistent: the side stream reads them after the step's workspace is recycled). */
  private args: { blockIds: Tensor; hostBlockIds: Tensor; capacity: number } | null = null;
  /** Load arguments (written and read on the compute stream). */
  private loadArgs: { blockIds: Tensor; hostBlockIds: Tensor; capacity: number } | null = null;

  /**
   * @param sparseKvCaches the main pool's tensor of each sparse layer, in sparse-layer order.
   * @throws Error when the pinned memory cannot be allocated (the message names its size).
   */
  constructor(
    private readonly backend: CudaBackend,
    readonly spec: CudaHostTierSpec,
    private readonly sparseKvCaches: readonly Tensor[],
  ) {
    const { numSparseLayers: L, numHostBlocks, blockSize: bs, numKvHeads: Hkv, headDim: D } = spec;
    this.format = spec.format ?? BF16_HOST_KV;
    const elementBytes = HOST_ELEMENT_BYTES[this.format.dtype];
    const layerPage = 2 * bs * Hkv * D * elementBytes;
    this.sliceBytes = 2 * bs * D * elementBytes;
    this.pageBytes = L * layerPage;
    try {
      for (let l = 0; l < L; l++)
        this.layers.push(backend.allocatePinned(Math.max(1, numHostBlocks * layerPage)));
    } catch (e) {
      for (const m of this.layers) m.dispose();
      const gib = (L * numHostBlocks * layerPage) / 2 ** 30;
      throw new Error(
        `the host KV pool (${gib.toFixed(2)} GiB of pinned memory) could not be allocated; lower --host-pool-gib (${(e as Error).message})`,
      );
    }
    const words = (addrs: number[]) => {
      const w = new Int32Array(2 * addrs.length);
      addrs.forEach((a, i) => {
        w[2 * i] = (a % 2 ** 32) | 0;
        w[2 * i + 1] = Math.floor(a / 2 ** 32) | 0;
      });
      return w;
    };
    const cacheAddrs = sparseKvCaches.map((t) => backend.dev(t, "host tier kvCache").ptr);
    this.cachePtrs = backend.upload(words(cacheAddrs), [2 * L], "i32");
    this.hostPtrs = backend.upload(words(this.layers.map((m) => m.ptr)), [2 * L], "i32");
    this.side = backend.createSideStream();
  }

  /** Host blocks per sparse layer. */
  get numHostBlocks(): number {
    return this.spec.numHostBlocks;
  }

  /** Device-visible address of a sparse layer's host tier. */
  layerPtr(sparseLayer: number): DevicePtr {
    return this.layers[sparseLayer]!.ptr;
  }

  /**
   * Eager mirror: copies device block blockIds[i] to host block hostBlockIds[i], every sparse
   * layer, on the side stream after the work queued so far (the step's forward).
   */
  mirror(blockIds: readonly number[], hostBlockIds: readonly number[]): void {
    const n = blockIds.length;
    if (n === 0) return;
    const args = this.copyArgs(this.argsFor(n), blockIds, hostBlockIds);
    this.side.afterCompute();
    mirrorPages(this.backend, this.side.handle, args);
    this.side.recordDone();
  }

  /**
   * Loads host block hostBlockIds[i] into device block blockIds[i], every sparse layer, on the
   * compute stream after the mirrors issued so far (prefix-cache hits on host-resident pages;
   * the step's forward then reads them in place). Uses its own argument tensors, so the side
   * stream's mirror arguments are never rewritten under it.
   */
  load(blockIds: readonly number[], hostBlockIds: readonly number[]): void {
    const n = blockIds.length;
    if (n === 0) return;
    this.side.computeWaits();
    if (this.loadArgs === null || this.loadArgs.capacity < n) {
      const capacity = Math.max(n, 2 * (this.loadArgs?.capacity ?? 64));
      if (this.loadArgs !== null) {
        this.backend.synchronize(); // an earlier load may still read the old tensors
        this.backend.free(this.loadArgs.blockIds);
        this.backend.free(this.loadArgs.hostBlockIds);
      }
      const up = () => this.backend.upload(new Int32Array(capacity).fill(-1), [capacity], "i32");
      this.loadArgs = { blockIds: up(), hostBlockIds: up(), capacity };
    }
    // The id uploads and the kernel are ordered on the compute stream.
    loadPages(this.backend, this.backend.stream, this.copyArgs(this.loadArgs, blockIds, hostBlockIds));
  }

  /** The page-copy arguments over `t` (writing the ids first when given). */
  private copyArgs(
    t: { blockIds: Tensor; hostBlockIds: Tensor; capacity: number },
    blockIds: readonly number[] | null,
    hostBlockIds: readonly number[] | null,
  ): MirrorInputs {
    if (blockIds !== null && hostBlockIds !== null) {
      this.backend.writeRange(t.blockIds, 0, Int32Array.from(blockIds));
      this.backend.writeRange(t.hostBlockIds, 0, Int32Array.from(hostBlockIds));
    }
    const { numSparseLayers: L, numHostBlocks, blockSize, numKvHeads, headDim } = this.spec;
    return {
      kvCachePtrs: this.cachePtrs,
      hostTierPtrs: this.hostPtrs,
      blockIds: t.blockIds,
      hostBlockIds: t.hostBlockIds,
      count: blockIds?.length ?? t.capacity,
      numLayers: L,
      numKvHeads,
      headDim,
      blockSize,
      numBlocks: (this.sparseKvCaches[0] as CudaTensor | undefined)?.shape[0] ?? 0,
      numHostBlocks,
      hostFormat: this.format,
    };
  }

  /** Makes the compute stream wait (on the device) for the mirrors issued so far. */
  beforeForward(): void {
    this.side.computeWaits();
  }

  /** Waits for every mirror and frees the pinned memory. */
  dispose(): void {
    this.side.dispose();
    for (const a of [this.args, this.loadArgs]) {
      if (a === null) continue;
      this.backend.free(a.blockIds);
      this.backend.free(a.hostBlockIds);
    }
    this.backend.free(this.cachePtrs);
    this.backend.free(this.hostPtrs);
    for (const m of this.layers) m.dispose();
    this.layers.length = 0;
  }

  /** Argument tensors holding at least n entries (grown after the side stream drained). */
  private argsFor(n: number): { blockIds: Tensor; hostBlockIds: Tensor; capacity: number } {
    if (this.args !== null && this.args.capacity >= n) return this.args;
    const capacity = Math.max(n, 2 * (this.args?.capacity ?? 64));
    if (this.args !== null) {
      this.side.synchronize(); // the side stream may still read the old tensors
      this.backend.free(this.args.blockIds);
      this.backend.free(this.args.hostBlockIds);
    }
    const up = () => this.backend.upload(new Int32Array(capacity).fill(-1), [capacity], "i32");
    this.args = { blockIds: up(), hostBlockIds: up(), capacity };
    return this.args;
  }
}
