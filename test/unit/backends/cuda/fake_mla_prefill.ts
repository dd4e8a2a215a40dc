/**
 * Host implementations, over the fake addon's memory, of the three entry points of the expanded
 * MLA prefill (src/backends/cuda/mla_prefill.ts): Blas.gemmStridedBatched with cuBLAS's
 * column-major semantics, hsMlaGatherLatent and hsMlaPrefillSoftmax as native/kernels/mla.h states
 * them. They let the TS path's pointer and stride arithmetic be checked numerically on the CPU
 * against the CPU oracle (the kernels themselves: native/tests/mla_prefill_test.cu).
 */
import type { DevicePtr } from "../../../../src/backends/cuda/addon.js";
import { bf16BitsToF32, f32ToBf16Bits } from "../../../../src/backends/cuda/half.js";
import type { FakeAddon } from "./fake_addon.js";
import type { AddressSpace } from "./fake_device_memory.js";

const F32 = 0;
const BF16 = 1;
const I32 = 3;

/** Element i of dtype code `code` at addr. */
function get(mem: AddressSpace, addr: number, code: number, i: number): number {
  const size = code === BF16 ? 2 : 4;
  const v = mem.view(addr + i * size, size);
  const dv = new DataView(v.buffer, v.byteOffset, size);
  if (code === BF16) return bf16BitsToF32(dv.getUint16(0, true));
  return code === I32 ? dv.getInt32(0, true) : dv.getFloat32(0, true);
}

function set(mem: AddressSpace, addr: number, code: number, i: number, x: number): void {
  const size = code === BF16 ? 2 : 4;
  const v = mem.view(addr + i * size, size);
  const dv = new DataView(v.buffer, v.byteOffset, size);
  if (code === BF16) dv.setUint16(0, f32ToBf16Bits(x), true);
  else dv.setFloat32(0, x, true);
}

/** Installs the three implementations on the fake (and on its Blas object). */
export function installMlaPrefillFakes(fake: FakeAddon, blas: object): void {
  const mem = fake.memory;
  (blas as { gemmStridedBatched: unknown }).gemmStridedBatched = (
    _stream: number,
    transA: boolean,
    transB: boolean,
    m: number,
    n: number,
    k: number,
    alpha: number,
    A: DevicePtr,
    lda: number,
    strideA: number,
    B: DevicePtr,
    ldb: number,
    strideB: number,
    beta: number,
    C: DevicePtr,
    ldc: number,
    strideC: number,
    batch: number,
    abDtype: number,
    cDtype: number,
  ) => {
    fake.calls.push({ fn: "gemmStridedBatched", args: [m, n, k, batch] });
    for (let b = 0; b < batch; b++)
      for (let j = 0; j < n; j++)
        for (let i = 0; i < m; i++) {
          let acc = 0;
          for (let l = 0; l < k; l++) {
            const a = get(mem, A, abDtype, b * strideA + (transA ? l + i * lda : i + l * lda));
            const x = get(mem, B, abDtype, b * strideB + (transB ? j + l * ldb : l + j * ldb));
            acc += a * x;
          }
          const c = b * strideC + i + j * ldc;
          set(mem, C, cDtype, c, alpha * acc + (beta !== 0 ? beta * get(mem, C, cDtype, c) : 0));
        }
  };
  const f = fake as unknown as Record<string, unknown>;
  f.mlaGatherLatent = (
    _stream: number,
    cache: number,
    cacheDtype: number,
    tables: number,
    maxBlocks: number,
    hostCache: number,
    hostTables: number,
    hostMaxBlocks: number,
    req: number,
    bs: number,
    W: number,
    rank: number,
    numRows: number,
    out: number,
    kv: number,
    kvLd: number,
    kvOffset: number,
    kvStride: number,
    kvCount: number,
  ) => {
    fake.calls.push({
      fn: "mlaGatherLatent",
      args: [req, numRows, kvLd, kvOffset, kvStride, kvCount, hostCache, hostTables, hostMaxBlocks],
    });
    if (hostCache !== 0 && (hostTables === 0 || hostMaxBlocks <= 0))
      throw new Error("fake mlaGatherLatent: a host source needs its tables and a positive width");
    for (let i = 0; i < numRows; i++) {
      const b = Math.floor(i / bs);
      // The row's source (the kernel's gatherSource): device block, else host block, else zeros.
      let src: [number, number] | null = null;
      const blk = b < maxBlocks ? get(mem, tables, I32, req * maxBlocks + b) : -1;
      if (blk >= 0) src = [cache, blk];
      else if (b < maxBlocks && hostCache !== 0 && b < hostMaxBlocks) {
        const hb = get(mem, hostTables, I32, req * hostMaxBlocks + b);
        if (hb >= 0) src = [hostCache, hb];
      }
      for (let e = 0; e < W; e++)
        set(
          mem,
          out,
          BF16,
          i * W + e,
          src === null ? 0 : get(mem, src[0], cacheDtype, (src[1] * bs + (i % bs)) * W + e),
        );
      if (kv === 0) continue;
      for (let h = 0; h < kvCount; h++)
        for (let c = 0; c < W - rank; c++)
          set(mem, kv, BF16, i * kvLd + kvOffset + h * kvStride + c, get(mem, out, BF16, i * W + rank + c));
    }
  };
  f.mlaPrefillSoftmax = (
    _stream: number,
    scores: number,
    probs: number,
    H: number,
    Q: number,
    nk: number,
    ld: number,
    firstPos: number,
    keyLimit: number,
    topk: number,
    K: number,
  ) => {
    fake.calls.push({ fn: "mlaPrefillSoftmax", args: [H, Q, nk, ld, firstPos, keyLimit, topk, K] });
    for (let h = 0; h < H; h++)
      for (let i = 0; i < Q; i++) {
        const row = (h * Q + i) * ld;
        const limit = Math.min(keyLimit, nk, firstPos + i + 1);
        const keys: number[] = [];
        if (topk === 0) for (let j = 0; j < limit; j++) keys.push(j);
        else
          for (let e = 0; e < K; e++) {
            const j = get(mem, topk, I32, i * K + e);
            if (j >= 0 && j < limit) keys.push(j);
          }
        const s = keys.map((j) => get(mem, scores, F32, row + j));
        const mx = Math.max(...s);
        const sum = s.reduce((a, v) => a + Math.exp(v - mx), 0);
        for (let j = 0; j < nk; j++) set(mem, probs, BF16, row + j, 0);
        for (const [n, j] of keys.entries()) set(mem, probs, BF16, row + j, Math.exp(s[n]! - mx) / sum);
      }
  };
}
