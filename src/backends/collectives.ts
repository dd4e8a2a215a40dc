/**
 * Collective communication between the ranks of a tensor-parallel group (vLLM's
 * device_communicators): what the Megatron layout needs, all-reduce (sum) after each
 * row-parallel linear and all-gather of the vocab-parallel logits. Every rank calls the same
 * collectives in the same order (lock-step); a call returns when the rank's result is in place
 * (CPU) or is enqueued on the backend's stream (CUDA: NCCL, captured into decode graphs).
 *
 * Implementations: `cpu/cpu_communicator.ts` (worker threads over one SharedArrayBuffer with
 * Atomics, the oracle, in CI) and `cuda/nccl_communicator.ts` (NCCL loaded at run time).
 */
import type { Tensor } from "./backend.js";

export interface DeviceCommunicator {
  readonly rank: number;
  readonly worldSize: number;
  /** "shared memory" or "NCCL 2.28.3": the start-up log names it. */
  readonly description: string;
  /**
   * x = sum over ranks of x, in place, for f32/bf16 activations [..]. Every rank gets the same
   * bits (the CPU sums in rank order; NCCL's ring is deterministic for a fixed size and topology).
   */
  allReduce(x: Tensor): void;
  /**
   * Concatenates every rank's x [rows, cols] along the last dim: out [rows, worldSize * cols],
   * rank r's columns at [r * cols, (r + 1) * cols) (a workspace tensor of x's dtype).
   */
  allGatherColumns(x: Tensor): Tensor;
  /** Releases the communicator (NCCL: ncclCommDestroy). */
  dispose(): void;
}

/**
 * What the ranks share to meet (made by the engine's executor, handed to every rank thread):
 * one SharedArrayBuffer, whose layout the CPU communicator defines (a barrier, the NCCL unique
 * id that rank 0 publishes, and the CPU collectives' exchange slots).
 */
export interface CommunicatorRendezvous {
  buffer: SharedArrayBuffer;
  worldSize: number;
}

/** Int32 words of the rendezvous header: barrier count, barrier generation, id-ready flag, the id. */
export const RENDEZVOUS_HEADER_BYTES = 256;
/** f32 elements of each rank's exchange slot (collectives larger than this go in chunks). */
export const RENDEZVOUS_SLOT_ELEMS = 1 << 18;

/** A rendezvous for `worldSize` ranks: header + worldSize slots of RENDEZVOUS_SLOT_ELEMS f32. */
export function createRendezvous(worldSize: number): CommunicatorRendezvous {
  const bytes = RENDEZVOUS_HEADER_BYTES + worldSize * RENDEZVOUS_SLOT_ELEMS * 4;
  return { buffer: new SharedArrayBuffer(bytes), worldSize };
}

/** Word indices of the rendezvous header (Int32Array over its first RENDEZVOUS_HEADER_BYTES). */
export const RV = { COUNT: 0, GENERATION: 1, ID_READY: 2, ID_BYTES: 3, ID: 4 } as const;

/**
 * Waits until every rank of the rendezvous has called it (a sense-counting barrier on
 * Atomics.wait / notify; the generation is read before arriving, so a fast rank that arrives at
 * the next barrier cannot be mistaken for this one).
 */
export function rendezvousBarrier(rv: CommunicatorRendezvous): void {
  const h = new Int32Array(rv.buffer, 0, RENDEZVOUS_HEADER_BYTES / 4);
  const gen = Atomics.load(h, RV.GENERATION);
  if (Atomics.add(h, RV.COUNT, 1) === rv.worldSize - 1) {
    Atomics.store(h, RV.COUNT, 0);
    Atomics.add(h, RV.GENERATION, 1);
    Atomics.notify(h, RV.GENERATION);
    return;
  }
  while (Atomics.load(h, RV.GENERATION) === gen) Atomics.wait(h, RV.GENERATION, gen);
}

/** Rank 0 publishes `id` (an NCCL unique id, 128 bytes) to the other ranks. */
export function publishUniqueId(rv: CommunicatorRendezvous, id: Uint8Array): void {
  const h = new Int32Array(rv.buffer, 0, RENDEZVOUS_HEADER_BYTES / 4);
  const max = RENDEZVOUS_HEADER_BYTES - RV.ID * 4;
  if (id.length > max) throw new Error(`a unique id of ${id.length} bytes does not fit in ${max}`);
  new Uint8Array(rv.buffer, RV.ID * 4, id.length).set(id);
  Atomics.store(h, RV.ID_BYTES, id.length);
  Atomics.store(h, RV.ID_READY, 1);
  Atomics.notify(h, RV.ID_READY);
}

/** The id rank 0 published, waiting for it. */
export function awaitUniqueId(rv: CommunicatorRendezvous): Uint8Array {
  const h = new Int32Array(rv.buffer, 0, RENDEZVOUS_HEADER_BYTES / 4);
  while (Atomics.load(h, RV.ID_READY) === 0) Atomics.wait(h, RV.ID_READY, 0);
  return new Uint8Array(rv.buffer, RV.ID * 4, Atomics.load(h, RV.ID_BYTES)).slice();
}
