/**
 * OutputProcessor at the end of a request: text the incremental detokenizer still held (a
 * character left incomplete) is released by flush() and goes through the stop strings too; a
 * stop string found there ends the output as one found earlier does: text cut before it,
 * finish_reason "stop", stop_reason the string.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { asRequestId } from "../../../src/core/ids.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import type { EngineCoreOutput } from "../../../src/core/sched/output.js";
import { OutputProcessor } from "../../../src/engine/output_processor.js";
import type { Tokenizer } from "../../../src/tokenizer/tokenizer.js";

/**
 * A byte-level toy tokenizer: token 1 = "x", token 2 = "ab" followed by 0xC3, the first byte of
 * a two-byte character (so "...ab" + U+FFFD until a continuation byte comes, which never does).
 */
const BYTES: Record<number, number[]> = { 1: [0x78], 2: [0x61, 0x62, 0xc3] };
const toyTokenizer = {
  decode: (ids: readonly number[]) =>
    new TextDecoder("utf-8").decode(Uint8Array.from(ids.flatMap((id) => BYTES[id] ?? []))),
  isSpecialToken: () => false,
} as unknown as Tokenizer;

function coreOutput(newTokenIds: number[], finishReason: EngineCoreOutput["finishReason"]): EngineCoreOutput {
  return {
    reqId: asRequestId("r"),
    newTokenIds,
    newLogprobs: null,
    finishReason,
    stopReason: null,
    numPromptTokens: 1,
    numOutputTokens: newTokenIds.length,
    numCachedTokens: 0,
    numHostCachedTokens: 0,
  };
}

describe("OutputProcessor: stop strings in the text flushed at the end", () => {
  it('max_tokens ends the request on "ab" + an incomplete byte; stop "ab" in the flushed text -> "stop"', () => {
    const p = new OutputProcessor(toyTokenizer);
    p.addRequest("r", null, [1], makeSamplingParams({ stop: ["ab"], maxTokens: 2 }), "cumulative", 0);
    // Step 1: token "x" is complete and released.
    const s1 = p.process([coreOutput([1], null)], 1);
    assert.equal(s1.requestOutputs[0]!.outputs[0]!.text, "x");
    // Step 2: token 2 decodes to "ab\uFFFD", held by the detokenizer; the scheduler finishes the
    // request by length; the flush releases "ab\uFFFD", where the stop string "ab" is found.
    const s2 = p.process([coreOutput([2], "length")], 2);
    const c = s2.requestOutputs[0]!.outputs[0]!;
    assert.deepEqual([c.text, c.finishReason, c.stopReason], ["x", "stop", "ab"]);
    assert.equal(s2.requestOutputs[0]!.finished, true);
    assert.equal(p.numRequests, 0);
  });
});
