/**
 * Reply formatting helpers: logprobs in both OpenAI shapes, SSE events, error bodies, API-key
 * checks and the text log line.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { TokenLogprobs } from "../../../src/core/sched/output.js";
import { EngineInputError } from "../../../src/engine/llm_engine.js";
import { ApiKeyAuth, isProtected } from "../../../src/server/auth.js";
import { OpenAIError, toOpenAIError } from "../../../src/server/errors.js";
import { formatLogLine } from "../../../src/server/log.js";
import {
  appendCompletionLogprobs,
  chatLogprobEntries,
  emptyCompletionLogprobs,
  MIN_LOGPROB,
} from "../../../src/server/logprobs.js";
import { SSE_DONE, sseEvent } from "../../../src/server/sse.js";
import { TokenizerError } from "../../../src/tokenizer/errors.js";

/** A toy vocabulary: id -> text. */
const VOCAB: Record<number, string> = { 1: " the", 2: " a", 3: "é", 4: " kernel" };
const text = (id: number) => VOCAB[id] ?? `<${id}>`;

/** Two sampled tokens: " the" (top-1) then " kernel" (rank 3, not in the top-2). */
const LPS: TokenLogprobs[] = [
  { sampledLogprob: -0.5, sampledRank: 1, topTokenIds: [1, 2], topLogprobs: [-0.5, -1.5] },
  { sampledLogprob: Number.NEGATIVE_INFINITY, sampledRank: 3, topTokenIds: [3, 2], topLogprobs: [-0.1, -2] },
];

describe("logprobs", () => {
  it("completions: parallel arrays, the sampled token added to its top dict, offsets in chars", () => {
    const lp = emptyCompletionLogprobs();
    const end = appendCompletionLogprobs(lp, [1, 4], LPS, text, 10);
    assert.equal(end, 10 + " the".length + " kernel".length);
    assert.deepEqual(lp, {
      tokens: [" the", " kernel"],
      token_logprobs: [-0.5, MIN_LOGPROB],
      top_logprobs: [
        { " the": -0.5, " a": -1.5 },
        { é: -0.1, " a": -2, " kernel": MIN_LOGPROB },
      ],
      text_offset: [10, 14],
    });
  });

  it("chat: token, logprob, UTF-8 bytes and top_logprobs entries (top N only)", () => {
    assert.deepEqual(chatLogprobEntries([1, 4], LPS, text, 1), [
      {
        token: " the",
        logprob: -0.5,
        bytes: [32, 116, 104, 101],
        top_logprobs: [{ token: " the", logprob: -0.5, bytes: [32, 116, 104, 101] }],
      },
      {
        token: " kernel",
        logprob: MIN_LOGPROB,
        bytes: [...Buffer.from(" kernel")],
        top_logprobs: [{ token: "é", logprob: -0.1, bytes: [0xc3, 0xa9] }],
      },
    ]);
    assert.deepEqual(
      chatLogprobEntries([1], LPS.slice(0, 1), text, 0).map((e) => e.top_logprobs),
      [[]],
    );
  });
});

describe("SSE and errors", () => {
  it("an event is `data: <json>` and a blank line; the stream ends with [DONE]", () => {
    assert.equal(sseEvent({ a: 1, b: "x\ny" }), 'data: {"a":1,"b":"x\\ny"}\n\n');
    assert.equal(SSE_DONE, "data: [DONE]\n\n");
  });

  it("OpenAIError bodies carry message, type, param and code", () => {
    assert.deepEqual(new OpenAIError(404, "The model `x` does not exist.", "model").toBody(), {
      error: { message: "The model `x` does not exist.", type: "NotFoundError", param: "model", code: 404 },
    });
    assert.deepEqual(new OpenAIError(503, "busy").toBody().error.type, "ServiceUnavailableError");
  });

  it("engine and tokenizer errors are the client's (400); others are 500", () => {
    const a = toOpenAIError(new EngineInputError("token id 9 is out of vocabulary (size 4)", "prompt"));
    assert.deepEqual(
      [a.status, a.param, a.message],
      [400, "prompt", "token id 9 is out of vocabulary (size 4)"],
    );
    const b = toOpenAIError(new TokenizerError("the chat template failed to render (boom)"));
    assert.deepEqual([b.status, b.param], [400, "messages"]);
    const c = toOpenAIError(new Error("worker died"));
    assert.deepEqual([c.status, c.type, c.message], [500, "InternalServerError", "worker died"]);
  });
});

describe("API key", () => {
  const auth = new ApiKeyAuth("sk-123");

  it("accepts only `Bearer <key>` (scheme case-insensitive)", () => {
    assert.equal(auth.accepts("Bearer sk-123"), true);
    assert.equal(auth.accepts("bearer sk-123"), true);
    assert.equal(auth.accepts("Bearer sk-1234"), false);
    assert.equal(auth.accepts("Bearer sk-12"), false);
    assert.equal(auth.accepts("Basic sk-123"), false);
    assert.equal(auth.accepts("sk-123"), false);
    assert.equal(auth.accepts(undefined), false);
  });

  it("protects /v1 only; a wrong key is OpenAI's invalid_api_key error", () => {
    assert.deepEqual(
      ["/v1/models", "/v1", "/v1/chat/completions?x=1", "/health", "/metrics", "/version", "/v10"].map(
        isProtected,
      ),
      [true, true, true, false, false, false, false],
    );
    auth.check("/health", undefined);
    try {
      auth.check("/v1/models", "Bearer nope");
      assert.fail("expected 401");
    } catch (e) {
      assert.ok(e instanceof OpenAIError);
      assert.deepEqual(e.toBody(), {
        error: {
          message: "Incorrect API key provided.",
          type: "invalid_request_error",
          param: null,
          code: "invalid_api_key",
        },
      });
    }
    assert.throws(() => new ApiKeyAuth(""), /must not be empty/);
  });
});

describe("text log lines", () => {
  it("formats pino JSON as LEVEL time message (+ the error's message)", () => {
    const t = Date.UTC(2025, 0, 31, 12, 0, 5);
    assert.equal(
      formatLogLine(JSON.stringify({ level: 30, time: t, msg: "ready" })),
      "INFO 2025-01-31 12:00:05 ready",
    );
    assert.equal(
      formatLogLine(JSON.stringify({ level: 50, time: t, msg: "step failed", err: { message: "oom" } })),
      "ERROR 2025-01-31 12:00:05 step failed (oom)",
    );
    assert.equal(formatLogLine("not json"), "not json");
  });
});
