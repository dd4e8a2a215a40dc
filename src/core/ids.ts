/**
 * Branded integer ids, one type per address space, so that the compiler rejects a GPU block id
 * passed where a host block id is expected (DESIGN.md §1, CONVENTIONS.md 4).
 */

declare const brand: unique symbol;
type Brand<T, B extends string> = T & { readonly [brand]: B };

/** Id of a request inside the engine (the HTTP layer's `cmpl-...` ids map onto these). */
export type RequestId = Brand<string, "RequestId">;
/** Index of a KV block (page) in the device KV cache pool: `0 <= id < numGpuBlocks`. */
export type BlockId = Brand<number, "BlockId">;
/** Index of a page in the host (pinned memory) tier: `0 <= id < numHostBlocks`. */
export type HostBlockId = Brand<number, "HostBlockId">;

export const asRequestId = (s: string): RequestId => s as RequestId;
export const asBlockId = (n: number): BlockId => n as BlockId;
export const asHostBlockId = (n: number): HostBlockId => n as HostBlockId;

/** Sentinel slot index in a slot mapping: the token is not written to the KV cache (padding). */
export const PAD_SLOT_ID = -1;
