/**
 * The library's lifecycle: a call after shutdown() is refused with a clear error (it must not
 * start a second engine whose thread keeps the process running), a script that forgets
 * shutdown() exits by itself within 5 s of its last result (LLM and AsyncLLM, thread and
 * in-process executors), and a text prompt whose length alone proves it too long is refused
 * without being tokenized.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { makeEngineArgs } from "../../../src/config/engine_args.js";
import { makeSamplingParams } from "../../../src/core/sampling_params.js";
import { AsyncLLM } from "../../../src/engine/async_llm.js";
import { LLM } from "../../../src/engine/llm.js";
import { EngineInputError, EngineShutdownError } from "../../../src/engine/llm_engine.js";
import { refModelDir } from "../../helpers/reference.js";

const MODEL = refModelDir("ref-small")!;
const SCRIPT = fileURLToPath(new URL("./no_shutdown_script.ts", import.meta.url));
/** The bound: the process is gone within this long after its last result. */
const EXIT_WITHIN_MS = 5000;

/**
 * Runs the script; returns its exit code, its RESULT line, and the ms between that line
 * reaching us and the process exiting.
 */
function runScript(
  mode: string,
  executor: string,
): Promise<{ code: number | null; result: string; exitAfterMs: number; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", SCRIPT, mode, executor], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let stderr = "";
    let resultAt: number | null = null;
    const killer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    child.stdout.on("data", (d) => {
      out += d;
      if (resultAt === null && out.includes("RESULT ")) {
        resultAt = performance.now();
        // A process still alive well past the bound will not exit: stop waiting for it.
        setTimeout(() => child.kill("SIGKILL"), 2 * EXIT_WITHIN_MS).unref();
      }
    });
    child.stderr.on("data", (d) => {
      stderr += d;
    });
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(killer);
      const line = out.split("\n").find((l) => l.startsWith("RESULT ")) ?? "";
      resolve({
        code,
        result: line,
        exitAfterMs: resultAt === null ? Number.NaN : performance.now() - resultAt,
        stderr,
      });
    });
  });
}

describe("library lifecycle (ref-small, CPU)", () => {
  for (const [mode, executor] of [
    ["llm", "thread"],
    ["async", "thread"],
    ["llm", "inproc"],
  ] as const) {
    it(`a script without shutdown() exits by itself within 5 s of its last result (${mode === "llm" ? "LLM" : "AsyncLLM"}, ${executor} executor)`, async () => {
      const r = await runScript(mode, executor);
      assert.equal(r.code, 0, `exit code (stderr: ${r.stderr.slice(-500)})`);
      assert.match(r.result, /^RESULT ".+"$/, "the script printed its result");
      assert.ok(r.exitAfterMs <= EXIT_WITHIN_MS, `exited ${r.exitAfterMs.toFixed(0)} ms after its result`);
    });
  }

  it("generate() and chat() after shutdown() reject with EngineShutdownError and start no engine", async () => {
    const llm = new LLM({ model: MODEL, device: "cpu", maxModelLen: 64 });
    const [out] = await llm.generate("The Linux kernel", { temperature: 0, maxTokens: 2 });
    assert.equal(out!.outputs[0]!.tokenIds.length, 2);
    await llm.shutdown();
    for (const call of [
      () => llm.generate("again", { maxTokens: 2 }),
      () => llm.chat([{ role: "user", content: "hi" }]),
      () => llm.getEngine(),
    ]) {
      await assert.rejects(call(), (e: Error) => {
        assert.ok(e instanceof EngineShutdownError);
        assert.equal(e.message, "this LLM was shut down; create a new LLM to generate again");
        return true;
      });
    }
    // shutdown() stays idempotent.
    await llm.shutdown();
  });

  it("an LLM shut down before its first call refuses calls too", async () => {
    const llm = new LLM({ model: MODEL, device: "cpu" });
    await llm.shutdown();
    await assert.rejects(llm.generate("x"), EngineShutdownError);
  });

  it("AsyncLLM.generate() after shutdown() throws EngineShutdownError", async () => {
    const llm = await AsyncLLM.create(makeEngineArgs({ model: MODEL, device: "cpu", maxModelLen: 64 }));
    await llm.shutdown();
    assert.throws(
      () => llm.generate("x", makeSamplingParams({ maxTokens: 1 })),
      (e: Error) => e instanceof EngineShutdownError && /this AsyncLLM was shut down/.test(e.message),
    );
  });

  it("a 4 MiB text prompt is refused by the length bound, untokenized", async () => {
    const llm = new LLM({ model: MODEL, device: "cpu", maxModelLen: 64 });
    try {
      await assert.rejects(llm.generate("x".repeat(4 * 2 ** 20), { maxTokens: 1 }), (e: Error) => {
        assert.ok(e instanceof EngineInputError);
        assert.match(
          e.message,
          /^the prompt is 4194304 bytes long, so at least \d+ tokens, but the maximum model length is 64/,
        );
        return true;
      });
    } finally {
      await llm.shutdown();
    }
  });
});
