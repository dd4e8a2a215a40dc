import { closeSync, existsSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { endianness } from "node:os";
import { basename, join } from "node:path";
import type { HostTensorData } from "../backends/backend.js";
import { WeightLoadError, type WeightLocation, type WeightSource } from "./weights.js";

/**
 * Reader of Hugging Face safetensors checkpoints
 * (format: https://github.com/huggingface/safetensors#format):
 *   [8 bytes: N, u64 little-endian][N bytes: JSON header][byte buffer]
 * The header maps tensor names to {dtype, shape, data_offsets: [begin, end)} where offsets are
 * relative to the start of the byte buffer (8 + N); "__metadata__" holds string metadata.
 * A sharded checkpoint adds `model.safetensors.index.json` whose `weight_map` maps each tensor
 * name to its shard file.
 */

/** Name of the index file of a sharded checkpoint (transformers SAFE_WEIGHTS_INDEX_NAME). */
export const SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json";
/** Name of a single-file checkpoint (transformers SAFE_WEIGHTS_NAME). */
export const SAFE_WEIGHTS_NAME = "model.safetensors";
/** Bytes of the little-endian u64 header length that opens every safetensors file. */
const HEADER_LEN_BYTES = 8;
/** Largest header the reference implementation accepts (safetensors MAX_HEADER_SIZE, 100 MB). */
const MAX_HEADER_BYTES = 100_000_000;
/** Largest single `readSync` (Node rejects lengths of 2 GiB and more). */
const MAX_READ_BYTES = 1 << 30;

/** Bytes per element of every safetensors dtype (safetensors/src/tensor.rs Dtype::bitsize / 8). */
const SAFETENSORS_DTYPE_BYTES: Record<string, number> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  F8_E8M0: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  I64: 8,
  U64: 8,
  F64: 8,
};

/** Safetensors dtypes this loader returns, and their HostTensorData dtype. */
const SUPPORTED_DTYPES: Record<string, HostTensorData["dtype"]> = { BF16: "bf16", F16: "f16", F32: "f32" };

/** Where one tensor sits in one file. */
export interface TensorEntry {
  /** Safetensors dtype string as stored ("BF16", "F32", ...). */
  dtype: string;
  shape: number[];
  /** Absolute byte offset of the first element in the file. */
  start: number;
  /** Byte length of the tensor data. */
  byteLength: number;
  /** Index of the file in `SafetensorsCheckpoint.files`. */
  file: number;
}

/** One open checkpoint file. */
interface OpenFile {
  path: string;
  fd: number;
}

/**
 * A safetensors checkpoint in a model directory (sharded with an index, or one file). Opening
 * parses every header and validates every tensor's byte range, so a truncated or corrupt file
 * fails before any weight is uploaded; tensor data is read lazily by `get()` with `fs.readSync`.
 */
export class SafetensorsCheckpoint implements WeightSource {
  readonly names: readonly string[];
  private readonly entries: Map<string, TensorEntry>;
  private readonly files: OpenFile[];

  private constructor(files: OpenFile[], entries: Map<string, TensorEntry>) {
    this.files = files;
    this.entries = entries;
    this.names = [...entries.keys()];
  }

  /**
   * Opens `<modelDir>/model.safetensors.index.json` (sharded) or `<modelDir>/model.safetensors`.
   * @throws WeightLoadError (one sentence naming the file) when the directory or weights are
   *   missing, a shard is missing, a header is corrupt or larger than its file, or a tensor's
   *   byte range lies beyond its file or does not match shape × dtype size.
   */
  static open(modelDir: string): SafetensorsCheckpoint {
    if (!existsSync(modelDir) || !statSync(modelDir).isDirectory()) {
      throw new WeightLoadError(`model directory ${modelDir} does not exist`);
    }
    const indexPath = join(modelDir, SAFE_WEIGHTS_INDEX_NAME);
    const singlePath = join(modelDir, SAFE_WEIGHTS_NAME);
    if (existsSync(indexPath)) return SafetensorsCheckpoint.openSharded(modelDir, indexPath);
    if (existsSync(singlePath)) return SafetensorsCheckpoint.openFiles([singlePath], null);
    throw new WeightLoadError(
      `model directory ${modelDir} has no ${SAFE_WEIGHTS_NAME} or ${SAFE_WEIGHTS_INDEX_NAME} (use --load-format dummy to run without weights)`,
    );
  }

  /** True when `modelDir` holds safetensors weights (an index or a single file). */
  static existsIn(modelDir: string): boolean {
    return (
      existsSync(join(modelDir, SAFE_WEIGHTS_INDEX_NAME)) || existsSync(join(modelDir, SAFE_WEIGHTS_NAME))
    );
  }

  private static openSharded(modelDir: string, indexPath: string): SafetensorsCheckpoint {
    const weightMap = readWeightMap(indexPath);
    const shardNames = [...new Set(weightMap.values())].sort();
    for (const shard of shardNames) {
      if (!existsSync(join(modelDir, shard))) {
        throw new WeightLoadError(`shard ${shard} listed in ${indexPath} is missing from ${modelDir}`);
      }
    }
    return SafetensorsCheckpoint.openFiles(
      shardNames.map((s) => join(modelDir, s)),
      weightMap,
    );
  }

  /**
   * Opens and indexes the given files. With a weight map, every mapped tensor must be in the
   * shard the map names; tensors a shard holds beyond the map are indexed too.
   */
  private static openFiles(paths: string[], weightMap: Map<string, string> | null): SafetensorsCheckpoint {
    if (endianness() !== "LE") throw new WeightLoadError("safetensors loading needs a little-endian host");
    const files: OpenFile[] = [];
    const entries = new Map<string, TensorEntry>();
    try {
      for (const path of paths) {
        const fd = openSync(path, "r");
        files.push({ path, fd });
        for (const [name, e] of readHeader(path, fd, files.length - 1)) {
          if (entries.has(name))
            throw new WeightLoadError(`tensor ${name} appears in more than one file (${path})`);
          entries.set(name, e);
        }
      }
      for (const [name, shard] of weightMap ?? []) {
        const e = entries.get(name);
        if (e === undefined || basename(files[e.file]!.path) !== shard) {
          throw new WeightLoadError(`index maps tensor ${name} to ${shard}, but that shard does not hold it`);
        }
      }
    } catch (err) {
      for (const f of files) closeSync(f.fd);
      throw err;
    }
    return new SafetensorsCheckpoint(files, entries);
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  /** Dtype, shape and location of a tensor, without reading it; undefined when absent. */
  entry(name: string): Readonly<TensorEntry> | undefined {
    return this.entries.get(name);
  }

  /**
   * Where a tensor's bytes are (file descriptor, offset, length), for backends that stream files
   * themselves; undefined when absent, of an unsupported dtype (get() then names it) or closed.
   */
  locate(name: string): WeightLocation | undefined {
    const e = this.entries.get(name);
    const dtype = e === undefined ? undefined : SUPPORTED_DTYPES[e.dtype];
    if (e === undefined || dtype === undefined) return undefined;
    const { path, fd } = this.files[e.file]!;
    if (fd < 0) return undefined;
    return {
      kind: "file",
      shape: [...e.shape],
      dtype,
      fd,
      path,
      position: e.start,
      byteLength: e.byteLength,
    };
  }

  /**
   * Reads one tensor into a fresh buffer (so the typed array is always aligned): BF16/F16 as
   * raw Uint16Array bits, F32 as Float32Array, shape as stored.
   * @throws WeightLoadError when the tensor is missing, its dtype is not BF16/F16/F32, the
   *   checkpoint was closed, or the file became shorter than its header says.
   */
  get(name: string): HostTensorData {
    const e = this.entries.get(name);
    if (e === undefined) throw new WeightLoadError(`checkpoint has no tensor ${name}`);
    const file = this.files[e.file]!;
    const dtype = SUPPORTED_DTYPES[e.dtype];
    if (dtype === undefined) {
      throw new WeightLoadError(
        `tensor ${name} in ${file.path} has dtype ${e.dtype}, which is not supported (supported: BF16, F16, F32)`,
      );
    }
    if (file.fd < 0) throw new WeightLoadError(`checkpoint file ${file.path} was already closed`);
    const bytes = new Uint8Array(e.byteLength);
    readFully(file, bytes, e.start, name);
    const data =
      dtype === "f32"
        ? new Float32Array(bytes.buffer, 0, e.byteLength / 4)
        : new Uint16Array(bytes.buffer, 0, e.byteLength / 2);
    return { data, dtype, shape: [...e.shape] };
  }

  /** Closes every file; later `get()` calls throw. */
  close(): void {
    for (const f of this.files) {
      if (f.fd >= 0) closeSync(f.fd);
      f.fd = -1;
    }
  }
}

/**
 * Reads the `weight_map` of a sharded checkpoint's index file.
 * @throws WeightLoadError when the file is not JSON or has no weight_map of strings.
 */
function readWeightMap(indexPath: string): Map<string, string> {
  let index: unknown;
  try {
    index = JSON.parse(readText(indexPath));
  } catch (e) {
    throw new WeightLoadError(`${indexPath} is not valid JSON (${(e as Error).message})`);
  }
  const map = (index as { weight_map?: unknown } | null)?.weight_map;
  if (map === null || typeof map !== "object" || Array.isArray(map)) {
    throw new WeightLoadError(`${indexPath} has no "weight_map" object`);
  }
  const out = new Map<string, string>();
  for (const [name, shard] of Object.entries(map as Record<string, unknown>)) {
    if (typeof shard !== "string")
      throw new WeightLoadError(`${indexPath} maps ${name} to a non-string shard`);
    out.set(name, shard);
  }
  if (out.size === 0) throw new WeightLoadError(`${indexPath} has an empty "weight_map"`);
  return out;
}

function readText(path: string): string {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const buf = new Uint8Array(size);
    readFully({ path, fd }, buf, 0, "index");
    return new TextDecoder().decode(buf);
  } finally {
    closeSync(fd);
  }
}

/**
 * Parses one file's header and validates every tensor entry against the file size.
 * @returns name -> entry with absolute byte offsets.
 * @throws WeightLoadError naming the file on any inconsistency.
 */
function readHeader(path: string, fd: number, fileIndex: number): Map<string, TensorEntry> {
  const fileSize = fstatSync(fd).size;
  if (fileSize < HEADER_LEN_BYTES) {
    throw new WeightLoadError(`${path} is too short to be a safetensors file (${fileSize} bytes)`);
  }
  const lenBytes = new Uint8Array(HEADER_LEN_BYTES);
  readFully({ path, fd }, lenBytes, 0, "header length");
  const headerLen = Number(new DataView(lenBytes.buffer).getBigUint64(0, true));
  if (headerLen > fileSize - HEADER_LEN_BYTES || headerLen > MAX_HEADER_BYTES) {
    throw new WeightLoadError(
      `${path} declares a ${headerLen}-byte header but the file has only ${fileSize} bytes (corrupt or truncated file)`,
    );
  }
  const headerBytes = new Uint8Array(headerLen);
  readFully({ path, fd }, headerBytes, HEADER_LEN_BYTES, "header");
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(headerBytes));
  } catch (e) {
    throw new WeightLoadError(`${path} has a corrupt header (${(e as Error).message})`);
  }
  if (header === null || typeof header !== "object" || Array.isArray(header)) {
    throw new WeightLoadError(`${path} has a corrupt header (not a JSON object)`);
  }
  const dataStart = HEADER_LEN_BYTES + headerLen;
  const out = new Map<string, TensorEntry>();
  for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
    if (name === "__metadata__") continue;
    out.set(name, parseEntry(path, name, raw, dataStart, fileSize, fileIndex));
  }
  return out;
}

/** Validates one header entry {dtype, shape, data_offsets} and converts it to a TensorEntry. */
function parseEntry(
  path: string,
  name: string,
  raw: unknown,
  dataStart: number,
  fileSize: number,
  fileIndex: number,
): TensorEntry {
  const r = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown } | null;
  const shape = r?.shape;
  const offsets = r?.data_offsets;
  const isUint = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;
  if (
    typeof r?.dtype !== "string" ||
    !Array.isArray(shape) ||
    !shape.every(isUint) ||
    !Array.isArray(offsets) ||
    offsets.length !== 2 ||
    !offsets.every(isUint)
  ) {
    throw new WeightLoadError(`${path} has a corrupt header entry for tensor ${name}`);
  }
  const [begin, end] = offsets as [number, number];
  if (end < begin)
    throw new WeightLoadError(`${path} has a corrupt header entry for tensor ${name} (end < begin)`);
  if (dataStart + end > fileSize) {
    throw new WeightLoadError(
      `tensor ${name} needs bytes up to ${dataStart + end} but ${path} has only ${fileSize} bytes (truncated download?)`,
    );
  }
  const elemBytes = SAFETENSORS_DTYPE_BYTES[r.dtype];
  if (elemBytes === undefined)
    throw new WeightLoadError(`tensor ${name} in ${path} has unknown dtype ${r.dtype}`);
  const numel = (shape as number[]).reduce((a, b) => a * b, 1);
  if (numel * elemBytes !== end - begin) {
    throw new WeightLoadError(
      `tensor ${name} in ${path} has ${end - begin} bytes but its shape [${shape}] of ${r.dtype} needs ${numel * elemBytes}`,
    );
  }
  return {
    dtype: r.dtype,
    shape: shape as number[],
    start: dataStart + begin,
    byteLength: end - begin,
    file: fileIndex,
  };
}

/**
 * Fills `dst` from `file` at byte `position`, looping over short reads and capping each read
 * below Node's 2 GiB limit.
 * @throws WeightLoadError when the file ends early.
 */
function readFully(file: OpenFile, dst: Uint8Array, position: number, what: string): void {
  let done = 0;
  while (done < dst.length) {
    const len = Math.min(dst.length - done, MAX_READ_BYTES);
    const n = readSync(file.fd, dst, done, len, position + done);
    if (n === 0) throw new WeightLoadError(`${file.path} ended while reading ${what} (truncated file)`);
    done += n;
  }
}
