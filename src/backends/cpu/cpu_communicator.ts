import type { Tensor } from "../backend.js";
import {
  type CommunicatorRendezvous,
  type DeviceCommunicator,
  RENDEZVOUS_HEADER_BYTES,
  RENDEZVOUS_SLOT_ELEMS,
  rendezvousBarrier,
} from "../collectives.js";
import type { CpuBackend } from "./cpu_backend.js";
import { CpuTensor } from "./tensor.js";

/**
 * The collectives of CPU backend ranks, one worker thread each, over the rendezvous
 * SharedArrayBuffer: each rank copies its chunk into its slot, a barrier, each rank reads every
 * slot, a barrier (so no slot is overwritten while a rank still reads it). All-reduce sums the
 * slots in rank order 0, 1, ..., so every rank computes the same f32 bits. The oracle of the
 * NCCL path (CI runs TP=2/4 with it).
 */
export class CpuCommunicator implements DeviceCommunicator {
  readonly description = "shared memory (worker threads, Atomics)";
  private readonly slots: Float32Array[];

  constructor(
    private readonly backend: CpuBackend,
    private readonly rv: CommunicatorRendezvous,
    readonly rank: number,
  ) {
    this.slots = Array.from(
      { length: rv.worldSize },
      (_, r) =>
        new Float32Array(
          rv.buffer,
          RENDEZVOUS_HEADER_BYTES + r * RENDEZVOUS_SLOT_ELEMS * 4,
          RENDEZVOUS_SLOT_ELEMS,
        ),
    );
  }

  get worldSize(): number {
    return this.rv.worldSize;
  }

  /** @throws Error when x is not an f32 CPU tensor. */
  allReduce(x: Tensor): void {
    const v = f32Of(x, "allReduce");
    const mine = this.slots[this.rank]!;
    for (let c = 0; c < v.length; c += RENDEZVOUS_SLOT_ELEMS) {
      const n = Math.min(RENDEZVOUS_SLOT_ELEMS, v.length - c);
      mine.set(v.subarray(c, c + n));
      rendezvousBarrier(this.rv);
      const first = this.slots[0]!;
      for (let i = 0; i < n; i++) {
        let s = first[i]!;
        for (let r = 1; r < this.slots.length; r++) s += this.slots[r]![i]!;
        v[c + i] = s;
      }
      rendezvousBarrier(this.rv);
    }
  }

  /** @throws Error when x is not a rank-2 f32 CPU tensor. */
  allGatherColumns(x: Tensor): Tensor {
    const v = f32Of(x, "allGatherColumns");
    const [rows, cols] = [x.shape[0]!, x.shape[1]!];
    if (x.shape.length !== 2) throw new Error(`allGatherColumns: x must be [rows, cols], got [${x.shape}]`);
    const N = this.worldSize;
    const out = this.backend.stage(new Float32Array(rows * N * cols), [rows, N * cols], "f32") as CpuTensor;
    const o = out.f32;
    const mine = this.slots[this.rank]!;
    // Chunks of whole rows: each slot holds `rowsPer` rows of one rank.
    const rowsPer = Math.max(1, Math.floor(RENDEZVOUS_SLOT_ELEMS / cols));
    if (cols > RENDEZVOUS_SLOT_ELEMS) throw new Error(`allGatherColumns: rows of ${cols} exceed a slot`);
    for (let r0 = 0; r0 < rows; r0 += rowsPer) {
      const n = Math.min(rowsPer, rows - r0);
      mine.set(v.subarray(r0 * cols, (r0 + n) * cols));
      rendezvousBarrier(this.rv);
      for (let r = 0; r < N; r++) {
        const slot = this.slots[r]!;
        for (let i = 0; i < n; i++)
          o.set(slot.subarray(i * cols, (i + 1) * cols), (r0 + i) * N * cols + r * cols);
      }
      rendezvousBarrier(this.rv);
    }
    return out;
  }

  dispose(): void {}
}

function f32Of(x: Tensor, what: string): Float32Array {
  if (!(x instanceof CpuTensor) || x.dtype !== "f32") throw new Error(`${what}: not an f32 CPU tensor`);
  return x.f32;
}
