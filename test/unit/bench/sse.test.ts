/** The SSE parser splits events however the bytes arrive. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SseParser } from "../../../src/bench/sse.js";

describe("SseParser", () => {
  it("events split across reads, CRLF line ends, comments and multi-line data", () => {
    const p = new SseParser();
    assert.deepEqual(p.push('data: {"a":'), []);
    assert.deepEqual(p.push("1}\n\n: ping\n\ndata: x\r\ndata: y\r\n\r\ndata:[DONE]"), ['{"a":1}', "x\ny"]);
    assert.equal(p.flush(), "[DONE]");
    assert.equal(p.flush(), null);
  });

  it("fields other than data are ignored", () => {
    const p = new SseParser();
    assert.deepEqual(p.push("event: message\nid: 3\ndata: z\n\nretry: 10\n\n"), ["z"]);
  });
});
