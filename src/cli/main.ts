#!/usr/bin/env node
/**
 * The `hisparse` command line (commander): one sub-command per file in this folder. Usage
 * errors exit with code 2 and one line; runtime errors exit with code 1 and one line.
 */
import { Command, CommanderError } from "commander";
import { registerBench } from "./bench.js";
import { expandCompareArgs, registerEval } from "./eval.js";
import { registerGenerate } from "./generate.js";
import { packageVersion, registerInfo } from "./info.js";
import { registerPlan } from "./plan.js";
import { registerServe } from "./serve.js";

/** Builds the program with every sub-command registered. */
export function buildProgram(): Command {
  const program = new Command("hisparse")
    .description("LLM serving engine for long contexts with a Hybrid HiSparse KV cache")
    .version(packageVersion())
    .showSuggestionAfterError(true)
    .exitOverride()
    .configureOutput({
      outputError: (str, write) => write(`hisparse: ${str.replace(/^error: /, "").trimEnd()}\n`),
    });
  registerGenerate(program);
  registerInfo(program);
  registerServe(program);
  registerBench(program);
  registerEval(program);
  registerPlan(program);
  for (const c of program.commands) {
    c.exitOverride();
    c.configureOutput({
      outputError: (str, write) => write(`hisparse: ${str.replace(/^error: /, "").trimEnd()}\n`),
    });
  }
  return program;
}

export async function main(argv: string[]): Promise<void> {
  // `hisparse ... | head`: a closed pipe ends the command quietly, not with an EPIPE stack.
  for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code === "EPIPE") process.exit(0);
      throw e;
    });
  }
  try {
    await buildProgram().parseAsync(expandCompareArgs(argv));
  } catch (e) {
    if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2);
    throw e;
  }
}

await main(process.argv);
