/**
 * hisparse's library API: `LLM` for offline generation, `AsyncLLM` / `LLMEngine` for serving,
 * and the types they take and give.
 */
export { type EngineArgs, makeEngineArgs } from "./config/engine_args.js";
export type { ModelConfig } from "./config/model_config.js";
export { RequestStatus } from "./core/request.js";
export { makeSamplingParams, type SamplingParams } from "./core/sampling_params.js";
export { AsyncLLM } from "./engine/async_llm.js";
export { KVCacheCapacityError } from "./engine/kv_capacity.js";
export { type GenerateOptions, LLM, type LLMOptions } from "./engine/llm.js";
export { EngineInputError, EngineShutdownError, LLMEngine, type PromptInput } from "./engine/llm_engine.js";
export type { CompletionOutput, RequestOutput, RequestOutputKind } from "./engine/outputs.js";
export { type RunningServer, type ServerOptions, startServer } from "./server/server.js";
export { Tokenizer } from "./tokenizer/tokenizer.js";
