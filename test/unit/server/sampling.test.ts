/**
 * OpenAI fields -> SamplingParams and vLLM's context-length rules, with the exact messages.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { OpenAIError } from "../../../src/server/errors.js";
import { checkRequestFields, resolveMaxTokens, toSamplingParams } from "../../../src/server/sampling.js";

function error(fn: () => unknown): OpenAIError {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof OpenAIError);
    return e;
  }
  assert.fail("expected an error");
}

describe("resolveMaxTokens (max_model_len 100)", () => {
  it("defaults to the rest of the context (vLLM's default_max_tokens)", () => {
    assert.equal(resolveMaxTokens(undefined, 30, 100, "messages"), 70);
    assert.equal(resolveMaxTokens(null, 99, 100, "prompt"), 1);
    assert.equal(resolveMaxTokens(70, 30, 100, "prompt"), 70);
  });

  it("prompt + max_tokens over the limit: vLLM's message, param = the field", () => {
    const e = error(() => resolveMaxTokens(71, 30, 100, "messages", "max_completion_tokens"));
    assert.equal(e.status, 400);
    assert.equal(e.param, "max_completion_tokens");
    assert.equal(
      e.message,
      "This model's maximum context length is 100 tokens. However, you requested 101 tokens (30 in the messages, 71 in the completion). Please reduce the length of the messages or completion.",
    );
  });

  it("a prompt that fills the context is refused whatever max_tokens is", () => {
    const e = error(() => resolveMaxTokens(undefined, 100, 100, "prompt"));
    assert.equal(e.param, "prompt");
    assert.equal(
      e.message,
      "This model's maximum context length is 100 tokens. However, you requested 100 tokens in the prompt. Please reduce the length of the prompt.",
    );
  });

  it("max_tokens below 1 is refused before the length check", () => {
    assert.equal(
      error(() => resolveMaxTokens(0, 200, 100, "prompt")).message,
      "max_tokens must be at least 1, got 0.",
    );
    assert.equal(error(() => resolveMaxTokens(-3, 1, 100, "prompt")).param, "max_tokens");
  });
});

describe("toSamplingParams", () => {
  it("maps OpenAI and vLLM fields onto SamplingParams; choice i gets seed + i", () => {
    const r = {
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      min_p: 0.1,
      seed: 11,
      stop: "END",
      stop_token_ids: [7],
      ignore_eos: true,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      repetition_penalty: 1.1,
      min_tokens: 2,
      skip_special_tokens: false,
    };
    assert.deepEqual(
      toSamplingParams(r, 20, 3, 2),
      makeSamplingParams({
        maxTokens: 20,
        minTokens: 2,
        temperature: 0.5,
        topP: 0.9,
        topK: 40,
        minP: 0.1,
        seed: 13,
        stop: ["END"],
        stopTokenIds: [7],
        ignoreEos: true,
        repetitionPenalty: 1.1,
        presencePenalty: 0.5,
        frequencyPenalty: -0.5,
        logprobs: 3,
        skipSpecialTokens: false,
      }),
    );
  });

  it("defaults are vLLM's (temperature 1, top_p 1, no seed, no stop)", () => {
    assert.deepEqual(toSamplingParams({}, 16, null, 0), makeSamplingParams({ maxTokens: 16 }));
  });

  it("out-of-range values become a 400 naming the field (the engine's validation)", () => {
    const e = error(() => toSamplingParams({ top_p: 2 }, 16, null, 0));
    assert.deepEqual([e.status, e.param, e.message], [400, "top_p", "top_p must be in (0, 1], got 2"]);
    assert.equal(error(() => toSamplingParams({ stop: ["a", ""] }, 16, null, 0)).param, "stop");
    assert.equal(error(() => toSamplingParams({ min_tokens: 5 }, 4, null, 0)).param, "min_tokens");
  });
});

describe("checkRequestFields", () => {
  it("stream_options needs stream: true", () => {
    checkRequestFields({ stream: true, stream_options: { include_usage: true } });
    const e = error(() => checkRequestFields({ stream_options: { include_usage: true } }));
    assert.deepEqual(
      [e.param, e.message],
      ["stream_options", "stream_options can only be given when stream is true"],
    );
  });

  it("seed + n - 1 must stay a safe integer", () => {
    checkRequestFields({ seed: Number.MAX_SAFE_INTEGER, n: 1 });
    assert.equal(error(() => checkRequestFields({ seed: Number.MAX_SAFE_INTEGER, n: 2 })).param, "seed");
  });
});
