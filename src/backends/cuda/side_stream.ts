import type { HisparseNative, NativeEvent, NativeStream } from "./addon.js";

/**
 * A second CUDA stream for copies that overlap the compute stream (HiSparse's eager mirrors,
 * DESIGN.md §4), ordered against it with events only: no host synchronisation.
 *
 * Protocol, per batch of side work:
 *   side.afterCompute();   // side work starts after everything queued on compute so far
 *   ...launch on side.handle...
 *   side.recordDone();
 * and before compute work that must not overlap the side work (e.g. writing KV blocks the side
 * work reads): side.computeWaits() (a device-side wait of the compute stream). With several
 * marks (numMarks > 1), recordDone(m) / computeWaits(m) join pieces of side work one by one
 * (the DSA row prefetch: layer m's copies before layer m's attention). Inside a CUDA graph
 * capture of the compute stream the same calls fork and join the side stream into the graph;
 * every recorded mark must then be waited for before the capture ends.
 */
export class SideStream {
  private readonly stream: NativeStream;
  private readonly computeMark: NativeEvent;
  private readonly sideMarks: NativeEvent[];
  /** Per mark: true while side work was recorded that the compute stream has not been told to wait for. */
  private readonly pending: boolean[];
  private disposed = false;

  /**
   * @param computeStream handle of the compute stream
   * @param computeWaitEvent makes the compute stream wait for an event (CudaBackend.waitEvent)
   * @param numMarks marks the side work can be joined at (>= 1)
   */
  constructor(
    addon: HisparseNative,
    private readonly computeStream: number,
    private readonly computeWaitEvent: (eventHandle: number) => void,
    numMarks = 1,
  ) {
    this.stream = new addon.Stream({ nonBlocking: true });
    this.computeMark = new addon.Event();
    this.sideMarks = Array.from({ length: Math.max(1, numMarks) }, () => new addon.Event());
    this.pending = this.sideMarks.map(() => false);
  }

  /** Handle for the `stream` argument of launchers. */
  get handle(): number {
    return this.stream.handle;
  }

  /** Work queued on this stream from now on starts after all work queued on the compute stream so far. */
  afterCompute(): void {
    this.computeMark.record(this.computeStream);
    this.stream.waitEvent(this.computeMark.handle);
  }

  /** Marks the end of the side work queued so far (at mark `mark`). */
  recordDone(mark = 0): void {
    this.sideMarks[mark]!.record(this.stream.handle);
    this.pending[mark] = true;
  }

  /** Compute work queued from now on starts after the side work marked by recordDone(mark). */
  computeWaits(mark = 0): void {
    if (!this.pending[mark]) return;
    this.computeWaitEvent(this.sideMarks[mark]!.handle);
    this.pending[mark] = false;
  }

  /**
   * Forgets every pending mark without a wait: for marks recorded inside a CUDA graph capture
   * that was aborted (their work never ran, and their events belong to the dead capture).
   */
  discardPending(): void {
    this.pending.fill(false);
  }

  /** True while recordDone(mark) has not been followed by computeWaits(mark). */
  isPending(mark = 0): boolean {
    return this.pending[mark] === true;
  }

  /** Waits on the host for all side work (dispose, reallocation of buffers the side work reads). */
  synchronize(): void {
    this.stream.synchronize();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.stream.synchronize();
    this.computeMark.dispose();
    for (const m of this.sideMarks) m.dispose();
    this.stream.dispose();
  }
}
