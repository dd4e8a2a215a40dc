/** The optional CUDA-graph capability of a backend (Backend.graphs, backend.ts). */

/** An instantiated device graph (opaque; made by BackendGraphs.capture). */
export interface GraphHandle {
  readonly id: number;
}

/**
 * Optional capability: record a sequence of ops once and replay it with one launch (CUDA graphs).
 * Rules for the recorded function: every input it reads must live in persistent tensors (written
 * with writeTensor before each replay), no host reads (toHost), no allocation of persistent
 * tensors, no staging. The workspace tensors it returns or creates are the graph's outputs: after
 * a replay they hold the new results and stay valid until the next resetWorkspace(). Persistent
 * tensors that a graph reads must outlive it.
 */
export interface BackendGraphs {
  /**
   * Runs `fn` once under capture (its ops are recorded, not executed) and instantiates the graph.
   * Run the same sequence eagerly once first (warm-up), as vLLM does. @throws Error when fn throws
   * or does something that cannot be captured; nothing is left half-captured.
   */
  capture(fn: () => void): GraphHandle;
  /** Launches the graph on the backend's stream (asynchronous, like every op). */
  replay(g: GraphHandle): void;
  /** Frees the graph. */
  dispose(g: GraphHandle): void;
}
