/**
 * What the engine's tensor-parallel executor needs of the workers' groups (vLLM's
 * parallel_state): the rendezvous the ranks build their communicators from. The layout of the
 * shared buffer is the collectives' (backends/collectives.ts).
 */
export { type CommunicatorRendezvous, createRendezvous } from "../backends/collectives.js";
