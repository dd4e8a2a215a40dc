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
 * work reads): side.computeWaits() (a device-side wait of the compute stream).
 */
export class SideStream {
  private readonly stream: NativeStream;
  private readonly computeMark: NativeEvent;
  private readonly sideMark: NativeEvent;
  /** True while side work was recorded that the compute stream has not been told to wait for. */
  private pending = false;
  private disposed = false;

  /**
   * @param computeStream handle of the compute stream
   * @param computeWaitEvent makes the compute stream wait for an event (CudaBackend.waitEvent)
   */
  constructor(
    addon: HisparseNative,
    private readonly computeStream: number,
    private readonly computeWaitEvent: (eventHandle: number) => void,
  ) {
    this.stream = new addon.Stream({ nonBlocking: true });
    this.computeMark = new addon.Event();
    this.sideMark = new addon.Event();
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

  /** Marks the end of the side work queued so far. */
  recordDone(): void {
    this.sideMark.record(this.stream.handle);
    this.pending = true;
  }

  /** Compute work queued from now on starts after the side work marked by recordDone(). */
  computeWaits(): void {
    if (!this.pending) return;
    this.computeWaitEvent(this.sideMark.handle);
    this.pending = false;
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
    this.sideMark.dispose();
    this.stream.dispose();
  }
}
