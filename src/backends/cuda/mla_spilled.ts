/**
 * SpilledRows (../mla_ops.ts) on the CUDA backend: the checks of mla.attention's `spilled`
 * argument and the host source its flagged requests' expanded gathers read (mla_prefill.ts,
 * hsMlaGatherLatent). Hybrid HiSparse for DSA models lets a request's mirrored pages leave the
 * device while it still prefills; its later chunks read those pages' latent rows from the host
 * tier (mapped pinned memory) over the bus, which only the expanded form's gather does, so every
 * flagged request runs expanded whatever its query length, eagerly (never inside a capture).
 */
import type { AttentionMetadata, SpilledRows, Tensor } from "../backend.js";
import type { HostRowSource } from "./mla_prefill.js";
import type { CudaOpsContext } from "./ops.js";
import { describe, expectDtype, expectShape } from "./tensor.js";

/** The requests that read host rows in a step and where they read them. */
export interface SpilledSource {
  /** [numReqs] 1 for the flagged requests (SpilledRows.requests). */
  flags: Uint8Array;
  source: HostRowSource;
}

/**
 * The checked host source of `spilled`, or null when there is none or no request is flagged
 * (then attention runs exactly as without it). latentCache: [numBlocks, blockSize, rowWidth].
 * @throws Error when requests is not [numReqs], when a request is flagged and q is not bf16 or a
 *   graph is being captured (only the eager expanded form reads host rows), or on the shapes or
 *   dtypes of hostRows ([*, blockSize, rowWidth], latentCache's dtype) and hostBlockTables
 *   (i32 [numReqs, *], at least one column).
 */
export function spilledSource(
  ctx: CudaOpsContext & { readonly graphs: { readonly isCapturing: boolean } },
  spilled: SpilledRows | null | undefined,
  meta: AttentionMetadata,
  q: Tensor,
  latentCache: Tensor,
  blockSize: number,
  rowWidth: number,
): SpilledSource | null {
  if (spilled === null || spilled === undefined) return null;
  const what = "mla.attention spilled";
  const { hostRows, hostBlockTables, requests } = spilled;
  const n = meta.numReqs;
  if (requests.length !== n)
    throw new Error(`${what}: requests has ${requests.length} flags for a step of ${n} requests`);
  if (!requests.includes(1)) return null;
  if (q.dtype !== "bf16")
    throw new Error(
      `${what}: host-resident rows are read by the bf16 expanded form only, got q ${describe(q)}`,
    );
  if (ctx.graphs.isCapturing)
    throw new Error(
      `${what}: host-resident rows cannot be read inside a CUDA graph capture (eager steps only)`,
    );
  const rows = ctx.dev(hostRows, `${what} hostRows`);
  expectShape(hostRows, `${what} hostRows`, [null, blockSize, rowWidth]);
  expectDtype(hostRows, `${what} hostRows`, [latentCache.dtype]);
  const tables = ctx.dev(hostBlockTables, `${what} hostBlockTables`);
  expectShape(hostBlockTables, `${what} hostBlockTables`, [n, null]);
  expectDtype(hostBlockTables, `${what} hostBlockTables`, ["i32"]);
  const width = hostBlockTables.shape[1] ?? 0;
  if (width < 1) throw new Error(`${what}: hostBlockTables has no columns`);
  return { flags: requests, source: { rows: rows.ptr, blockTables: tables.ptr, maxBlocksPerReq: width } };
}
