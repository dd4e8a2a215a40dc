/**
 * The native addon's whole surface, typed (DESIGN.md §1: one narrow native boundary). This is the
 * only file that loads `hisparse_native.node`; everything else imports the types and
 * `loadAddon()` from here. native/README.md states the ABI rules; the C side is native/addon/*.cc.
 *
 * The typings are split by area and re-exported here: addon_memory.ts (device, memory, streams,
 * events, graphs), addon_ops.ts (GEMM, element-wise kernels), addon_attention.ts (paged attention,
 * sampling), addon_hisparse.ts (HiSparse kernels), addon_moe.ts (mixture-of-experts kernels),
 * addon_mla.ts (multi-head latent attention, the DSA indexer), addon_loader.ts (file reader,
 * generated weights), addon_nccl.ts (NCCL, loaded at run time).
 *
 * Conventions of the flat functions:
 * - Device (and UVA host) addresses are `DevicePtr` (device_ptr.ts: branded JS numbers; user
 *   addresses are below 2^48, so a double holds them exactly; NULL_PTR = 0); byte counts and
 *   handles are plain numbers (stream 0 = the legacy stream).
 * - `stream` is `Stream.handle`, the first argument. Launches are asynchronous on that stream; a
 *   launch error throws an Error naming the launcher and the CUDA error.
 * - The widest launchers take one named parameter object whose fields are their C struct's
 *   (addon_params.ts, the single field list of both sides); the others positional arguments in
 *   the C launcher's order.
 * - Dtype arguments are DTYPE_CODE values.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { DType } from "../backend.js";
import type { NativeAttentionApi } from "./addon_attention.js";
import type { NativeHiSparseApi } from "./addon_hisparse.js";
import type { NativeLoaderApi } from "./addon_loader.js";
import type { NativeMemoryApi } from "./addon_memory.js";
import type { NativeMlaApi } from "./addon_mla.js";
import type { NativeMoeApi } from "./addon_moe.js";
import type { NativeNcclApi } from "./addon_nccl.js";
import type { NativeOpsApi } from "./addon_ops.js";

export type { NativeAttentionApi } from "./addon_attention.js";
export type { NativeHiSparseApi } from "./addon_hisparse.js";
export type { NativeFileReader, NativeLoaderApi } from "./addon_loader.js";
export type {
  AllocatorStats,
  CudaProbe,
  DeviceProperties,
  NativeCudaGraph,
  NativeDeviceAllocator,
  NativeEvent,
  NativeMemoryApi,
  NativePinnedBuffer,
  NativeStream,
  NativeWorkspace,
} from "./addon_memory.js";
export { MLA_LIMITS, type NativeMlaApi } from "./addon_mla.js";
export { MOE_DECODE_MAX_TOKENS, MOE_LIMITS, MOE_SCORING, type NativeMoeApi } from "./addon_moe.js";
export type { NativeNcclApi } from "./addon_nccl.js";
export { GEMV_EPILOGUE, GEMV_MAX_TOKENS, type NativeBlas, type NativeOpsApi } from "./addon_ops.js";
export {
  MLA_ATTENTION_PARAMS,
  MLA_INDEXER_PARAMS,
  type MlaAttentionParams,
  type MlaIndexerParams,
  NATIVE_PARAM_STRUCTS,
  PAGED_ATTENTION_PARAMS,
  type PagedAttentionParams,
  type ParamKind,
  type ParamStruct,
  type ParamsOf,
  QUEST_SELECT_PARAMS,
  type QuestSelectParams,
  RESOLVE_PARAMS,
  type ResolveParams,
  ROW_RESOLVE_PARAMS,
  ROW_SELECTION_OVERLAP_PARAMS,
  ROW_VIEW_MERGE_PARAMS,
  type RowResolveParams,
  type RowSelectionOverlapParams,
  type RowViewMergeParams,
  SPARSE_DECODE_PARAMS,
  type SparseDecodeParams,
} from "./addon_params.js";
export { asDevicePtr, type DevicePtr, NULL_PTR, offsetPtr } from "./device_ptr.js";

/** Version of the JS-visible surface this file describes (native/addon/module.cc kAbiVersion). */
export const ADDON_ABI_VERSION = 9;

/** Element type codes shared with native/kernels/kernels.h (HsDtype). */
export const DTYPE_CODE: Record<DType, number> = { f32: 0, bf16: 1, f16: 2, i32: 3, fp8: 4 };

/** What the addon was built with. */
export interface AddonBuildInfo {
  cudaRuntimeVersion: number;
  /** False when native/kernels/attention.h was absent at build time (the attention functions then throw). */
  hasAttention: boolean;
  hasSampling: boolean;
  /** The HiSparse kernels (native/kernels/hisparse.h) and sparseDecodeAttention are present. */
  hasHiSparse: boolean;
  /** Built with HISPARSE_DEBUG_SYNC (stream sync after every launch). */
  debugSync: boolean;
  gencode: string;
}

/** The module object of hisparse_native.node: the five areas' functions and classes. */
export interface HisparseNative
  extends NativeMemoryApi,
    NativeOpsApi,
    NativeAttentionApi,
    NativeHiSparseApi,
    NativeMoeApi,
    NativeMlaApi,
    NativeLoaderApi,
    NativeNcclApi {
  readonly abiVersion: number;
  readonly buildInfo: AddonBuildInfo;
}

/** Raised when the addon is missing or unusable; the message is one sentence for the user. */
export class AddonLoadError extends Error {
  override name = "AddonLoadError";
}

/** Folder holding package.json and native/ (this file sits in src/ or dist/src/ below it). */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, "native"))) return dir;
    dir = dirname(dir);
  }
  return join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
}

/** Where the addon is looked for: $HISPARSE_NATIVE_ADDON, else <root>/build/Release/hisparse_native.node. */
export function defaultAddonPath(): string {
  const fromEnv = process.env.HISPARSE_NATIVE_ADDON;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  return join(packageRoot(), "build", "Release", "hisparse_native.node");
}

const loaded = new Map<string, HisparseNative>();

/**
 * Loads (once per path and thread) and returns the addon.
 * @throws AddonLoadError when the file is missing ("run `npm run build:native`"), cannot be
 *   loaded, or was built for another ABI version.
 */
export function loadAddon(path: string = defaultAddonPath()): HisparseNative {
  const cached = loaded.get(path);
  if (cached !== undefined) return cached;
  if (!existsSync(path)) {
    throw new AddonLoadError(
      `the native CUDA addon is not built (${path} is missing): run \`npm run build:native\``,
    );
  }
  let mod: HisparseNative;
  try {
    mod = createRequire(import.meta.url)(path) as HisparseNative;
  } catch (err) {
    throw new AddonLoadError(`the native CUDA addon at ${path} failed to load: ${(err as Error).message}`);
  }
  if (mod.abiVersion !== ADDON_ABI_VERSION) {
    throw new AddonLoadError(
      `the native CUDA addon at ${path} has ABI version ${mod.abiVersion}, expected ${ADDON_ABI_VERSION}: run \`npm run build:native\``,
    );
  }
  loaded.set(path, mod);
  return mod;
}
