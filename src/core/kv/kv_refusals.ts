/**
 * The words of the KV memory formula's refusals (kv_memory.ts KVRefusal): one sentence per
 * reason, so the engine's start-up error and `hisparse plan` say the same thing. The engine adds
 * the remedy (the flags to change); the plan prints the fact with thousands separators.
 */
import { type KVRefusal, prefillStreams } from "./kv_memory.js";

/** A refusal as a fact (what does not fit, with the numbers) and a remedy (what to change). */
export interface KVRefusalText {
  fact: string;
  remedy: string;
}

/** Bytes as GiB with 3 decimals, as the host-pool remedy names them ("0.009"). */
const gib3 = (b: number): string => (b / 2 ** 30).toFixed(3);

/**
 * The sentence parts of a refusal.
 * @param fmt how counts are written: plain by default (engine errors), "8,192" in the plan.
 */
export function describeKVRefusal(r: KVRefusal, fmt: (n: number) => string = String): KVRefusalText {
  switch (r.kind) {
    case "no_block":
      return {
        fact: `no memory is left for the KV cache (one block needs ${fmt(r.bytesPerBlock)} bytes)`,
        remedy: "lower --max-model-len or raise the memory budget",
      };
    case "no_device_block":
      return {
        fact: `no device memory is left for the KV pool after the dense layers and digests of ${fmt(r.numHostBlocks)} host pages`,
        remedy: "lower --host-pool-gib or raise the memory budget",
      };
    case "host_pool_below_device_pool":
      return {
        fact: `the host pool holds ${fmt(r.numHostBlocks)} pages, fewer than the ${fmt(r.numGpuBlocks)} device blocks`,
        remedy: `every page has a host copy, so raise --host-pool-gib to at least ${gib3(r.minHostPoolBytes)}`,
      };
    case "below_sparse_minimum":
      return {
        fact: `the device pool (${fmt(r.numGpuBlocks)} blocks) cannot hold one sparse request's minimum of ${fmt(r.minGpuBlocks)} blocks (sinks, window, hot buffer and a new page)`,
        remedy: "lower device_buffer_tokens or raise the memory budget",
      };
    case "request_exceeds_pool": {
      const hostShort = r.numHostBlocks !== null && r.numHostBlocks < r.blocksPerRequest;
      // A streaming prefill the device pool holds needs none of the request's other pages there.
      const deviceShort =
        !prefillStreams(r.numGpuBlocks, r.streamingBlocks) && r.numGpuBlocks < r.blocksPerRequest;
      const pool = deviceShort
        ? `the device pool (${fmt(r.numGpuBlocks)} blocks)`
        : `the host pool (${fmt(r.numHostBlocks ?? 0)} pages)`;
      const why =
        deviceShort && r.numHostBlocks !== null
          ? r.streamingBlocks === undefined
            ? " for its dense prefill"
            : ` for its dense prefill (nor the ${fmt(r.streamingBlocks)} blocks a streaming prefill holds)`
          : "";
      return {
        fact: `${pool} cannot hold one request's ${fmt(r.blocksPerRequest)} pages${why}`,
        remedy: hostShort && !deviceShort ? "raise --host-pool-gib" : "raise the memory budget",
      };
    }
  }
}

/** The engine's one-sentence reason: the fact, then the remedy. */
export function kvRefusalMessage(r: KVRefusal): string {
  const t = describeKVRefusal(r);
  return `${t.fact}; ${t.remedy}`;
}
