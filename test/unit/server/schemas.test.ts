/**
 * Request parsing at the edge: zod schemas, unsupported-field rules, and the error each bad
 * body turns into (status 400, the field in `param`, one sentence).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { OpenAIError } from "../../../src/server/errors.js";
import {
  CHAT_UNSUPPORTED,
  COMPLETION_UNSUPPORTED,
  chatCompletionRequestSchema,
  checkMessages,
  completionRequestSchema,
  parseBody,
} from "../../../src/server/schemas.js";

const completion = (body: unknown) => parseBody(body, completionRequestSchema, COMPLETION_UNSUPPORTED);
const chat = (body: unknown) => parseBody(body, chatCompletionRequestSchema, CHAT_UNSUPPORTED);

/** Runs `fn`, expects an OpenAIError, returns [status, param, message]. */
function failure(fn: () => unknown): [number, string | null, string] {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof OpenAIError, `expected OpenAIError, got ${e}`);
    return [e.status, e.param, e.message];
  }
  assert.fail("expected an error");
}

describe("completion request schema", () => {
  it("a mixed prompt array names the offending element, whichever shape it started as", () => {
    const cases: [unknown, string, RegExp][] = [
      [["a", 1], "prompt[1]", /expected string, received number/],
      [[1, "a"], "prompt[1]", /expected number, received string/],
      [[1, 2, 3.5], "prompt[2]", /expected int/],
      [
        [
          [1, 2],
          [3, "x"],
        ],
        "prompt[1][1]",
        /expected number, received string/,
      ],
      [[[1, 2], "a"], "prompt[1]", /expected array, received string/],
      [["a", "b", 3], "prompt[2]", /expected string, received number/],
    ];
    for (const [prompt, param, message] of cases) {
      const [status, p, msg] = failure(() => completion({ prompt }));
      assert.equal(status, 400);
      assert.equal(p, param, JSON.stringify(prompt));
      assert.match(msg, new RegExp(`^${param.replace(/[[\]]/g, "\\$&")}: `));
      assert.match(msg, message);
    }
  });

  it("accepts the four prompt shapes and keeps the sampling fields", () => {
    assert.equal(completion({ prompt: "hi" }).prompt, "hi");
    assert.deepEqual(completion({ prompt: ["a", "b"] }).prompt, ["a", "b"]);
    assert.deepEqual(completion({ prompt: [1, 2, 3] }).prompt, [1, 2, 3]);
    assert.deepEqual(completion({ prompt: [[1], [2, 3]] }).prompt, [[1], [2, 3]]);
    const r = completion({
      prompt: "x",
      max_tokens: 5,
      temperature: 0,
      n: 2,
      stop: "\n",
      logprobs: 3,
      seed: -4,
    });
    assert.deepEqual([r.max_tokens, r.temperature, r.n, r.stop, r.logprobs, r.seed], [5, 0, 2, "\n", 3, -4]);
  });

  it("ignores harmless unknown fields (user, metadata, anything else)", () => {
    const r = completion({ prompt: "x", user: "u1", metadata: { a: 1 }, frobnicate: true });
    assert.deepEqual(Object.keys(r).sort(), ["prompt"]);
  });

  it("accepts unsupported fields only at their neutral values", () => {
    assert.equal(
      completion({ prompt: "x", echo: false, suffix: null, logit_bias: {}, priority: 0 }).prompt,
      "x",
    );
    assert.deepEqual(
      failure(() => completion({ prompt: "x", echo: true })),
      [400, "echo", "echo is not supported by this server; remove it from the request"],
    );
    assert.equal(failure(() => completion({ prompt: "x", suffix: "s" }))[1], "suffix");
    assert.equal(failure(() => completion({ prompt: "x", logit_bias: { 1: 2 } }))[1], "logit_bias");
    assert.equal(failure(() => completion({ prompt: "x", use_beam_search: true }))[1], "use_beam_search");
    assert.equal(failure(() => completion({ prompt: "x", guided_json: {} }))[1], "guided_json");
  });

  it("names the first bad field in the message and in param", () => {
    assert.deepEqual(
      failure(() => completion({})),
      [400, "prompt", "prompt is required"],
    );
    assert.deepEqual(
      failure(() => completion({ prompt: "x", max_tokens: "5" })),
      [400, "max_tokens", "max_tokens: Invalid input: expected number, received string"],
    );
    assert.deepEqual(
      failure(() => completion({ prompt: "x", n: 0 })),
      [400, "n", "n: Too small: expected number to be >=1"],
    );
    assert.deepEqual(
      failure(() => completion({ prompt: ["a", 7] })),
      [400, "prompt[1]", "prompt[1]: Invalid input: expected string, received number"],
    );
    assert.deepEqual(
      failure(() => completion({ prompt: true })),
      [400, "prompt", "prompt: Invalid input: expected string or array"],
    );
    assert.deepEqual(
      failure(() => completion([1])),
      [400, null, "the request body must be a JSON object"],
    );
  });
});

describe("chat request schema", () => {
  it("accepts string, text-part and null (assistant) contents", () => {
    const r = chat({
      messages: [
        { role: "system", content: "s" },
        { role: "user", content: [{ type: "text", text: "a" }] },
        { role: "assistant", content: null },
      ],
      logprobs: true,
      top_logprobs: 2,
    });
    assert.deepEqual(
      r.messages.map((m) => m.role),
      ["system", "user", "assistant"],
    );
    assert.equal(r.top_logprobs, 2);
  });

  it("resolves union failures to the branch that matched the input's shape", () => {
    assert.deepEqual(
      failure(() => chat({ messages: [{ role: "user", content: [{ type: "image_url", image_url: {} }] }] })),
      [
        400,
        "messages[0].content[0].type",
        "messages[0].content[0].type: only text content parts are supported",
      ],
    );
    assert.deepEqual(
      failure(() => chat({ messages: [{ role: "user", content: 3 }] })),
      [400, "messages[0].content", "messages[0].content: Invalid input: expected string or array or null"],
    );
  });

  it("rejects roles outside OpenAI's, empty message lists, tools and tool calls", () => {
    assert.equal(failure(() => chat({ messages: [{ role: "robot", content: "x" }] }))[1], "messages[0].role");
    assert.equal(failure(() => chat({ messages: [] }))[1], "messages");
    assert.equal(
      failure(() => chat({ messages: [{ role: "user", content: "x" }], tools: [{}] }))[1],
      "tools",
    );
    assert.equal(
      failure(() => chat({ messages: [{ role: "user", content: "x" }], tool_choice: "required" }))[1],
      "tool_choice",
    );
    assert.equal(
      chat({ messages: [{ role: "user", content: "x" }], tool_choice: "none", tools: [] }).n,
      undefined,
    );
    assert.deepEqual(
      failure(() =>
        checkMessages({ messages: [{ role: "assistant", content: "", tool_calls: [{ id: "1" }] }] }),
      ),
      [400, "messages[0].tool_calls", "tool calls are not supported by this server"],
    );
  });
});
