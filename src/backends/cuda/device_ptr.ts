/**
 * Device addresses as the addon takes them (DESIGN.md §1, CONVENTIONS.md 4: one branded type per
 * address space): device memory, or pinned host memory mapped into the device address space
 * (UVA), as a JS number. User addresses are below 2^48, so a double holds them exactly; 0 is the
 * null address. Only the addon's allocations (DeviceAllocator, Workspace, PinnedBuffer) make
 * them; `offsetPtr` moves within one.
 */

declare const devicePtrBrand: unique symbol;

/** A device-visible address (see the file comment). */
export type DevicePtr = number & { readonly [devicePtrBrand]: "DevicePtr" };

/** The null address: an absent optional tensor. */
export const NULL_PTR = 0 as DevicePtr;

/** Brands an address the addon returned (or a test double made). */
export const asDevicePtr = (address: number): DevicePtr => address as DevicePtr;

/** The address `bytes` bytes past `p`. */
export const offsetPtr = (p: DevicePtr, bytes: number): DevicePtr => (p + bytes) as DevicePtr;
