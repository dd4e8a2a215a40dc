/**
 * How the CLI reports failures: one line `hisparse: <message>` on stderr and exit code 1
 * (2 for usage errors, as commander does). Stack traces only with HISPARSE_DEBUG=1.
 */
export function reportError(e: unknown): never {
  const err = e instanceof Error ? e : new Error(String(e));
  if (process.env.HISPARSE_DEBUG === "1") console.error(err.stack ?? err.message);
  else console.error(`hisparse: ${oneLine(err.message)}`);
  process.exit(1);
}

/** First line of a message, with the config-error bullet list folded into it. */
function oneLine(message: string): string {
  const lines = message
    .split("\n")
    .map((l) => l.trim().replace(/^- /, ""))
    .filter((l) => l.length > 0);
  if (lines.length <= 1) return lines[0] ?? "unknown error";
  return `${lines[0]} ${lines.slice(1).join("; ")}`;
}

/** Wraps a command action so any error is reported as one line. */
export function action<A extends unknown[]>(
  fn: (...args: A) => Promise<void>,
): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (e) {
      reportError(e);
    }
  };
}
