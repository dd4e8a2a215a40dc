/**
 * Progress lines for logs (bench serve when stderr is not a terminal): a line at the start, one
 * per interval while requests run (driven here by a fake timer), failures counted, a last line.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { progressLines } from "../../../src/cli/progress.js";

describe("progressLines", () => {
  it("start, every interval, failures, stop", () => {
    const lines: string[] = [];
    let now = 100;
    let tick: (() => void) | null = null;
    let stopped = 0;
    const p = progressLines("bench", 10, {
      write: (l) => lines.push(l),
      now: () => now,
      every: (s, fn) => {
        assert.equal(s, 10);
        tick = fn;
        return () => {
          stopped++;
          tick = null;
        };
      },
    });
    p.start(4);
    assert.deepEqual(lines, ["[bench] 0/4 requests done, 0.0 s"]);
    p.tick(true);
    p.tick(false);
    now = 110.5;
    tick!();
    assert.equal(lines.at(-1), "[bench] 2/4 requests done (1 failed), 10.5 s");
    p.tick(true);
    p.tick(true);
    now = 112;
    p.stop();
    assert.equal(lines.at(-1), "[bench] 4/4 requests done (1 failed), 12.0 s");
    assert.equal(stopped, 1);
    assert.equal(tick, null);
    assert.equal(lines.length, 3);
  });
});
