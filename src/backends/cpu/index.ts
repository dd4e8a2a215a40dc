/** The CPU backend: TypeScript ops on typed arrays (see README.md). */
export { CpuBackend, type CpuBackendOptions } from "./cpu_backend.js";
export { CHUNK_MACS } from "./dispatch.js";
export { bf16ToF32, f16ToF32, f32ToBf16 } from "./dtype.js";
export { argmaxRow, type RowSamplingSettings, sampleRowByRule } from "./kernels/sampling.js";
export { CpuTensor } from "./tensor.js";
