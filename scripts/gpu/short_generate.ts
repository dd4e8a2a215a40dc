/**
 * A short generation on the CUDA backend, for compute-sanitizer (GPU machine):
 *   compute-sanitizer --tool memcheck node dist/scripts/gpu/short_generate.js
 * Runs the engine in-process (prefill, graph capture, replayed decode, device sampling) on the
 * bundled ref-small and prints the text.
 */
import { LLM } from "../../src/engine/llm.js";

const llm = new LLM({ device: "cuda", inprocWorker: true, maxModelLen: 128, gpuMemoryUtilization: 0.2 });
const outs = await llm.generate(["The Linux kernel", "def fibonacci(n):"], {
  temperature: 0.7,
  seed: 1,
  maxTokens: 12,
  ignoreEos: true,
});
for (const o of outs) console.log(JSON.stringify(o.outputs[0]!.text));
await llm.shutdown();
console.log("short_generate: ok");
