/** The CPU backend: TypeScript ops on typed arrays (see README.md). */
export { CHUNK_MACS, CpuBackend, type CpuBackendOptions } from "./cpu_backend.js";
export { bf16ToF32, f16ToF32, f32ToBf16 } from "./dtype.js";
export { argmaxRow, type RowSamplingSettings, sampleRowByRule } from "./kernels/sampling.js";
export { CpuTensor } from "./tensor.js";
