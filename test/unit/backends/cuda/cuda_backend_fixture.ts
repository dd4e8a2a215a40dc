/**
 * The fixture of cuda_backend.test.ts and cuda_backend_ops.test.ts: a CudaBackend over a fresh
 * host-memory double of the addon (fake_addon.ts), with a 1 MiB step workspace and 1 KiB staging
 * buffers so that uploads are chunked.
 */
import { CudaBackend } from "../../../../src/backends/cuda/cuda_backend.js";
import { createFakeAddon, type FakeAddon } from "./fake_addon.js";

/** A backend over a fresh fake addon; 1 KiB staging so that uploads are chunked. */
export function setup(opts: { hasSampling?: boolean } = {}): { be: CudaBackend; fake: FakeAddon } {
  const fake = createFakeAddon(opts);
  const be = new CudaBackend({ addon: fake, workspaceBytes: 1 << 20, stagingBytes: 1024 });
  return { be, fake };
}
