import { defaultAddonPath, type HisparseNative, loadAddon } from "./cuda/addon.js";
import { ncclVersionString } from "./cuda/addon_nccl.js";

/** Lowest compute capability the addon carries code for (sm_90a SASS + compute_90 PTX). */
export const MIN_COMPUTE_CAPABILITY = 9.0;

/** What `--device auto` needs to know about CUDA on this machine. */
export interface CudaDetection {
  /** True when the CUDA backend can run here. */
  available: boolean;
  /** Why not (one sentence), or "" when available. */
  reason: string;
  /** Name of device 0 (e.g. "NVIDIA H200"), null when none was seen. */
  deviceName: string | null;
  deviceCount: number;
  /** "9.0" for device 0, null when none was seen. */
  computeCapability: string | null;
  /** Global memory of device 0 in bytes, null when none was seen. */
  totalMemoryBytes: number | null;
  /** cudaDriverGetVersion (e.g. 13000), 0 without a driver, null without the addon. */
  driverVersion: number | null;
  /** Version of the CUDA runtime linked into the addon, null without the addon. */
  runtimeVersion: number | null;
  /** False when the addon was built without the attention / sampling kernels. */
  hasAttentionKernels: boolean;
  addonPath: string;
}

/**
 * Checks whether the CUDA backend can run: the addon loads, the driver answers, device 0 exists
 * and its compute capability is at least MIN_COMPUTE_CAPABILITY. Never throws: every failure
 * becomes `available: false` with the reason.
 * @param addonPath where to look for the addon (default: defaultAddonPath()).
 */
export function detectCuda(addonPath?: string): CudaDetection {
  const result: CudaDetection = {
    available: false,
    reason: "",
    deviceName: null,
    deviceCount: 0,
    computeCapability: null,
    totalMemoryBytes: null,
    driverVersion: null,
    runtimeVersion: null,
    hasAttentionKernels: false,
    addonPath: "",
  };
  try {
    result.addonPath = addonPath ?? defaultAddonPath();
    const addon: HisparseNative = loadAddon(result.addonPath);
    result.hasAttentionKernels = addon.buildInfo.hasAttention && addon.buildInfo.hasSampling;
    const probe = addon.probe();
    result.driverVersion = probe.driverVersion;
    result.runtimeVersion = probe.runtimeVersion;
    result.deviceCount = probe.deviceCount;
    if (!probe.ok) {
      // With no NVIDIA driver loaded at all, the runtime reports cudaErrorInsufficientDriver
      // (driver version 0), which reads as if an old driver were installed: say what it means.
      result.reason =
        probe.driverVersion === 0
          ? "no NVIDIA GPU driver was found on this machine"
          : `no usable CUDA device: ${probe.error || "the driver reports no device"}`;
      return result;
    }
    const props = addon.deviceProperties(0);
    result.deviceName = props.name;
    result.computeCapability = `${props.major}.${props.minor}`;
    result.totalMemoryBytes = props.totalGlobalMem;
    if (props.major + props.minor / 10 < MIN_COMPUTE_CAPABILITY) {
      result.reason = `${props.name} has compute capability ${result.computeCapability}, below the ${MIN_COMPUTE_CAPABILITY.toFixed(1)} the addon is built for`;
      return result;
    }
    if (!result.hasAttentionKernels) {
      result.reason = "the native addon was built without the attention and sampling kernels";
      return result;
    }
    result.available = true;
    return result;
  } catch (err) {
    result.reason = err instanceof Error ? err.message : String(err);
    return result;
  }
}

/** What `hisparse info` and the tensor-parallel start-up say about NCCL. */
export interface NcclDetection {
  available: boolean;
  /** "2.28.3", null when NCCL could not be loaded. */
  version: string | null;
  /** The library dlopen took, null when none. */
  path: string | null;
  /** Why not (one sentence), or "" when available. */
  reason: string;
}

/**
 * Loads NCCL through the addon (dlopen("libnccl.so.2"), native/addon/nccl_dl.h) and reports its
 * version. Never throws.
 */
export function detectNccl(addonPath?: string): NcclDetection {
  try {
    const info = loadAddon(addonPath ?? defaultAddonPath()).ncclInfo();
    return { available: true, version: ncclVersionString(info.version), path: info.path, reason: "" };
  } catch (err) {
    return {
      available: false,
      version: null,
      path: null,
      reason: err instanceof Error ? err.message : String(err),
    };
  }
}
