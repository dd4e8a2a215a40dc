/**
 * Entry point of the worker thread (see engine/executor.ts ThreadExecutor): receives init /
 * execute messages, runs the Worker, replies with results or errors (name and message kept).
 */
import { parentPort } from "node:worker_threads";
import type { EngineArgs } from "../config/engine_args.js";
import type { SchedulerOutput } from "../core/sched/output.js";
import { type RankInit, Worker } from "./worker.js";

/** init: `rank` under tensor parallelism (one thread per rank, engine/tp_executor.ts). */
type Msg = { type: "init"; args: EngineArgs; rank?: RankInit } | { type: "execute"; so: SchedulerOutput };

const port = parentPort;
if (port === null) throw new Error("worker/thread_main must run in a worker thread");
let worker: Worker | null = null;

function replyError(e: unknown): void {
  const err = e instanceof Error ? e : new Error(String(e));
  port!.postMessage({ type: "error", name: err.name, message: err.message, stack: err.stack });
}

port.on("message", async (m: Msg) => {
  try {
    if (m.type === "init") {
      let last = 0;
      worker = await Worker.create(
        m.args,
        (done, total) => {
          const now = Date.now();
          if (done === total || now - last > 50) {
            last = now;
            port.postMessage({ type: "progress", done, total });
          }
        },
        m.rank,
      );
      port.postMessage({ type: "ready", info: worker.info });
    } else if (m.type === "execute") {
      if (worker === null) throw new Error("worker is not initialised");
      port.postMessage({ type: "result", output: worker.executeModel(m.so) });
    }
  } catch (e) {
    replyError(e);
  }
});
