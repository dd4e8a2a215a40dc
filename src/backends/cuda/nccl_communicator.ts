import { ConfigError } from "../../config/engine_args.js";
import type { DType, Tensor } from "../backend.js";
import {
  awaitUniqueId,
  type CommunicatorRendezvous,
  type DeviceCommunicator,
  publishUniqueId,
  rendezvousBarrier,
} from "../collectives.js";
import { DTYPE_CODE } from "./addon.js";
import { ncclVersionString } from "./addon_nccl.js";
import type { CudaBackend } from "./cuda_backend.js";
import { CudaTensor } from "./tensor.js";

/**
 * The collectives of CUDA ranks through NCCL (loaded at run time, addon_nccl.ts), one
 * communicator per rank made with ncclCommInitRank from a unique id that rank 0 publishes in the
 * rendezvous. Collectives are enqueued on the backend's stream, so a decode step that calls them
 * is captured into its CUDA graph with them (vLLM's PyNcclCommunicator does the same).
 */
export class NcclCommunicator implements DeviceCommunicator {
  readonly description: string;
  /** i32 [B * N] row orders of the gathered logits, per batch size B (persistent, made eagerly). */
  private readonly gatherOrders = new Map<number, Tensor>();
  private comm: number;

  private constructor(
    private readonly backend: CudaBackend,
    comm: number,
    readonly rank: number,
    readonly worldSize: number,
    version: number,
  ) {
    this.comm = comm;
    this.description = `NCCL ${ncclVersionString(version)}`;
  }

  /**
   * Joins the group: rank 0 makes the unique id and publishes it; every rank then calls
   * ncclCommInitRank on its device (blocking until all have).
   * @throws ConfigError when NCCL cannot be loaded (one sentence).
   */
  static create(backend: CudaBackend, rv: CommunicatorRendezvous, rank: number): NcclCommunicator {
    const a = backend.addon;
    let version: number;
    try {
      version = a.ncclInfo().version;
    } catch (e) {
      // The other ranks are released by the error of this one (the executor stops every thread).
      throw new ConfigError([(e as Error).message]);
    }
    if (rank === 0) publishUniqueId(rv, a.ncclGetUniqueId());
    const id = awaitUniqueId(rv);
    const comm = a.ncclCommInitRank(id, rv.worldSize, rank);
    rendezvousBarrier(rv);
    return new NcclCommunicator(backend, comm, rank, rv.worldSize, version);
  }

  allReduce(x: Tensor): void {
    const t = this.backend.dev(x, "allReduce");
    const a = this.backend.addon;
    a.ncclAllReduce(this.backend.stream, this.comm, t.ptr, t.ptr, t.numel, code(t.dtype));
  }

  /**
   * NCCL gathers rank-major ([N * rows, cols]); a row gather in the order (row, rank) then
   * reads as [rows, N * cols].
   */
  allGatherColumns(x: Tensor): Tensor {
    const b = this.backend;
    const t = b.dev(x, "allGatherColumns");
    if (t.shape.length !== 2) throw new Error(`allGatherColumns: x must be [rows, cols], got [${t.shape}]`);
    const [rows, cols] = [t.shape[0]!, t.shape[1]!];
    const N = this.worldSize;
    const gathered = b.out([N * rows, cols], t.dtype);
    b.addon.ncclAllGather(b.stream, this.comm, t.ptr, gathered.ptr, t.numel, code(t.dtype));
    if (N === 1) return gathered;
    const ordered = b.dev(b.gatherRows(gathered, this.gatherOrder(rows)), "allGatherColumns");
    return new CudaTensor([rows, N * cols], ordered.dtype, ordered.ptr, ordered.kind, ordered.generation);
  }

  /** i32 [rows * N]: entry b * N + r = r * rows + b. Made on first use (the eager warm-up before a graph capture). */
  private gatherOrder(rows: number): Tensor {
    let order = this.gatherOrders.get(rows);
    if (order === undefined) {
      const N = this.worldSize;
      const idx = new Int32Array(rows * N);
      for (let b = 0; b < rows; b++) for (let r = 0; r < N; r++) idx[b * N + r] = r * rows + b;
      order = this.backend.upload(idx, [rows * N], "i32");
      this.gatherOrders.set(rows, order);
    }
    return order;
  }

  dispose(): void {
    for (const t of this.gatherOrders.values()) this.backend.free(t);
    this.gatherOrders.clear();
    if (this.comm !== 0) this.backend.addon.ncclCommDestroy(this.comm);
    this.comm = 0;
  }
}

function code(dtype: DType): number {
  return DTYPE_CODE[dtype];
}
