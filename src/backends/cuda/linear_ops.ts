/**
 * `linear` of the CUDA backend and its fused forms: cuBLAS(Lt) (native/addon/blas.cc), or for at
 * most ctx.denseGemvMaxTokens rows the skinny GEMM of native/kernels/gemv.h, which also serves
 * linearSiluAndMul (gate_up + silu_and_mul) and linearRotaryEmbedding (q/k/v + RoPE), each bit
 * for bit the unfused pair on the skinny GEMM. Contracts: the Backend interface (../backend.ts).
 */

import type { DType, QkvLayout, Tensor } from "../backend.js";
import { type DevicePtr, DTYPE_CODE, GEMV_EPILOGUE, GEMV_MAX_TOKENS, NULL_PTR } from "./addon.js";
import { type CudaOpsContext, dim, FLOAT_DTYPES, qkvWidth, rotaryEmbedding, siluAndMul } from "./ops.js";
import { type CudaTensor, describe, expectDtype, expectShape } from "./tensor.js";

const GEMM_DTYPES: readonly DType[] = ["bf16", "f16"];

/** The checked operands of one linear call. */
interface LinearOperands {
  x: CudaTensor;
  w: CudaTensor;
  T: number;
  N: number;
  K: number;
  biasPtr: DevicePtr;
  /** DTYPE_CODE of the bias; 0 when there is none. */
  biasCode: number;
}

function linearOperands(ctx: CudaOpsContext, x: Tensor, weight: Tensor, bias: Tensor | null): LinearOperands {
  const xt = ctx.dev(x, "linear x");
  const w = ctx.dev(weight, "linear weight");
  expectShape(x, "linear x", [null, null]);
  expectDtype(x, "linear x", GEMM_DTYPES);
  const [T, K] = [dim(x, 0), dim(x, 1)];
  expectShape(weight, "linear weight", [null, K]);
  expectDtype(weight, "linear weight", [x.dtype]);
  const N = dim(weight, 0);
  let biasPtr = NULL_PTR;
  let biasCode = 0;
  if (bias !== null) {
    biasPtr = ctx.dev(bias, "linear bias").ptr;
    expectShape(bias, "linear bias", [N]);
    expectDtype(bias, "linear bias", FLOAT_DTYPES);
    biasCode = DTYPE_CODE[bias.dtype];
  }
  return { x: xt, w, T, N, K, biasPtr, biasCode };
}

/** True when the skinny GEMM takes this call: few rows, K a multiple of 8, 16-byte aligned operands. */
function useGemv(ctx: CudaOpsContext, o: LinearOperands): boolean {
  const limit = Math.min(ctx.denseGemvMaxTokens, GEMV_MAX_TOKENS);
  return o.T > 0 && o.T <= limit && o.K % 8 === 0 && o.x.ptr % 16 === 0 && o.w.ptr % 16 === 0;
}

/**
 * y = x @ weight^T + bias. x: [T, K] bf16|f16; weight: [N, K] (x's dtype); bias: [N] | null ->
 * [T, N] of outDtype (x's dtype or f32). T <= ctx.denseGemvMaxTokens: the skinny GEMM
 * (gemv.h: y = O(acc + bias)), else cuBLAS(Lt) (blas.cc).
 */
export function linear(
  ctx: CudaOpsContext,
  x: Tensor,
  weight: Tensor,
  bias: Tensor | null,
  outDtype: DType,
): Tensor {
  const o = linearOperands(ctx, x, weight, bias);
  if (outDtype !== x.dtype && outDtype !== "f32") {
    throw new Error(`linear: output dtype must be ${x.dtype} or f32, got ${outDtype}`);
  }
  const y = ctx.out([o.T, o.N], outDtype);
  const [inCode, outCode] = [DTYPE_CODE[x.dtype], DTYPE_CODE[outDtype]];
  if (useGemv(ctx, o)) {
    ctx.addon.denseGemv(
      ctx.stream,
      y.ptr,
      o.x.ptr,
      o.w.ptr,
      o.biasPtr,
      o.T,
      o.N,
      o.K,
      inCode,
      outCode,
      o.biasCode,
      GEMV_EPILOGUE.plain,
    );
    return y;
  }
  ctx.blas.linear(ctx.stream, y.ptr, o.x.ptr, o.w.ptr, o.biasPtr, o.T, o.N, o.K, inCode, outCode, o.biasCode);
  return y;
}

/**
 * silu(x @ gate^T + bias_g) * (x @ up^T + bias_u) with weight = [gate; up] [2I, K] (Backend.
 * linearSiluAndMul): bit for bit siluAndMul(linear(x, weight, bias)). Few rows: one skinny GEMM
 * with the silu_and_mul epilogue; otherwise the two ops. x: [T, K] -> [T, I] of x's dtype.
 */
export function linearSiluAndMul(
  ctx: CudaOpsContext,
  x: Tensor,
  weight: Tensor,
  bias: Tensor | null,
): Tensor {
  const o = linearOperands(ctx, x, weight, bias);
  if (o.N % 2 !== 0)
    throw new Error(`linearSiluAndMul: the weight's rows must be even, got ${describe(weight)}`);
  if (!useGemv(ctx, o)) return siluAndMul(ctx, linear(ctx, x, weight, bias, x.dtype));
  const y = ctx.out([o.T, o.N / 2], x.dtype);
  const code = DTYPE_CODE[x.dtype];
  ctx.addon.denseGemv(
    ctx.stream,
    y.ptr,
    o.x.ptr,
    o.w.ptr,
    o.biasPtr,
    o.T,
    o.N,
    o.K,
    code,
    code,
    o.biasCode,
    GEMV_EPILOGUE.siluAndMul,
  );
  return y;
}

/**
 * rotaryEmbedding(linear(x, weight, bias), layout, positions, cosSinCache), bit for bit
 * (Backend.linearRotaryEmbedding): one skinny GEMM with the RoPE epilogue when x has few rows and
 * the rotary is full (cosSinCache width = headDim); otherwise the two ops.
 * x: [T, K]; weight: [(Hq + 2Hkv) * D, K] -> qkv [T, (Hq + 2Hkv) * D] (x's dtype).
 */
export function linearRotaryEmbedding(
  ctx: CudaOpsContext,
  x: Tensor,
  weight: Tensor,
  bias: Tensor | null,
  layout: QkvLayout,
  positions: Tensor,
  cosSinCache: Tensor,
): Tensor {
  const o = linearOperands(ctx, x, weight, bias);
  const R = dim(cosSinCache, 1);
  if (!useGemv(ctx, o) || R !== layout.headDim || o.N !== qkvWidth(layout)) {
    const qkv = linear(ctx, x, weight, bias, x.dtype);
    rotaryEmbedding(ctx, qkv, layout, positions, cosSinCache);
    return qkv;
  }
  const pos = ctx.dev(positions, "linearRotaryEmbedding positions");
  const cs = ctx.dev(cosSinCache, "linearRotaryEmbedding cosSinCache");
  expectShape(positions, "linearRotaryEmbedding positions", [o.T]);
  expectDtype(positions, "linearRotaryEmbedding positions", ["i32"]);
  expectDtype(cosSinCache, "linearRotaryEmbedding cosSinCache", ["f32"]);
  const y = ctx.out([o.T, o.N], x.dtype);
  ctx.addon.denseGemvRope(
    ctx.stream,
    y.ptr,
    o.x.ptr,
    o.w.ptr,
    o.biasPtr,
    pos.ptr,
    cs.ptr,
    o.T,
    o.N,
    o.K,
    layout.headDim,
    layout.numHeads + layout.numKvHeads,
    dim(cosSinCache, 0),
    DTYPE_CODE[x.dtype],
    o.biasCode,
  );
  return y;
}
