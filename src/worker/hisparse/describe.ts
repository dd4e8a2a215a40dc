/**
 * The start-up summary of a HiSparse set-up (`hisparse serve` logs it: KVCacheSetup.description).
 */
import type { HiSparseConfig } from "../../config/hisparse_config.js";
import type { HiSparseWorkerInfo } from "../kv_cache_setup.js";

/** Bytes as GiB with 2 decimals ("0.25 GiB"). */
const gib = (bytes: number): string => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

/** The HiSparse settings in effect and its pools, as `hisparse serve` logs them at start-up. */
export interface HiSparseStartupSummary {
  /** One log line, e.g. "HiSparse auto: residency hybrid, topk 2048, ...; device pool 512 blocks (0.06 GiB) + ..., host pool 1024 pages (0.12 GiB)". */
  line: string;
  /** The same figures as pino fields (JSON log format); pool sizes in pages and bytes. */
  fields: {
    mode: string;
    residency: string;
    topk: number;
    deviceBufferTokens: number;
    minSparseTokens: number;
    numGpuBlocks: number;
    devicePoolBytes: number;
    /** Device bytes held for the host pages (all of them): dense layers' KV and digests. */
    hostPagesDeviceBytes: number;
    numHostBlocks: number;
    hostPoolBytes: number;
    /** "dsa" for DSA models (the model's indexer selects); absent for Quest. */
    selector?: string;
  };
}

/**
 * The start-up summary of HiSparse (mode auto or on): mode, residency, topk,
 * device_buffer_tokens, min_sparse_tokens (`on` only: it decides nothing in `auto`; token counts,
 * the `--hisparse-config` names; the JSON fields keep it in both modes), the
 * device pool (main-pool blocks × `info.kvBytesPerBlock`, the sparse layers' KV), the device
 * memory held per host page (host pages × `info.hisparse.deviceBytesPerHostBlock`: the dense
 * layers' KV and the Quest digests) and the host pool (pages × `info.hisparse.hostBytesPerBlock`),
 * in pages and GiB with 2 decimals.
 */
export function hisparseStartupSummary(
  config: HiSparseConfig,
  info: { numGpuBlocks: number; kvBytesPerBlock: number; hisparse: HiSparseWorkerInfo },
): HiSparseStartupSummary {
  const devicePoolBytes = info.numGpuBlocks * info.kvBytesPerBlock;
  const numHostBlocks = info.hisparse.numHostBlocks;
  const hostPoolBytes = numHostBlocks * info.hisparse.hostBytesPerBlock;
  const hostPagesDeviceBytes = numHostBlocks * info.hisparse.deviceBytesPerHostBlock;
  const dsa = config.selector === "dsa";
  // DSA models: the indexer keys (never offloaded) are what every host page holds on the device.
  const perHostPage = dsa ? "indexer keys and dense-layer rows" : "dense-layer KV and digests";
  const line =
    `HiSparse ${config.mode}: ${dsa ? "selector dsa, " : ""}residency ${config.residency}, topk ${config.topk}, ` +
    `device_buffer_tokens ${config.deviceBufferTokens}` +
    // min_sparse_tokens only decides anything in `on` (auto attends sparsely once a page spills)
    (config.mode === "on" ? `, min_sparse_tokens ${config.minSparseTokens}; ` : "; ") +
    `device pool ${info.numGpuBlocks} blocks (${gib(devicePoolBytes)}) + ${gib(hostPagesDeviceBytes)} of ${perHostPage}, ` +
    `host pool ${numHostBlocks} pages (${gib(hostPoolBytes)})`;
  return {
    line,
    fields: {
      mode: config.mode,
      residency: config.residency,
      topk: config.topk,
      deviceBufferTokens: config.deviceBufferTokens,
      minSparseTokens: config.minSparseTokens,
      numGpuBlocks: info.numGpuBlocks,
      devicePoolBytes,
      hostPagesDeviceBytes,
      numHostBlocks,
      hostPoolBytes,
      ...(dsa ? { selector: "dsa" } : {}),
    },
  };
}
