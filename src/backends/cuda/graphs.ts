import type { BackendGraphs, GraphHandle } from "../backend.js";
import type { HisparseNative, NativeCudaGraph } from "./addon.js";
import type { CudaTensor } from "./tensor.js";

/** What CudaGraphs needs from the backend. */
export interface GraphHost {
  readonly addon: HisparseNative;
  /** Handle of the backend's stream. */
  readonly stream: number;
  /** Bytes of the step workspace in use. */
  workspaceUsed(): number;
  /** Marks [0, bytes) of the workspace as in use. */
  markWorkspaceUsed(bytes: number): void;
  /** Current workspace generation (see CudaTensor.generation). */
  workspaceGeneration(): number;
  /** Starts (list) or stops (null) recording the workspace tensors that ops create. */
  setCaptureLog(log: CudaTensor[] | null): void;
}

interface CapturedGraph {
  native: NativeCudaGraph;
  /** Workspace region [wsStart, wsEnd) that the graph's kernels read and write. */
  wsStart: number;
  wsEnd: number;
  /** Workspace tensors created during capture: the graph's outputs and intermediates. */
  tensors: CudaTensor[];
}

/**
 * CUDA graph capture and replay for the CUDA backend (Backend.graphs).
 *
 * Workspace rule: the captured kernels use fixed workspace addresses, the region
 * [wsStart, wsEnd) that the capture's ops were given. A replay therefore needs that region free
 * (the workspace at most wsStart bytes full, normally right after resetWorkspace()), and marks it
 * used afterwards, so that ops after the replay (sampling, reading the logits) do not overwrite the
 * graph's outputs. The workspace tensors created during capture become valid again at each replay
 * (their generation is refreshed) until the next resetWorkspace().
 */
export class CudaGraphs implements BackendGraphs {
  private readonly graphs = new Map<number, CapturedGraph>();
  private nextId = 1;
  private capturing = false;

  constructor(private readonly host: GraphHost) {}

  /** True while capture(fn) runs fn. */
  get isCapturing(): boolean {
    return this.capturing;
  }

  /** Number of live graphs. */
  get size(): number {
    return this.graphs.size;
  }

  capture(fn: () => void): GraphHandle {
    if (this.capturing) throw new Error("graph capture cannot be nested");
    const h = this.host;
    const native = new h.addon.CudaGraph();
    const tensors: CudaTensor[] = [];
    const wsStart = h.workspaceUsed();
    native.captureBegin(h.stream);
    this.capturing = true;
    h.setCaptureLog(tensors);
    try {
      fn();
    } catch (err) {
      native.captureAbort();
      native.dispose();
      throw err;
    } finally {
      this.capturing = false;
      h.setCaptureLog(null);
    }
    try {
      native.captureEnd();
    } catch (err) {
      native.dispose();
      throw err;
    }
    const id = this.nextId++;
    this.graphs.set(id, { native, wsStart, wsEnd: h.workspaceUsed(), tensors });
    return { id };
  }

  replay(g: GraphHandle): void {
    const c = this.get(g);
    if (this.capturing) throw new Error("a graph cannot be replayed while another is being captured");
    const h = this.host;
    if (h.workspaceUsed() > c.wsStart) {
      throw new Error(
        `graph ${g.id} writes workspace bytes [${c.wsStart}, ${c.wsEnd}) but ${h.workspaceUsed()} are in use: call resetWorkspace() before replay`,
      );
    }
    c.native.launch(h.stream);
    h.markWorkspaceUsed(c.wsEnd);
    const gen = h.workspaceGeneration();
    for (const t of c.tensors) t.generation = gen;
  }

  dispose(g: GraphHandle): void {
    const c = this.get(g);
    c.native.dispose();
    this.graphs.delete(g.id);
  }

  /** Number of kernel/memcpy nodes of a graph (diagnostics, tests). */
  numNodes(g: GraphHandle): number {
    return this.get(g).native.numNodes;
  }

  /** Frees every graph. */
  disposeAll(): void {
    for (const c of this.graphs.values()) c.native.dispose();
    this.graphs.clear();
  }

  private get(g: GraphHandle): CapturedGraph {
    const c = this.graphs.get(g.id);
    if (c === undefined) throw new Error(`unknown or disposed graph ${g.id}`);
    return c;
  }
}
