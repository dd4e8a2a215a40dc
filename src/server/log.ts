import { Writable } from "node:stream";
import { type Logger, pino } from "pino";

/** How the server writes its log: pino's JSON lines, or one plain text line per entry. */
export type LogFormat = "json" | "text";

/** pino level numbers -> names (pino's defaults). */
const LEVEL_NAMES: Readonly<Record<number, string>> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};

/**
 * Formats one pino JSON line as `INFO 2025-01-31 12:00:00 message` (vLLM's style), with an
 * error's message appended when the entry carries one. Lines that are not JSON pass through.
 */
export function formatLogLine(jsonLine: string): string {
  let entry: { level?: number; time?: number; msg?: string; err?: { message?: string } };
  try {
    entry = JSON.parse(jsonLine);
  } catch {
    return jsonLine;
  }
  const level = LEVEL_NAMES[entry.level ?? 30] ?? "INFO";
  const time = new Date(entry.time ?? Date.now()).toISOString().replace("T", " ").slice(0, 19);
  const err =
    entry.err?.message !== undefined && !entry.msg?.includes(entry.err.message)
      ? ` (${entry.err.message})`
      : "";
  return `${level} ${time} ${entry.msg ?? ""}${err}`;
}

/**
 * A pino logger writing to `out` (default stdout) at `level`, in JSON or plain text.
 * The text form is formatted synchronously on this thread (no transport worker).
 */
export function createLogger(
  format: LogFormat,
  level = "info",
  out: NodeJS.WritableStream = process.stdout,
): Logger {
  if (format === "json") return pino({ level }, out as Writable);
  const text = new Writable({
    write(chunk: Buffer, _enc, cb) {
      const lines = chunk
        .toString("utf8")
        .split("\n")
        .filter((l) => l.length > 0);
      out.write(`${lines.map(formatLogLine).join("\n")}\n`);
      cb();
    },
  });
  return pino({ level }, text);
}
