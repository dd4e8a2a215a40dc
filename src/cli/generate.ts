import type { Command } from "commander";
import { makeSamplingParams, validateSamplingParams } from "../core/sampling_params.js";
import { AsyncLLM } from "../engine/async_llm.js";
import { EngineInputError } from "../engine/llm_engine.js";
import { addEngineFlags, engineArgsFromOptions, parseFloatArg, parseIntArg } from "./engine_flags.js";
import { action } from "./errors.js";
import { parseTokenIdsArg } from "./parse_args.js";
import { loadProgressBar } from "./progress.js";

interface GenerateOptions extends Record<string, unknown> {
  chat: boolean;
  system?: string;
  maxTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  ignoreEos: boolean;
  stop?: string[];
  promptTokenIds?: number[];
}

/**
 * `hisparse generate "prompt"` (or `--prompt-token-ids 1,2,3`): streams a continuation (or a chat
 * reply) to stdout; the text, or the token ids (space-separated) when the model has no tokenizer.
 */
export function registerGenerate(program: Command): void {
  const cmd = program
    .command("generate")
    .description("generate a continuation of a prompt and stream it to stdout")
    .argument("[prompt]", "prompt text (or give --prompt-token-ids)")
    .option(
      "--prompt-token-ids <ids>",
      "the prompt as token ids instead of text: 1,2,3 or a JSON array [1,2,3]",
      parseTokenIdsArg,
    )
    .option("--chat", "treat the prompt as a user message and apply the model's chat template", false)
    .option("--system <text>", "system message (with --chat)")
    .option("--max-tokens <n>", "tokens to generate at most", parseIntArg, 128)
    .option("--temperature <t>", "sampling temperature (0 = greedy)", parseFloatArg, 0.8)
    .option("--top-p <p>", "nucleus sampling mass", parseFloatArg, 0.95)
    .option("--top-k <k>", "sample from the k most likely tokens (0 = all)", parseIntArg, 0)
    .option(
      "--stop <text>",
      "stop string (repeat for several)",
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option("--ignore-eos", "keep generating past the end-of-sequence token", false);
  addEngineFlags(cmd).action(action(runGenerate));
}

/** The sampling parameters `generate` sets from flags, by their API names (validateSamplingParams). */
const FLAG_OF: Record<string, string> = {
  max_tokens: "--max-tokens",
  temperature: "--temperature",
  top_p: "--top-p",
  top_k: "--top-k",
  seed: "--seed",
};

/** A sampling-parameter reason worded with the CLI flag instead of the API name it starts with. */
function asFlagReason(reason: string): string {
  return reason.replace(/^[a-z_]+/, (name) => FLAG_OF[name] ?? name);
}

/**
 * The prompt `generate` runs: the text argument or `--prompt-token-ids`, exactly one.
 * @throws EngineInputError (one line) when neither or both are given, or --chat with token ids.
 */
function promptOf(prompt: string | undefined, o: GenerateOptions): string | { promptTokenIds: number[] } {
  const ids = o.promptTokenIds;
  if (prompt !== undefined && ids !== undefined)
    throw new EngineInputError("give either a prompt or --prompt-token-ids, not both");
  if (ids !== undefined) {
    if (o.chat) throw new EngineInputError("--chat takes a text prompt, not --prompt-token-ids");
    return { promptTokenIds: ids };
  }
  if (prompt === undefined) throw new EngineInputError("give a prompt (text) or --prompt-token-ids");
  return prompt;
}

async function runGenerate(promptArg: string | undefined, o: GenerateOptions): Promise<void> {
  const prompt = promptOf(promptArg, o);
  const args = engineArgsFromOptions(o);
  const params = makeSamplingParams({
    maxTokens: o.maxTokens,
    temperature: o.temperature,
    topP: o.topP,
    topK: o.topK,
    seed: args.seed,
    stop: o.stop ?? [],
    ignoreEos: o.ignoreEos,
  });
  // Refuse bad sampling flags before spending time on loading the model.
  const reasons = validateSamplingParams(params);
  if (reasons.length > 0) throw new EngineInputError(reasons.map(asFlagReason).join("; "));
  const bar = loadProgressBar();
  let llm: AsyncLLM;
  try {
    llm = await AsyncLLM.create(args, { onLoadProgress: bar.onProgress });
  } finally {
    bar.stop();
  }
  try {
    let input: string | { prompt?: string; promptTokenIds: number[] } = prompt;
    if (o.chat && typeof prompt === "string") {
      const tok = llm.engine.tokenizer;
      if (tok === null) throw new EngineInputError("this model has no tokenizer, so --chat cannot be used");
      const messages = [
        ...(o.system === undefined ? [] : [{ role: "system", content: o.system }]),
        { role: "user", content: prompt },
      ];
      const text = tok.applyChatTemplate(messages, { addGenerationPrompt: true });
      input = { prompt: text, promptTokenIds: tok.encode(text, { addSpecialTokens: false }) };
    }
    // Without a tokenizer (a bare config.json with dummy weights) there is no text: the ids.
    const asIds = llm.engine.tokenizer === null;
    let first = true;
    for await (const out of llm.generate(input, params, { outputKind: "delta" })) {
      const o0 = out.outputs[0];
      const ids = o0?.tokenIds ?? [];
      const text = !asIds ? (o0?.text ?? "") : ids.length === 0 ? "" : `${first ? "" : " "}${ids.join(" ")}`;
      if (text.length > 0) {
        process.stdout.write(text);
        first = false;
      }
    }
    process.stdout.write("\n");
  } finally {
    await llm.shutdown();
  }
}
