/**
 * A library user's script that never calls shutdown() (run by lifecycle.test.ts in its own
 * process): it generates, prints `RESULT <text>` and ends its code there. The process must exit
 * by itself: the engine's worker thread keeps it alive only while a call runs.
 * argv[2]: "llm" (LLM.generate) or "async" (AsyncLLM streaming); argv[3]: executor ("thread" or
 * "inproc").
 */
import { AsyncLLM, LLM, makeEngineArgs, makeSamplingParams } from "../../../src/index.js";
import { refModelDir } from "../../helpers/reference.js";

const mode = process.argv[2] ?? "llm";
const args = {
  model: refModelDir("ref-small")!,
  device: "cpu" as const,
  maxModelLen: 64,
  inprocWorker: process.argv[3] === "inproc",
};
if (mode === "llm") {
  const llm = new LLM(args);
  const [out] = await llm.generate("The Linux kernel", { temperature: 0, maxTokens: 8 });
  console.log(`RESULT ${JSON.stringify(out!.outputs[0]!.text)}`);
} else {
  const llm = await AsyncLLM.create(makeEngineArgs(args));
  let text = "";
  for await (const o of llm.generate(
    "The Linux kernel",
    makeSamplingParams({ temperature: 0, maxTokens: 8 }),
  )) {
    text += o.outputs[0]!.text;
  }
  console.log(`RESULT ${JSON.stringify(text)}`);
}
