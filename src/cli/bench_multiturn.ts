/** `hisparse bench serve --dataset multiturn` (src/bench/multiturn.ts): the runs and their result file. */
import { mkdirSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import {
  buildConversations,
  formatMultiTurnReport,
  type MultiTurnOptions,
  runMultiTurn,
  summarizeMultiTurn,
} from "../bench/multiturn.js";
import { Rng } from "../bench/rng.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";

/** The `hisparse bench serve` options a multi-turn run reads (a part of bench.ts's). */
export interface MultiTurnBenchOptions {
  sweepConcurrency?: number[];
  multiturnConversations: number;
  multiturnTurns: number;
  multiturnFirstLen: number;
  multiturnTurnLen: number;
  randomOutputLen?: number;
  outputLen?: number;
  seed: number;
  ignoreEos: boolean;
  label?: string;
  saveResult: boolean;
  resultDir?: string;
  resultFilename?: string;
}

/**
 * `--dataset multiturn`: one run per conversation count (`--sweep-concurrency`, else
 * `--multiturn-conversations`), each printed as a report; `--save-result` writes their summaries.
 * `extraBody`: the request fields of `--extra-body` and the sampling flags (bench.ts extraBodyOf).
 * @throws Error when every request of a run failed (naming the first error).
 */
export async function runMultiTurnBench(
  o: MultiTurnBenchOptions,
  baseUrl: string,
  model: string,
  apiKey: string | undefined,
  tok: Tokenizer,
  extraBody: Record<string, unknown> | undefined,
): Promise<void> {
  const counts = o.sweepConcurrency ?? [o.multiturnConversations];
  const jsons: Record<string, unknown>[] = [];
  for (const conversations of counts) {
    const mo: MultiTurnOptions = {
      conversations,
      turns: o.multiturnTurns,
      firstLen: o.multiturnFirstLen,
      turnLen: o.multiturnTurnLen,
      outputLen: o.randomOutputLen ?? o.outputLen ?? 220,
    };
    const convs = buildConversations(tok, mo, new Rng(o.seed));
    const r = await runMultiTurn(
      { baseUrl, model, ignoreEos: o.ignoreEos, extraBody, apiKey, options: mo },
      convs,
      (t) => tok.encode(t, { addSpecialTokens: false }),
    );
    const sum = summarizeMultiTurn(r, mo);
    for (const l of formatMultiTurnReport(sum, mo, r)) console.log(l);
    const firstError = r.turns.flat().find((x) => !x.success)?.error;
    if (sum.completed === 0)
      throw new Error(`every multiturn request failed (first: ${firstError ?? "no detail"})`);
    jsons.push({
      date: new Date().toISOString(),
      label: o.label ?? null,
      model_id: model,
      dataset_name: "multiturn",
      turns: mo.turns,
      first_turn_len: mo.firstLen,
      later_turn_len: mo.turnLen,
      output_len: mo.outputLen,
      ...sum,
    });
  }
  if (o.saveResult) {
    const dir = o.resultDir ?? ".";
    const stamp = new Date().toISOString().replace(/[-:]/g, "").slice(0, 15);
    const path = join(dir, o.resultFilename ?? `${o.label ?? "multiturn"}-${basename(model)}-${stamp}.json`);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, `${JSON.stringify(jsons.length === 1 ? jsons[0] : jsons, null, 2)}\n`);
    console.log(`Result written to ${path}`);
  }
}
