import type { Tensor } from "../../../backends/backend.js";
import type { CudaBackend } from "../../../backends/cuda/cuda_backend.js";
import type { DevicePtr } from "../../../backends/cuda/device_ptr.js";
import { type HostKvFormat, type ResolverState, resolve } from "../../../backends/cuda/hisparse_ops.js";
import type {
  DeviceHotBufferResolver,
  DevicePageSelection,
  DeviceResolvedPages,
  DeviceSparseRows,
} from "../device_sparse.js";

/**
 * The per-request state the device resolver reads and updates: page tables, hot blocks, LRU
 * state and counters, one row per request slot (backends/cuda/hisparse_ops.ts ResolverState),
 * kept by the worker (worker/hisparse/cuda/slot_tables.ts).
 */
export interface DeviceResolverTables {
  readonly state: ResolverState;
}

/** The host tier as the device resolver reads it: pinned host memory mapped into the device's address space. */
export interface DeviceHostTier {
  /** Host blocks per sparse layer. */
  readonly numHostBlocks: number;
  /** How the pages are held: bf16, or fp8 e4m3 dequantised by the resolver's copy. */
  readonly format: HostKvFormat;
  /** Device-visible address of a sparse layer's tier, [numHostBlocks, Hkv, 2, blockSize, D] of `format`. */
  layerPtr(sparseLayer: number): DevicePtr;
}

/**
 * The hot-buffer resolver on CUDA (the device twin of LruHotBufferResolver, hot_buffer.ts, its
 * oracle): per sparse layer, hsResolve's plan kernel marks hits, takes LRU victims for misses and
 * writes the per-head tables and a miss list, then its SM-wide copy pass reads the misses' K/V
 * from the pinned host tier (UVA, dequantising fp8 pages).
 */
export class CudaLruResolver implements DeviceHotBufferResolver {
  constructor(
    private readonly backend: CudaBackend,
    private readonly tables: DeviceResolverTables,
    private readonly hostTier: DeviceHostTier,
    private readonly blockSize: number,
  ) {}

  resolve(
    sparseLayer: number,
    selection: DevicePageSelection,
    rows: DeviceSparseRows,
    kvCache: Tensor,
  ): DeviceResolvedPages {
    return resolve(this.backend, {
      selection,
      rowFlags: rows.rowFlags,
      seqLens: rows.seqLens,
      reqSlot: rows.reqSlot,
      state: this.tables.state,
      layer: sparseLayer,
      kvCache,
      hostTierPtr: this.hostTier.layerPtr(sparseLayer),
      numHostBlocks: this.hostTier.numHostBlocks,
      blockSize: this.blockSize,
      hostFormat: this.hostTier.format,
    });
  }
}
