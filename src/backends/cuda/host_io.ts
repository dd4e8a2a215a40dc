import { DTYPE_BYTES, type DType } from "../backend.js";
import { E4M3_VALUES } from "../fp8.js";
import { DTYPE_CODE, type HisparseNative, type NativeEvent, type NativePinnedBuffer } from "./addon.js";
import { type DevicePtr, offsetPtr } from "./device_ptr.js";
import { bf16ArrayToF32, f16ArrayToF32 } from "./half.js";

/** Alignment of each staged chunk inside the pinned buffer (bytes). */
const CHUNK_ALIGN = 256;

/**
 * Host <-> device copies through pinned memory, so that uploads are truly asynchronous and run
 * at full PCIe speed (a copy from pageable memory is staged by the driver and blocks).
 *
 * Uploads: the caller's bytes are copied (memcpy) into a pinned staging buffer and an async H2D
 * copy is queued on the stream; the caller may reuse its array at once. The staging buffer is a
 * bump region: when it is full, the stream is synchronised and the region starts over; recycle()
 * (called by resetWorkspace) waits for the last queued copy and starts over too.
 *
 * Reads: device -> a pinned readback buffer -> the caller's array, in chunks, synchronously.
 */
export class HostStaging {
  private readonly upload: NativePinnedBuffer;
  private readonly readback: NativePinnedBuffer;
  private readonly uploadBytes: Uint8Array;
  private readonly readbackBytes: Uint8Array;
  private readonly lastCopy: NativeEvent;
  private offset = 0;
  private pending = false;

  /**
   * @param bytes size of each of the two pinned buffers (upload, readback)
   * @param stream the backend stream every copy is queued on
   */
  constructor(
    private readonly addon: HisparseNative,
    bytes: number,
    private readonly stream: number,
  ) {
    this.upload = new addon.PinnedBuffer(bytes);
    this.readback = new addon.PinnedBuffer(bytes);
    this.uploadBytes = new Uint8Array(this.upload.buffer);
    this.readbackBytes = new Uint8Array(this.readback.buffer);
    this.lastCopy = new addon.Event();
  }

  /** Capacity of each pinned buffer in bytes. */
  get capacity(): number {
    return this.uploadBytes.length;
  }

  /** Queues an async copy of `src` (all its bytes) to device address `dst` on the stream. */
  toDevice(dst: DevicePtr, src: ArrayBufferView): void {
    const bytes = new Uint8Array(src.buffer, src.byteOffset, src.byteLength);
    const cap = this.uploadBytes.length;
    let pos = 0;
    while (pos < bytes.length) {
      if (this.offset >= cap) this.drain();
      const n = Math.min(bytes.length - pos, cap - this.offset);
      this.uploadBytes.set(bytes.subarray(pos, pos + n), this.offset);
      this.addon.memcpyAsync(offsetPtr(dst, pos), offsetPtr(this.upload.ptr, this.offset), n, this.stream);
      this.offset = Math.ceil((this.offset + n) / CHUNK_ALIGN) * CHUNK_ALIGN;
      pos += n;
    }
    if (bytes.length > 0) {
      this.lastCopy.record(this.stream);
      this.pending = true;
    }
  }

  /** Copies `dst.byteLength` bytes from device address `src` into `dst`; returns when done. */
  toHost(dst: ArrayBufferView, src: DevicePtr): void {
    const out = new Uint8Array(dst.buffer, dst.byteOffset, dst.byteLength);
    const cap = this.readbackBytes.length;
    for (let pos = 0; pos < out.length; pos += cap) {
      const n = Math.min(cap, out.length - pos);
      this.addon.memcpyAsync(this.readback.ptr, offsetPtr(src, pos), n, this.stream);
      this.syncStream();
      out.set(this.readbackBytes.subarray(0, n), pos);
    }
  }

  /** Waits for the queued uploads, then reuses the staging buffer from its start. */
  recycle(): void {
    if (this.pending) {
      this.lastCopy.synchronize();
      this.pending = false;
    }
    this.offset = 0;
  }

  dispose(): void {
    this.recycle();
    this.lastCopy.dispose();
    this.upload.dispose();
    this.readback.dispose();
  }

  /** Staging buffer full: wait for every queued copy (and kernel) on the stream, then start over. */
  private drain(): void {
    this.syncStream();
    this.pending = false;
    this.offset = 0;
  }

  private syncStream(): void {
    // The stream object is owned by the backend; an event round trip keeps this class independent of it.
    this.lastCopy.record(this.stream);
    this.lastCopy.synchronize();
  }
}

/** What a converting upload uses: the cast kernel's addon, the staging buffers, the stream, a device scratch. */
export interface UploadConversion {
  addon: HisparseNative;
  staging: HostStaging;
  /** Stream handle the copies and casts are queued on. */
  stream: number;
  /** Device scratch address (receives the source dtype) and its size in bytes. */
  scratch: DevicePtr;
  scratchBytes: number;
}

/**
 * Writes `count` host values of srcDtype to device address dst as dstDtype: a plain async copy
 * when the dtypes match, else chunks through the upload scratch and the cast kernel.
 */
export function writeConverted(
  u: UploadConversion,
  dst: DevicePtr,
  dstDtype: DType,
  data: ArrayBufferView,
  srcDtype: DType,
  count: number,
): void {
  const srcBytes = DTYPE_BYTES[srcDtype];
  const bytes = new Uint8Array(data.buffer, data.byteOffset, count * srcBytes);
  if (dstDtype === srcDtype) {
    u.staging.toDevice(dst, bytes);
    return;
  }
  const chunk = Math.floor(u.scratchBytes / srcBytes);
  for (let i = 0; i < count; i += chunk) {
    const n = Math.min(chunk, count - i);
    u.staging.toDevice(u.scratch, bytes.subarray(i * srcBytes, (i + n) * srcBytes));
    u.addon.cast(
      u.stream,
      offsetPtr(dst, i * DTYPE_BYTES[dstDtype]),
      DTYPE_CODE[dstDtype],
      u.scratch,
      DTYPE_CODE[srcDtype],
      n,
    );
  }
}

/**
 * Reads `n` elements of a `dtype` tensor at device address src; returns when done. i32 and f32
 * come back as they are, bf16 and f16 widened to f32.
 */
export function readConverted(
  staging: HostStaging,
  src: DevicePtr,
  dtype: DType,
  n: number,
): Float32Array | Int32Array {
  switch (dtype) {
    case "i32":
    case "f32": {
      const out = dtype === "i32" ? new Int32Array(n) : new Float32Array(n);
      staging.toHost(out, src);
      return out;
    }
    case "fp8": {
      // e4m3 codes, read back as their exact values (backends/fp8.ts)
      const codes = new Uint8Array(n);
      staging.toHost(codes, src);
      const out = new Float32Array(n);
      for (let i = 0; i < n; i++) out[i] = E4M3_VALUES[codes[i]!]!;
      return out;
    }
    default: {
      const bits = new Uint16Array(n);
      staging.toHost(bits, src);
      return dtype === "bf16" ? bf16ArrayToF32(bits) : f16ArrayToF32(bits);
    }
  }
}
