/**
 * Single-request decode speed of the whole engine on the CPU backend (issue 2's benchmark):
 * `npx tsx bench/cpu_decode.ts [--model DIR] [--tokens N] [--threads 1,2]`.
 * For each CPU thread count, generates N greedy tokens (ignore EOS) after a short prompt through
 * `LLM` (worker-thread executor, as `hisparse generate` runs), after one warm-up request, and
 * reports decode tokens/s = (N - 1) / (last token time - first token time), plus TTFT.
 */
import { LLM } from "../src/engine/llm.js";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1]! : fallback;
}

const model = arg("model", "");
const tokens = Number(arg("tokens", "256"));
const threads = arg("threads", "1,2").split(",").map(Number);
const prompt = "The Linux kernel";

console.log(`| threads | prompt tokens | generated | TTFT ms | decode tok/s |`);
console.log(`|---|---|---|---|---|`);
for (const t of threads) {
  const llm = new LLM({
    ...(model ? { model } : {}),
    device: "cpu",
    cpuThreads: t,
    maxModelLen: tokens + 64,
  });
  try {
    await llm.generate(prompt, { temperature: 0, maxTokens: 16, ignoreEos: true }); // warm-up
    const [out] = await llm.generate(prompt, { temperature: 0, maxTokens: tokens, ignoreEos: true });
    const m = out!.metrics;
    const decodeS = m.lastTokenTime! - m.firstTokenTime!;
    const rate = (out!.outputs[0]!.tokenIds.length - 1) / decodeS;
    const ttftMs = (m.firstTokenTime! - m.arrivalTime) * 1000;
    console.log(
      `| ${t} | ${out!.promptTokenIds.length} | ${out!.outputs[0]!.tokenIds.length} | ${ttftMs.toFixed(1)} | ${rate.toFixed(1)} |`,
    );
  } finally {
    await llm.shutdown();
  }
}
